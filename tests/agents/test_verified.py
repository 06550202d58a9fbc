"""``saag+s<N>`` control flow with in-process doubles (the HTTP path: tests/evaluation/test_verified_selection.py)."""

from __future__ import annotations

import pytest

from saag_opt.agents import MechanismContext, mechanism_names, parse_mechanism
from saag_opt.agents.mechanisms import spread_temperatures
from saag_opt.errors import ConfigError
from saag_opt.model import Prediction
from tests.agents.agent_fakes import BAD_NAME, GOOD, FakeAgent, FakeReviewer, weather_example

ABSTAIN = Prediction((), raw="No function applies.", status="empty")


def _by_temperature(*predictions: Prediction) -> FakeAgent:
    """Candidate k (as ``spread_temperatures`` samples them) is ``predictions[k]``; the base call is the first."""
    temps = {t: k for k, t in enumerate(spread_temperatures(len(predictions)))}
    return FakeAgent(lambda turns, t: predictions[temps.get(t, 0) if t is not None else 0])


def test_it_is_registered_with_the_selector_as_its_component() -> None:
    mech = parse_mechanism("saag+s3")
    assert mech.spec == "saag+s3" and mech.components == ("select",) and mech.candidates == 3 and mech.experimental
    assert "saag+s<N>" in mechanism_names() and "gate+saag+s<N>" in mechanism_names(reviewer_only=True)
    with pytest.raises(ConfigError, match="needs a reviewer"):
        mech.run(weather_example(), _by_temperature(GOOD), None, ctx=MechanismContext())


def test_the_first_passing_candidate_wins_not_a_later_one() -> None:
    reviewer = FakeReviewer(index=2)
    out = parse_mechanism("saag+s3").run(weather_example(), _by_temperature(BAD_NAME, GOOD, GOOD), reviewer,
                                         ctx=MechanismContext())
    assert out.selected == 1 and out.final == GOOD and reviewer.selections == 0 and out.reviewer_calls == 0
    assert [c.passed for c in out.candidates] == [False, True, True] and out.agent_calls == 3


def test_a_pass_and_an_abstention_tie_and_the_selector_chooses_between_them() -> None:
    seen: list[list[Prediction]] = []

    class Recording(FakeReviewer):
        def select_candidate(self, example, candidates):  # noqa: ANN001, ANN202
            seen.append(list(candidates))
            return 1, None

    out = parse_mechanism("saag+s3").run(weather_example(), _by_temperature(ABSTAIN, BAD_NAME, GOOD), Recording(),
                                         ctx=MechanismContext())
    assert seen == [[GOOD, ABSTAIN]]  # the first passing candidate, then the first abstention
    assert out.final == ABSTAIN and out.selected == 0 and out.reviewer_calls == 1


def test_an_unusable_selector_falls_back_to_the_first_candidate_noted() -> None:
    out = parse_mechanism("saag+s2").run(weather_example(), _by_temperature(BAD_NAME, BAD_NAME), FakeReviewer(index=None),
                                         ctx=MechanismContext())
    assert out.selected == 0 and out.final == BAD_NAME and out.reviewer_unusable == 1
    assert "using candidate 0" in out.notes[0]


def test_when_no_candidate_calls_the_first_real_abstention_is_final_not_an_unreadable_reply() -> None:
    unreadable = Prediction((), raw="<garbled>", status="unparsable")
    reviewer = FakeReviewer(index=0)
    out = parse_mechanism("saag+s2").run(weather_example(), _by_temperature(unreadable, ABSTAIN), reviewer,
                                         ctx=MechanismContext())
    assert out.final == ABSTAIN and out.selected == 1 and reviewer.selections == 0
