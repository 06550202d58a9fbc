"""``guard+r<N>``: the runtime guard's loop as a mechanism (its rules in the evaluate world, its spec grammar)."""

from __future__ import annotations

import pytest

from saag_opt.agents import (
    GuardedReview,
    LiveTurn,
    MechanismContext,
    Progressive,
    Verdict,
    mechanism_names,
    parse_mechanism,
)
from saag_opt.agents.mechanisms import registry as mechanisms
from saag_opt.agents.mechanisms.progressive import DEFAULT_REJECTION
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.model import Prediction
from saag_opt.saag import check_calls
from saag_opt.tune.space import parse_space
from tests.agents.agent_fakes import (
    APPROVE,
    BAD_NAME,
    GOOD,
    REJECT,
    UNGROUNDED,
    FakeAgent,
    FakeReviewer,
    NeverCalledReviewer,
    call,
    weather_example,
)

UNUSABLE = Verdict(False, "", failed="AdapterParseError: x")
MISSING_CITY = call("get_weather", town="Boston")  # stage 2: required `city` missing, `town` spurious


def by_round(*predictions):  # noqa: ANN001, ANN202 - tiny script helper
    return lambda n, temperature: predictions[min(n, len(predictions) - 1)]


def run(spec: str, agent, reviewer, **ctx):  # noqa: ANN001, ANN003, ANN201 - test helper
    return parse_mechanism(spec).run(weather_example(), agent, reviewer, ctx=MechanismContext(**ctx))


def test_a_stage_two_failure_the_reviewer_approves_is_revised_not_executed() -> None:
    agent, reviewer = FakeAgent(by_round(MISSING_CITY, GOOD)), FakeReviewer([APPROVE, APPROVE])
    out = run("guard+r2", agent, reviewer)
    assert out.final == GOOD and out.ruling is not None and out.ruling.action == "revise"
    assert "`city`" in (out.rounds[0].feedback or "")  # the psi text of stage 2 was fed back
    assert [r.verdict for r in out.rounds] == ["saag_fail", "approve"]
    plain = run("r2", FakeAgent(by_round(MISSING_CITY, GOOD)), FakeReviewer([APPROVE]))
    assert plain.final == MISSING_CITY  # what r<N> executes, and the guard never would


def test_a_revision_that_still_fails_stage_one_or_two_is_an_abstention() -> None:
    agent, reviewer = FakeAgent(by_round(BAD_NAME, MISSING_CITY)), FakeReviewer([REJECT])
    out = run("guard+r1", agent, reviewer)
    assert out.final.abstained and out.ruling is not None and out.ruling.action == "block"
    assert "revision failed SAAG stage 2" in out.ruling.reason
    assert out.notes and "scored as an abstention" in out.notes[0]


def test_a_revision_without_a_call_is_blocked() -> None:
    out = run("guard+r1", FakeAgent(by_round(UNGROUNDED, Prediction(raw="none", status="empty"))),
              FakeReviewer([REJECT]))
    assert out.final.abstained and out.ruling is not None and "makes no call" in out.ruling.reason


def test_rejections_are_revised_like_r_n() -> None:
    agent, reviewer = FakeAgent(by_round(UNGROUNDED, GOOD)), FakeReviewer([REJECT, APPROVE])
    out = run("guard+r2", agent, reviewer)
    assert out.final == GOOD and [r.verdict for r in out.rounds] == ["reject", "approve"]
    assert out.reviewer_calls == 2 and out.agent_calls == 1 and out.seconds >= 2.0
    assert out.ruling is not None and out.ruling.reason == "the reviewer approved the revision"


def test_an_approval_runs_the_call_as_proposed() -> None:
    out = run("guard+r2", FakeAgent(by_round(UNGROUNDED)), FakeReviewer([APPROVE]))
    assert out.final == UNGROUNDED and out.ruling is not None and out.ruling.action == "allow"


@pytest.mark.parametrize(("on_unusable", "final", "feedback"), [("approve", UNGROUNDED, None),
                                                                 ("reject", GOOD, DEFAULT_REJECTION)])
def test_an_unusable_review_follows_on_unusable(on_unusable: str, final: Prediction, feedback: str | None) -> None:
    agent, reviewer = FakeAgent(by_round(UNGROUNDED, GOOD)), FakeReviewer([UNUSABLE, APPROVE])
    out = run("guard+r2", agent, reviewer, on_unusable=on_unusable)
    assert out.final == final and out.reviewer_unusable == 1
    assert out.rounds[0].verdict == "reviewer_failed" and out.rounds[0].feedback == feedback


def test_an_unusable_review_of_a_stage_two_failure_still_revises() -> None:
    out = run("guard+r1", FakeAgent(by_round(MISSING_CITY, GOOD)), FakeReviewer([UNUSABLE]))
    assert out.final == GOOD and out.ruling is not None and out.ruling.action == "revise"


def test_a_reviewer_failure_propagates_in_evaluate_and_follows_on_error_live() -> None:
    class Down(FakeReviewer):
        def review_call(self, example, prediction):  # noqa: ANN001, ANN201
            raise ConnectionError("server down")

    with pytest.raises(ConnectionError):  # evaluate records it as the example's error
        run("guard+r1", FakeAgent(by_round(UNGROUNDED)), Down())
    example = weather_example()
    for on_error, action in (("allow", "allow"), ("block", "block")):
        turn = LiveTurn(proposed=UNGROUNDED, report=check_calls(UNGROUNDED.calls, example.registry, example.query),
                        registry=example.registry, grounding_text=example.query, on_error=on_error)
        out = GuardedReview(1).run(example, None, Down(), ctx=turn)
        assert out.ruling is not None and out.ruling.action == action
        assert out.ruling.error == "ConnectionError: server down" and not out.ruling.cacheable


def test_a_live_turn_reviews_the_proposed_calls_and_makes_no_base_call() -> None:
    example = weather_example()
    turn = LiveTurn(proposed=UNGROUNDED, report=check_calls(UNGROUNDED.calls, example.registry, example.query),
                    registry=example.registry, grounding_text=example.query)
    agent, reviewer = FakeAgent(by_round(GOOD)), FakeReviewer([REJECT])
    out = GuardedReview(1).run(example, agent, reviewer, ctx=turn)
    assert reviewer.reviewed == [UNGROUNDED] and len(agent.log) == 1 and agent.log[0][0] == 1  # one revision only
    assert out.final == GOOD and out.ruling is not None and out.ruling.action == "revise"


def test_without_a_reviser_a_rejection_blocks_with_its_feedback() -> None:
    example = weather_example()
    turn = LiveTurn(proposed=UNGROUNDED, report=check_calls(UNGROUNDED.calls, example.registry, example.query),
                    registry=example.registry, grounding_text=example.query)
    out = GuardedReview(1).run(example, None, FakeReviewer([REJECT]), ctx=turn)
    assert out.ruling is not None and out.ruling.action == "block" and out.ruling.feedback == REJECT.feedback
    assert out.final.abstained


def test_an_abstention_is_not_reviewed_and_an_unreadable_reply_is_a_stage_one_failure() -> None:
    empty = Prediction(raw="No tool fits.", status="empty")
    out = run("guard+r1", FakeAgent(by_round(empty)), NeverCalledReviewer())
    assert out.final == empty and out.reviewer_calls == 0 and out.ruling is not None
    assert out.ruling.reason == "no tool calls to review"
    unreadable = Prediction(raw="{get_weather(", status="unparsable")
    out = run("guard+r1", FakeAgent(by_round(unreadable, GOOD)), FakeReviewer([APPROVE]))
    assert out.final == GOOD and out.rounds[0].verdict == "saag_fail"


def test_gate_guard_passes_clean_calls_and_keeps_the_ruling_otherwise() -> None:
    gated = run("gate+guard+r1", FakeAgent(by_round(GOOD)), NeverCalledReviewer())
    assert gated.gated and gated.final == GOOD and gated.mechanism == "gate+guard+r1"
    out = run("gate+guard+r1", FakeAgent(by_round(UNGROUNDED, GOOD)), FakeReviewer([REJECT]))
    assert not out.gated and out.mechanism == "gate+guard+r1"
    assert out.ruling is not None and out.ruling.action == "revise" and out.final == GOOD


def test_the_spec_grammar_and_facts() -> None:
    mechanism = parse_mechanism(" Guard+R3 ")
    assert isinstance(mechanism, GuardedReview) and mechanism.spec == "guard+r3" and mechanism.n == 3
    assert mechanism.components == ("review",) and mechanism.needs_reviewer and mechanism.experimental
    assert mechanism.calls_per_example(0.5) == parse_mechanism("r3").calls_per_example(0.5)
    assert parse_mechanism("gate+guard+r2").gated and parse_mechanism("gate+guard+r2").spec == "gate+guard+r2"
    assert "guard+r<N>" in mechanism_names() and "gate+guard+r<N>" in mechanism_names(reviewer_only=True)
    for bad in ("guard+r", "guard+r0", "guard2", "gate+gate+r2"):
        with pytest.raises(ConfigError):
            parse_mechanism(bad)


def test_compound_names_register_but_not_under_the_gate_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mechanisms, "_MECHANISMS", dict(mechanisms._MECHANISMS))
    mechanisms.register_mechanism("strict+r", lambda n, max_repairs: Progressive(n), "test", numbered=True)
    assert parse_mechanism("strict+r2").spec == "r2"
    for bad in ("gate+r", "+r", "guard+", "a++b"):
        with pytest.raises(ConfigError, match="lowercase letters"):
            mechanisms.register_mechanism(bad, lambda n, max_repairs: Progressive(n), "bad", numbered=True)


def test_evaluate_and_tune_accept_the_spec() -> None:
    assert EvaluateConfig(base="fake", reviewer="fake", mechanism="guard+r2").setup.mechanism.spec == "guard+r2"
    with pytest.raises(ValueError, match="needs a reviewer model"):
        EvaluateConfig(base="fake", mechanism="guard+r2")
    space = parse_space({"fixed": {"base": "fake", "reviewer": "fake"},
                         "search": {"mechanism": ["r2", "guard+r2", "gate+guard+r2"]}})
    assert space.search["mechanism"] == ["r2", "guard+r2", "gate+guard+r2"]
