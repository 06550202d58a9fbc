"""The GEPA metric on conversations: BFCL's verdict as the score, help/harm as on calls, the feedback per step.

Records are built by hand (the rows ``evaluate`` writes for a multi-turn entry), so every class and
every feedback line is pinned without a model; a real BFCL entry supplies the user turns and the gold.
"""

from __future__ import annotations

import pickle
from typing import Any

import dspy
import pytest

from saag_opt.data.catalog import load_episodes
from saag_opt.episodes import Episode
from saag_opt.evaluation.conversation_records import (
    EpisodeRecord,
    JudgementRecord,
    StepRecord,
    ToolResultRecord,
    TurnRecord,
)
from saag_opt.evaluation.results import CallRecord, RoundRecord
from saag_opt.optimize.acceptance import ReviewerAcceptance
from saag_opt.optimize.conversations import (
    CONVERSATIONS,
    EpisodeRollout,
    episode_metric,
    focus_step,
    rail_example,
    render_episode_gold,
    step_objected,
)
from saag_opt.optimize.feedback import GOLD_LABEL
from tests.episodes.world import needs_bfcl

pytestmark = needs_bfcl

SECRET = "Zanzibar-7"
"""A value only the checker's evidence and the gold hold (never a call, a result or a user turn)."""


def _entry() -> Episode:
    (entry,) = load_episodes("bfcl:multi_turn_base", split="train", limit=1)  # multi_turn_base_3: two turns
    return entry


def _call(function: str | None = None, **arguments: Any) -> CallRecord:
    """One call (``None``: a text answer, "Done.")."""
    return CallRecord(calls=[{"name": function, "arguments": arguments}] if function else [],
                      raw=None if function else "Done.")


def _step(turn: int, index: int, proposed: CallRecord, *, verdict: str | None = "approve",
          revised: CallRecord | None = None, feedback: str | None = None, result: str = "ok") -> StepRecord:
    final = revised if revised is not None else proposed
    rounds = [] if verdict is None else [RoundRecord(index=0, reviewer="llm", verdict=verdict, tentative=proposed,
                                                     feedback=feedback, revised=revised)]
    return StepRecord(turn=turn, index=index, proposed=proposed, rounds=rounds, final=final,
                      executed=list(final.calls), results=[ToolResultRecord(name=c["name"], content=result)
                                                           for c in final.calls],
                      revised=revised is not None and revised.calls != proposed.calls,
                      reviewer_calls=0 if verdict is None else 1)


WRONG_FIND, RIGHT_FIND = _call("find", path="Atlantis", name="test"), _call("find", path=".", name="test")
FAILED = JudgementRecord(valid=False, error_type="multi_turn:execution_response_mismatch", failed_turn=0,
                         message="Model response execution results so far does not contain all the ground truth "
                                 "response execution results for turn 0.",
                         details={"missing_items": [f'{{"matches": ["./{SECRET}"]}}']})


def _record(condition: str, turns: list[list[StepRecord]], judgement: JudgementRecord | None,
            unusable: int = 0) -> EpisodeRecord:
    entry = _entry()
    valid = judgement is not None and judgement.valid
    return EpisodeRecord(run_id="t", example_id=entry.id, category=entry.category, split=entry.split,
                         condition=condition, correct=valid, reviewer_unusable=unusable,
                         turns=[TurnRecord(index=i, steps=steps) for i, steps in enumerate(turns)], judgement=judgement)


def _base(valid: bool) -> EpisodeRecord:
    first = RIGHT_FIND if valid else WRONG_FIND
    steps = [[_step(0, 0, first, verdict=None), _step(0, 1, _call(), verdict=None)],
             [_step(1, 0, _call("cd", folder="projects"), verdict=None), _step(1, 1, _call(), verdict=None)]]
    return _record("base", steps, JudgementRecord(valid=True) if valid else FAILED)


def _reviewed(*, first: StepRecord, valid: bool, unusable: int = 0) -> EpisodeRecord:
    steps = [[first, _step(0, 1, _call())], [_step(1, 0, _call("cd", folder="projects")), _step(1, 1, _call())]]
    return _record("r1", steps, JudgementRecord(valid=True) if valid else FAILED, unusable)


REJECTED = _step(0, 0, WRONG_FIND, verdict="reject", revised=RIGHT_FIND, feedback="Atlantis is no folder here.")
APPROVED_WRONG = _step(0, 0, WRONG_FIND)
REJECTED_RIGHT = _step(0, 0, RIGHT_FIND, verdict="reject", revised=WRONG_FIND, feedback="Search in Atlantis.")


def _score(rollout: EpisodeRollout | None, pred_name: str | None = "reviewer.review") -> dspy.Prediction:
    return episode_metric(dspy.Example(item=_entry()).with_inputs("item"), dspy.Prediction(outcome=rollout), None,
                          pred_name, None)


@pytest.mark.parametrize(("base_ok", "first", "final_ok", "cls", "score", "objectives"), [
    (False, REJECTED, True, "fixed", 1.0, {"help": 1.0, "no_harm": 1.0}),
    (True, REJECTED_RIGHT, False, "broken", 0.0, {"help": 0.0, "no_harm": 0.0}),
    (False, APPROVED_WRONG, False, "missed error", 0.0, {"help": 0.0, "no_harm": 1.0}),
    (True, _step(0, 0, RIGHT_FIND), True, "kept right", 1.0, {"help": 0.0, "no_harm": 1.0}),
    (False, _step(0, 0, WRONG_FIND, verdict="reject", revised=WRONG_FIND), False, "kept wrong after review", 0.0,
     {"help": 0.0, "no_harm": 1.0}),
])
def test_the_score_is_the_checkers_verdict_and_help_harm_mirror_the_single_call_metric(
        base_ok: bool, first: StepRecord, final_ok: bool, cls: str, score: float, objectives: dict[str, float]) -> None:
    out = _score(EpisodeRollout(_base(base_ok), _reviewed(first=first, valid=final_ok)), pred_name=None)
    assert (out.outcome_class, out.score, out.objective_scores) == (cls, score, objectives)
    assert out.feedback == f"Outcome: {cls}."  # scoring calls skip the long text


def test_an_unreadable_reply_is_a_reviewer_error_and_a_failed_run_scores_zero_with_its_reason() -> None:
    unusable = _step(0, 0, RIGHT_FIND, verdict="reviewer_failed")
    out = _score(EpisodeRollout(_base(True), _reviewed(first=unusable, valid=True, unusable=1)))
    assert out.outcome_class == "reviewer error" and out.score == 1.0 and "UNUSABLE" in out.feedback
    failed = _record("r1", [], None).model_copy(update={"error": "ModelCallError: 500 after 4 retries"})
    out = _score(EpisodeRollout(_base(True), failed))
    assert out.score == 0.0 and out.outcome_class == "error" and "the reviewed run failed: ModelCallError" in out.feedback
    assert "produced no outcome" in _score(None).feedback


def test_the_feedback_names_the_failing_turn_why_and_what_the_reviewer_did_at_each_step() -> None:
    out = _score(EpisodeRollout(_base(False), _reviewed(first=APPROVED_WRONG, valid=False)))
    text = out.feedback
    assert text.startswith("Outcome: missed error.")
    assert "with the review it fails at turn 0 (multi_turn:execution_response_mismatch)" in text
    assert "<- BFCL's checker fails the run at turn 0" in text and "Turn 1: 2 step(s) after the failing turn" in text
    assert 'Step 0: proposed find(path="Atlantis", name="test"). [the reviewer inputs shown' in text
    assert "Review 1: APPROVED (error=false)." in text and 'Ran find(path="Atlantis", name="test") -> find: ok' in text
    assert "Step 1: answered without a call (Done.)" in text and "No call: the turn ended." in text
    checker = next(line for line in text.splitlines() if line.startswith("Checker on the run with the review"))
    assert "fails at turn 0: multi_turn:execution_response_mismatch: Model response" in checker
    assert "missing_items" in checker  # the checker's evidence (state differences or missing results)


def test_a_fix_says_where_the_review_changed_the_run_and_what_the_revision_did() -> None:
    text = _score(EpisodeRollout(_base(False), _reviewed(first=REJECTED, valid=True))).feedback
    assert text.startswith("Outcome: fixed.") and "with the review it is valid" in text
    assert ('The review first changed the run at turn 0, step 0: without review find(path="Atlantis", name="test") '
            'ran at turn 0, step 0; with the review find(path=".", name="test") ran.') in text
    assert "Review 1: REJECTED (error=true). Reviewer feedback: Atlantis is no folder here." in text
    assert 'Revision 1: the agent `path`: "Atlantis" -> ".".' in text
    assert "Checker on the run without review" in text  # why the base run failed: what the fix was worth
    assert "Turn 1, user:" in text  # a valid run is shown whole


def test_gold_and_the_checkers_evidence_appear_only_on_lines_labelled_for_the_reflection() -> None:
    entry = _entry()
    gold = (*entry.gold[:-1], (*entry.gold[-1], f"mkdir(dir_name='{SECRET}')"))
    secret_entry = Episode(entry.id, entry.category, entry.turns, entry.tools, entry.environment, entry.setup, gold,
                           entry.split, entry.source)
    rollout = EpisodeRollout(_base(False), _reviewed(first=APPROVED_WRONG, valid=False))
    text = episode_metric(dspy.Example(item=secret_entry).with_inputs("item"), dspy.Prediction(outcome=rollout),
                          None, "reviewer.review", None).feedback
    holding = [line for line in text.splitlines() if SECRET in line]
    assert len(holding) == 2 and all(GOLD_LABEL in line for line in holding)  # the checker's line and the gold line
    assert any(line.startswith("Expected (gold, for your analysis only") for line in holding)
    assert "ground truth" not in "\n".join(line for line in text.splitlines() if GOLD_LABEL not in line)
    assert render_episode_gold(entry).startswith("turn 0: find(path='.',name='test') | turn 1: cd(folder='projects')")


def test_the_focus_is_the_failing_turns_objection_else_its_first_call_else_the_first_review() -> None:
    assert focus_step(_reviewed(first=APPROVED_WRONG, valid=False)) == (0, 0)
    late = _record("r1", [[_step(0, 0, RIGHT_FIND), _step(0, 1, _call())],
                          [_step(1, 0, _call()), _step(1, 1, _call("cd", folder="x"), verdict="reject",
                                                                 revised=_call("cd", folder="projects"))]],
                   FAILED.model_copy(update={"failed_turn": 1}))
    assert focus_step(late) == (1, 1)
    valid = _record("r1", [[_step(0, 0, _call()), _step(0, 1, RIGHT_FIND)]], JudgementRecord(valid=True))
    assert focus_step(valid) == (0, 1)  # no objection: the first step that proposed calls
    unreviewed = _record("base", [[_step(0, 0, RIGHT_FIND, verdict=None)]], JudgementRecord(valid=True))
    assert focus_step(unreviewed) is None


def test_a_step_objects_when_rejected_withheld_or_another_candidate_ran() -> None:
    assert step_objected(REJECTED) and not step_objected(APPROVED_WRONG)
    withheld = APPROVED_WRONG.model_copy(update={"withheld": True, "final": _call(), "executed": []})
    assert step_objected(withheld)
    assert not step_objected(_step(0, 0, RIGHT_FIND, verdict="reviewer_failed"))  # an unreadable approval


def test_the_rollout_hands_the_focus_steps_trace_entries_to_the_program() -> None:
    rollout = EpisodeRollout(_base(False), _reviewed(first=APPROVED_WRONG, valid=False),
                             spans=((0, 0, 3, 5), (0, 1, 5, 6), (1, 0, 6, 7)))
    assert rollout.trace_span == (3, 5) and rollout.reviewer_unusable == 0 and rollout.error is None
    assert EpisodeRollout(rollout.base, rollout.reviewed).trace_span is None  # not traced (a scoring call)


def test_a_rollout_checkpointed_under_its_old_module_path_still_loads() -> None:
    """gepa's checkpoint pickles every rollout by module path; conversation runs saved before ``optimize.conversations``
    name ``optimize.episode_rollout``, and must still resume."""
    rollout = EpisodeRollout(_base(False), _reviewed(first=REJECTED, valid=True), spans=((0, 0, 0, 1),))
    old = pickle.dumps(rollout, protocol=0).replace(b"saag_opt.optimize.conversations", b"saag_opt.optimize.episode_rollout")
    assert b"saag_opt.optimize.episode_rollout\nEpisodeRollout" in old
    assert pickle.loads(old) == rollout  # noqa: S301 - bytes built here


def test_the_rails_read_an_entry_as_its_user_turns_tools_and_gold_calls() -> None:
    entry = _entry()
    example = rail_example(entry)
    assert "photography project" in example.query and example.registry.get("cp") is not None
    assert {"cp": {"source": ["test_image1.jpg"], "destination": ["backup_tests"]}} in example.gold


class _Eval:
    def __init__(self, scores: list[float]) -> None:
        self.scores = scores
        self.trajectories = [{"example": dspy.Example(item=_entry()).with_inputs("item"), "example_ind": 0,
                              "score": dspy.Prediction(score=scores[0], outcome_class="missed error")}]


class _Proposal:
    def __init__(self, text: str) -> None:
        self.candidate = {"reviewer.review": text}
        self.eval_before, self.eval_after = _Eval([0.0]), _Eval([1.0])
        self.parent_program_ids = [0]
        self.subsample_scores_before, self.subsample_scores_after = [0.0], [1.0]


class _State:
    program_candidates = [{"reviewer.review": "Approve the tentative calls unless something is obviously broken."}]
    i = 0


def test_a_proposal_copying_an_entrys_gold_value_is_quarantined_though_it_scores_better() -> None:
    acceptance = ReviewerAcceptance("strict", rail_example=CONVERSATIONS.rail_example)
    copied = _Proposal("Reject a call unless its destination is backup_tests; approve the other calls otherwise.")
    assert not acceptance.should_accept(copied, _State())
    assert "copies_values" in acceptance.reject_reason(copied, _State())
    general = _Proposal("Reject a call whose argument values appear nowhere in the conversation; approve the others.")
    assert acceptance.should_accept(general, _State())
