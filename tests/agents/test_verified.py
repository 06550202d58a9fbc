"""``saag+s<N>`` control flow with in-process doubles (the HTTP path: tests/evaluate/test_verified_selection.py)."""

from __future__ import annotations

import pytest

from saag_opt.agents import MechanismContext, mechanism_names, parse_mechanism
from saag_opt.agents.mechanisms.selection import spread_temperatures
from saag_opt.agents.reviewer import blind_cascade
from saag_opt.errors import ConfigError
from saag_opt.model import Example, Prediction, Registry, ToolCall, ToolSpec
from tests.agents.agent_fakes import BAD_NAME, GOOD, UNGROUNDED, FakeAgent, FakeReviewer, call, weather_example

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


# -- saag+abstain ------------------------------------------------------------------------------------


def test_abstain_is_registered_without_a_reviewer_and_cannot_be_gated() -> None:
    mech = parse_mechanism("saag+abstain")
    assert mech.spec == "saag+abstain" and mech.components == () and not mech.needs_reviewer and mech.experimental
    assert "saag+abstain" in mechanism_names() and "gate+saag+abstain" not in mechanism_names()
    with pytest.raises(ConfigError, match="gate"):
        parse_mechanism("gate+saag+abstain")


def test_a_verified_call_stands_with_one_agent_call_and_no_reviewer() -> None:
    agent = _by_temperature(GOOD)
    out = parse_mechanism("saag+abstain").run(weather_example(), agent, None, ctx=MechanismContext())
    assert out.final == GOOD and out.ruling is None and out.reviewer_calls == 0 and len(agent.log) == 1
    assert [(r.verdict, r.reviewer) for r in out.rounds] == [("saag_pass", "saag")]


@pytest.mark.parametrize(("proposal", "reason"), [
    (UNGROUNDED, "failed SAAG stage 3"),  # "Paris" is not in the request
    (BAD_NAME, "failed SAAG stage 1"),  # no such function
    (call(unit="celsius"), "failed SAAG stage 2"),  # the required city is missing
])
def test_a_call_the_cascade_does_not_verify_is_withheld_with_its_reason(proposal: Prediction, reason: str) -> None:
    out = parse_mechanism("saag+abstain").run(weather_example(), _by_temperature(proposal), None,
                                              ctx=MechanismContext())
    assert not out.final.calls and out.base.prediction == proposal
    assert out.ruling is not None and out.ruling.action == "block" and out.ruling.reason == reason
    assert out.ruling.feedback and "Boston" not in out.ruling.feedback  # what the agent may be told: no gold
    assert out.rounds[0].verdict == "saag_fail" and out.notes == (f"withheld: {reason}",)


def test_a_passing_call_no_value_of_the_request_anchors_is_withheld() -> None:
    """BFCL irrelevance's shape: the call passes every stage on assumptions alone (a small number, an enum)."""
    circle = ToolSpec.from_dict({"name": "draw_circle", "description": "Draw a circle.", "parameters": {
        "type": "object", "properties": {"radius": {"type": "integer"}, "unit": {"type": "string", "enum": ["cm", "m"]}},
        "required": ["radius"]}})
    example = Example(id="i1", category="irrelevance", messages=({"role": "user", "content": "Tell me a joke about cats."},),
                      registry=Registry([circle]), gold=None, expect="no_call")
    assumed = Prediction((ToolCall("draw_circle", {"radius": 3, "unit": "m"}),), raw=None, status="ok")
    report = blind_cascade(assumed, example)
    assert report.passed and not report.anchored  # the shape this test is about
    out = parse_mechanism("saag+abstain").run(example, _by_temperature(assumed), None, ctx=MechanismContext())
    assert not out.final.calls
    assert out.ruling is not None and out.ruling.reason == "no value of the request is in its arguments"
    assert "no call" in (out.ruling.feedback or "")


def test_an_abstention_or_an_unreadable_reply_is_kept_as_it_is() -> None:
    unreadable = Prediction((), raw="<garbled>", status="unparsable")
    for proposal in (ABSTAIN, unreadable):
        out = parse_mechanism("saag+abstain").run(weather_example(), _by_temperature(proposal), None,
                                                  ctx=MechanismContext())
        assert out.final == proposal and out.ruling is None and out.rounds == ()
