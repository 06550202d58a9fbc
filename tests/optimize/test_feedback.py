"""The GEPA metric: score, objectives, outcome classes, SAAG diagnostics; gold never reaches the reviewer."""

from __future__ import annotations

import json

import dspy
import pytest

from saag_opt.agents.base import Proposal
from saag_opt.agents.mechanisms.base import MechanismOutcome, ReviewRound
from saag_opt.model import Prediction, ToolCall
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.optimize.calls import metric, view_outcome
from saag_opt.optimize.feedback import classify_outcome
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

EX = world.make_examples(1, "train")[0]  # "What is the weather in Paris?"
RIGHT = Prediction(calls=(ToolCall("get_weather", {"city": "Paris"}),))
WRONG_VALUE = Prediction(calls=(ToolCall("get_weather", {"city": "Atlantis"}),))
WRONG_NAME = Prediction(calls=(ToolCall("get_wether", {"city": "Paris"}),))


def _outcome(base: Prediction, rounds: tuple[ReviewRound, ...], final: Prediction) -> MechanismOutcome:
    return MechanismOutcome("r2", Proposal(base), final, rounds)


def _run(outcome: MechanismOutcome, pred_name: str | None = "reviewer.review") -> dspy.Prediction:
    return metric(dspy.Example(item=EX).with_inputs("item"), dspy.Prediction(outcome=outcome), None, pred_name, None)


@pytest.mark.parametrize(("base_ok", "final_ok", "objected", "expected"), [
    (False, True, True, "fixed"), (True, False, True, "broken"), (False, False, False, "missed error"),
    (True, True, True, "false alarm"), (True, True, False, "kept right"),
    (False, False, True, "kept wrong after review"),
])
def test_classify_outcome(base_ok: bool, final_ok: bool, objected: bool, expected: str) -> None:
    assert classify_outcome(base_ok, final_ok, objected) == expected


def test_fixed_example_scores_one_with_help_objective_and_describes_the_revision() -> None:
    rounds = (ReviewRound(0, WRONG_VALUE, "reject", "llm", "Atlantis is not in the request", RIGHT),
              ReviewRound(1, RIGHT, "approve", "llm"))
    out = _run(_outcome(WRONG_VALUE, rounds, RIGHT))
    assert out.score == 1.0 and out.objective_scores == {"help": 1.0, "no_harm": 1.0}
    assert out.feedback.startswith("Outcome: fixed.")
    assert "failed at stage 3 (grounding" in out.feedback and "ungrounded values" in out.feedback
    assert "Review 1: REJECTED" in out.feedback and "Atlantis is not in the request" in out.feedback
    assert '`city`: "Atlantis" -> "Paris"' in out.feedback and "Review 2: APPROVED" in out.feedback


def test_broken_example_has_zero_no_harm() -> None:
    rounds = (ReviewRound(0, RIGHT, "reject", "llm", "use Atlantis", WRONG_VALUE),)
    out = _run(_outcome(RIGHT, rounds, WRONG_VALUE))
    assert out.score == 0.0 and out.objective_scores == {"help": 0.0, "no_harm": 0.0}
    assert "Outcome: broken." in out.feedback and "PASSED all three stages" in out.feedback
    # BFCL's error type of the final call, by parameter name: the gold value stays on the gold line
    assert "-> incorrect (BFCL error type: value:city)." in out.feedback
    assert [line for line in out.feedback.splitlines() if "BFCL error type" in line][0].startswith("Final call:")


def test_missed_wrong_name_names_stage_one_and_nearest_registered_name() -> None:
    out = _run(_outcome(WRONG_NAME, (ReviewRound(0, WRONG_NAME, "approve", "llm"),), WRONG_NAME))
    assert "Outcome: missed error." in out.feedback and "(BFCL error type: wrong_func_name)" in out.feedback
    assert "failed at stage 1 (registry" in out.feedback and "nearest registered name `get_weather`" in out.feedback


def test_scoring_calls_skip_the_long_feedback() -> None:
    out = _run(_outcome(WRONG_NAME, (ReviewRound(0, WRONG_NAME, "approve", "llm"),), WRONG_NAME), pred_name=None)
    assert out.feedback == "Outcome: missed error." and out.score == 0.0


def test_failed_rollout_scores_zero_with_the_reason() -> None:
    out = metric(dspy.Example(item=EX).with_inputs("item"), dspy.Prediction(outcome=None), None, None, None)
    assert out.score == 0.0 and "produced no outcome" in out.feedback


def test_feedback_may_quote_gold_for_the_reflection_lm() -> None:
    out = _run(_outcome(WRONG_VALUE, (ReviewRound(0, WRONG_VALUE, "approve", "llm"),), WRONG_VALUE))
    assert 'get_weather(city=["Paris"])' in out.feedback and "never shown to the reviewer" in out.feedback


def test_view_outcome_reads_reviewer_failed_as_no_objection() -> None:
    view = view_outcome(_outcome(RIGHT, (ReviewRound(0, RIGHT, "reviewer_failed", "llm", note="bad json"),), RIGHT))
    assert not view.objected and view.steps[0].feedback == "bad json"


def test_gold_never_reaches_the_reviewer_inputs(tmp_path, monkeypatch) -> None:
    """Every reviewer request of a whole optimize run is free of gold-only values."""
    secret = "Zanzibar-7"  # an acceptable gold value that no query, tool doc or base call contains
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    dataset, prompts = world.write_world(tmp_path)
    rows = [json.loads(line) for line in open(dataset, encoding="utf-8")]
    text = json.dumps(rows)
    assert "gold" in text
    for row in rows:  # add the secret as an extra acceptable value for every gold param
        for call in row["gold"]:
            for params in call.values():
                for values in params.values():
                    values.append(secret)
    with open(dataset, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        run_optimize(OptimizeConfig(base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts, mechanism="r1",
                                    runs_dir=str(tmp_path / "runs"), max_metric_calls=30, workers=2))
        requests = [r.body for r in server.chat_requests]
    reviewer_requests = [b for b in requests if not b.get("tools") and not world.is_reflection(b)]
    reflection_requests = [b for b in requests if world.is_reflection(b)]
    assert reviewer_requests and reflection_requests
    assert not any(secret in json.dumps(b) for b in reviewer_requests)
    assert not any(secret in json.dumps(b) for b in requests if b.get("tools"))  # nor the base agent's
    assert any(secret in json.dumps(b) for b in reflection_requests)  # the training signal did carry it


def test_an_unusable_review_is_a_reviewer_error_in_gepa_feedback() -> None:
    approved = (ReviewRound(0, WRONG_VALUE, "reviewer_failed", "llm", note="AdapterParseError: no error field"),)
    out = _run(MechanismOutcome("r2", Proposal(WRONG_VALUE), WRONG_VALUE, approved, reviewer_unusable=1))
    assert out.outcome_class == "reviewer error" and out.score == 0.0
    assert "UNUSABLE" in out.feedback and "no error field" in out.feedback and "an approval" in out.feedback
    assert "exactly the requested output fields" in out.feedback
    rejected = (ReviewRound(0, WRONG_VALUE, "reviewer_failed", "llm", "The tentative function calls contain an error.",
                            RIGHT, note="AdapterParseError"),)
    out = _run(MechanismOutcome("r2", Proposal(WRONG_VALUE), RIGHT, rejected, reviewer_unusable=1))
    assert out.outcome_class == "reviewer error" and out.score == 1.0  # the score stays the final call's
    assert "a rejection" in out.feedback and "Revision 1" in out.feedback
    assert classify_outcome(True, True, False, unusable=True) == "reviewer error"


def test_the_objectives_follow_the_paired_correctness_even_when_a_later_reply_was_unreadable() -> None:
    from saag_opt.optimize.feedback import help_harm_objectives  # noqa: PLC0415

    assert help_harm_objectives(base_ok=False, final_ok=True) == {"help": 1.0, "no_harm": 1.0}
    assert help_harm_objectives(base_ok=True, final_ok=False) == {"help": 0.0, "no_harm": 0.0}
    assert help_harm_objectives(base_ok=True, final_ok=True) == help_harm_objectives(False, False) == {
        "help": 0.0, "no_harm": 1.0}
