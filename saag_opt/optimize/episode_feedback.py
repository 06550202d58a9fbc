"""The GEPA metric on conversations: BFCL's verdict as the score, the conversation as the feedback.

Score and objectives mirror the single-call metric (``feedback.metric``, docs/design.md §7): score =
the reviewed run is valid by the environment's checker (BFCL's ``multi_turn_checker`` and
``multi_turn_irrelevance_checker``), 1.0 / 0.0; ``help`` = 1 when the review turned an invalid base
run valid, ``no_harm`` = 0 when it turned a valid one invalid; the outcome class is
``feedback.classify_outcome`` of (base valid, reviewed valid, the review objected at some step,
an unreadable reply), so the rails' minibatch-collapse check reads conversations as it reads calls.

Feedback (built only when GEPA reflects on a predictor) says what the reviewer saw and did, step by
step: each turn's user message, each step's proposal, the verdicts and the reviewer's feedback, the
revision, what ran and what it returned, where the run without review first differs, the turn the
checker fails, and which step's reviewer inputs the reflection LM is shown (``episode_rollout``).
What the checker read from the gold is on labelled lines only (``feedback.GOLD_LABEL``): its
message and state differences (they quote the ground-truth state) and the gold calls per turn. None
of it reaches the reviewer: a step's inputs are built from the conversation so far and the tools
(``agents/conversation.py``), never from ``Episode.gold``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import dspy

from saag_opt.data.bfcl_environment import gold_calls
from saag_opt.episodes import Episode
from saag_opt.evaluation.conversation_records import EpisodeRecord, JudgementRecord, StepRecord, TurnRecord
from saag_opt.evaluation.results import CallRecord
from saag_opt.model import Example, GoldCall, ToolCall
from saag_opt.optimize.episode_rollout import EpisodeRollout, focus_step, objected, step_objected
from saag_opt.optimize.feedback import (
    GOLD_LABEL,
    OUTCOME_ADVICE,
    OutcomeClass,
    classify_outcome,
    clip_text,
    describe_revision,
    help_harm_objectives,
    render_calls,
)

EPISODE_ADVICE: dict[str, str] = {
    "fixed": "Good: without the review the conversation fails BFCL's checker; with it, it passes. The review caught "
             "a real error and the agent's revision corrected it. Keep this behaviour.",
    "broken": "Harmful: the base agent alone completes this conversation correctly; the review changed a step and "
              "the conversation then fails. The reviewer must approve calls that follow the user's request, the "
              "tool results so far and the tool docs.",
    "missed error": "The conversation fails BFCL's checker and the reviewer objected to no step: it should have "
                    "flagged the step that went wrong (look at the failing turn).",
    "false alarm": "The conversation is correct with and without the review, but the reviewer objected to a step: "
                   "approve correct calls; every objection costs a revision and risks breaking the run.",
    "kept right": "Correct conversation, no step objected to. Keep this behaviour.",
    "kept wrong after review": "The reviewer objected at some step, but the conversation still fails: its feedback "
                               "did not lead the agent to the right calls, or it flagged the wrong step (look at "
                               "the failing turn).",
    "reviewer error": OUTCOME_ADVICE["reviewer error"],
}
"""``feedback.OUTCOME_ADVICE`` for a whole conversation (one reviewer decision per step, not one call)."""

USER_CHARS, RESULT_CHARS, FEEDBACK_CHARS, DIFF_CHARS, GOLD_CHARS = 300, 160, 300, 1200, 2000
"""Characters kept of a user turn, a tool result, the reviewer's feedback, the checker's state
differences and the gold calls: a reflection prompt holds a minibatch of these beside the reviewer's inputs."""


def _episode_of(gold: Any) -> Episode:
    item = gold.get("item") if hasattr(gold, "get") else None
    if not isinstance(item, Episode):
        raise TypeError("GEPA metric: the dspy.Example must carry the Episode under 'item'")
    return item


def episode_metric(gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
                   pred_trace: Any = None) -> dspy.Prediction:
    """GEPA feedback metric over (dspy.Example(item=Episode), dspy.Prediction(outcome=EpisodeRollout)).

    A rollout that failed (no outcome, or a run that ended in an error) scores 0 with the reason as
    feedback, as ``feedback.metric`` does.
    """
    episode = _episode_of(gold)
    rollout = pred.get("outcome") if hasattr(pred, "get") else None
    if not isinstance(rollout, EpisodeRollout) or rollout.error:
        reason = getattr(rollout, "error", None) or "the program produced no outcome"
        return dspy.Prediction(score=0.0, feedback=f"The rollout failed: {reason}.",
                               objective_scores={"help": 0.0, "no_harm": 1.0}, outcome_class="error")
    base_ok, final_ok = rollout.base.correct, rollout.reviewed.correct
    cls = classify_outcome(base_ok, final_ok, objected(rollout.reviewed), rollout.reviewer_unusable > 0)
    objectives = help_harm_objectives(base_ok, final_ok)
    feedback = f"Outcome: {cls}." if pred_name is None else build_episode_feedback(episode, rollout, cls)
    return dspy.Prediction(score=1.0 if final_ok else 0.0, feedback=feedback, objective_scores=objectives,
                           outcome_class=cls)


def build_episode_feedback(episode: Episode, rollout: EpisodeRollout, cls: OutcomeClass) -> str:
    """The reflection text for one conversation (module docstring)."""
    base, reviewed = rollout.base, rollout.reviewed
    lines = [f"Outcome: {cls}. {EPISODE_ADVICE[cls]}",
             f"BFCL's checker: without review the conversation {_verdict(base)}; with the review it {_verdict(reviewed)}.",
             _divergence(base, reviewed),
             "The conversation with the review, step by step (what the reviewer saw: the user's turns, the calls "
             "proposed, the results of the calls that ran):"]
    failed = reviewed.judgement.failed_turn if reviewed.judgement is not None and not reviewed.correct else None
    focus = focus_step(reviewed)
    for turn in reviewed.turns:
        if failed is not None and turn.index > failed:
            rest = reviewed.turns[turn.index:]
            which = f"Turn {rest[0].index}" if len(rest) == 1 else f"Turns {rest[0].index}-{rest[-1].index}"
            lines.append(f"{which}: {sum(len(t.steps) for t in rest)} step(s) after the failing turn, not shown.")
            break
        lines.extend(_turn_lines(episode, turn, focus))
        if turn.index == failed:
            lines.append(f"  <- BFCL's checker fails the run at turn {failed} (its reason is on the checker line below).")
    if focus is None:
        lines.append("The reviewer was not consulted in this conversation.")
    if not reviewed.correct and reviewed.judgement is not None:
        lines.append(_checker_line("the run with the review", reviewed.judgement))
    if not base.correct and base.judgement is not None and cls in ("fixed", "broken", "kept wrong after review"):
        lines.append(_checker_line("the run without review", base.judgement))
    lines.append(f"Expected (gold, {GOLD_LABEL}): {render_episode_gold(episode)}")
    return "\n".join(lines)


def _verdict(record: EpisodeRecord) -> str:
    if record.correct:
        return "is valid"
    judgement = record.judgement
    if judgement is None:
        return "could not be judged"
    where = f" at turn {judgement.failed_turn}" if judgement.failed_turn is not None else ""
    return f"fails{where} ({judgement.error_type or 'invalid'})"


def _calls(value: CallRecord | Sequence[Mapping[str, Any]] | None) -> tuple[ToolCall, ...]:
    rows = value.calls if isinstance(value, CallRecord) else (value or ())
    return tuple(ToolCall.from_dict(dict(c)) for c in rows)


def _steps(record: EpisodeRecord) -> list[StepRecord]:
    return [s for t in record.turns for s in t.steps]


def _divergence(base: EpisodeRecord, reviewed: EpisodeRecord) -> str:
    """Where the reviewed run first ran something else than the run without review (help/harm starts there)."""
    pairs = zip(_steps(base), _steps(reviewed))
    for b, r in pairs:
        if (b.turn, b.index) != (r.turn, r.index) or b.executed != r.executed:
            return (f"The review first changed the run at turn {r.turn}, step {r.index}: without review "
                    f"{_ran(b)} at turn {b.turn}, step {b.index}; with the review {_ran(r)}.")
    b_steps, r_steps = len(_steps(base)), len(_steps(reviewed))
    if b_steps != r_steps:
        return (f"Both runs executed the same calls for {min(b_steps, r_steps)} steps; the run "
                f"{'with' if r_steps > b_steps else 'without'} review went on for {abs(r_steps - b_steps)} more.")
    return "The review changed nothing that ran: both runs executed the same calls."


def _ran(step: StepRecord) -> str:
    executed = _calls(step.executed)
    return f"{render_calls(executed)} ran" if executed else "nothing ran"


def _user_text(episode: Episode, turn: TurnRecord) -> str:
    messages = turn.messages or (episode.turns[turn.index].messages if turn.index < len(episode.turns) else ())
    return " ".join(str(m.get("content") or "") for m in messages if m.get("role", "user") == "user")


def _turn_lines(episode: Episode, turn: TurnRecord, focus: tuple[int, int] | None) -> list[str]:
    added = f" (functions added at this turn: {', '.join(turn.added_tools)})" if turn.added_tools else ""
    lines = [f"Turn {turn.index}, user{added}: {clip_text(_user_text(episode, turn), USER_CHARS)}"]
    for step in turn.steps:
        shown = " [the reviewer inputs shown with this feedback are this step's]" if focus == (step.turn, step.index) else ""
        proposed = (f"proposed {render_calls(_calls(step.proposed))}" if step.proposed.calls else
                    f"answered without a call ({clip_text(step.proposed.raw or '', 120) or 'no text'})")
        lines.append(f"  Step {step.index}: {proposed}.{shown}")
        lines.extend(f"    {line}" for line in _review_lines(step))
        lines.append(f"    {_what_happened(step)}")
    if turn.cut_off:
        lines.append("  The step limit cut the run off in this turn.")
    return lines


def _review_lines(step: StepRecord) -> list[str]:
    lines = []
    before = _calls(step.proposed)
    for k, r in enumerate(step.rounds, start=1):
        if r.verdict == "reviewer_failed":
            lines.append(f"Review {k}: UNUSABLE: the reply could not be read ({clip_text(r.note or '', 160)}); the "
                         f"run's policy counted it as {'a rejection' if r.revised is not None else 'an approval'}.")
        elif r.reviewer == "saag":
            lines.append(f"SAAG check {k}: {'passed' if r.verdict == 'saag_pass' else 'failed'}"
                         + (f" ({clip_text(r.feedback, FEEDBACK_CHARS)})" if r.feedback else "") + ".")
        else:
            verdict = "REJECTED (error=true)" if r.verdict == "reject" else "APPROVED (error=false)"
            lines.append(f"Review {k}: {verdict}." + (f" Reviewer feedback: {clip_text(r.feedback, FEEDBACK_CHARS)}"
                                                       if r.feedback else ""))
        if r.revised is not None:
            after = _calls(r.revised)
            lines.append(f"Revision {k}: {describe_revision(before, after)}")
            before = after
    if step.candidates:
        chosen = "the proposal" if step.selected in (None, 0) else f"candidate {step.selected}"
        lines.append(f"Selection among {len(step.candidates)} candidates: {chosen}"
                     + (" (over the proposal)" if step_objected(step) else "") + ".")
    if step.ruling:
        lines.append(f"Guard: {clip_text(step.ruling, 200)}.")
    if not step.rounds and not step.candidates and not step.ruling:
        lines.append("Not reviewed.")
    return lines


def _what_happened(step: StepRecord) -> str:
    if step.withheld:
        return "Withheld: nothing ran and the turn ended."
    executed = _calls(step.executed)
    if not step.final.calls:
        return "No call: the turn ended."
    results = "; ".join(f"{r.name}: {clip_text(r.content, RESULT_CHARS)}" + ("" if r.executed else " (refused)")
                        for r in step.results)
    return f"Ran {render_calls(executed)} -> {results or 'no result'}."


def _checker_line(which: str, judgement: JudgementRecord) -> str:
    where = f"turn {judgement.failed_turn}" if judgement.failed_turn is not None else "some turn"
    details = json.dumps(judgement.details, ensure_ascii=False, default=str) if judgement.details else ""
    return (f"Checker on {which} (it compares the run with the gold: {GOLD_LABEL}): fails at {where}: "
            f"{judgement.error_type or 'invalid'}: {clip_text(judgement.message or '', 400)}"
            + (f" State differences and missing results: {clip_text(details, DIFF_CHARS)}" if details else ""))


def render_episode_gold(episode: Episode) -> str:
    """The gold calls per turn as text (feedback only); an empty turn's truth is to call nothing."""
    gold = episode.gold
    if isinstance(gold, Sequence) and not isinstance(gold, str) and all(
            isinstance(t, Sequence) and not isinstance(t, str) for t in gold):
        turns = [f"turn {i}: " + ("; ".join(map(str, t)) if t else "no call (the truth is to call nothing)")
                 for i, t in enumerate(gold)]
        return clip_text(" | ".join(turns), GOLD_CHARS)
    return clip_text(json.dumps(gold, ensure_ascii=False, default=str), GOLD_CHARS)


def rail_example(episode: Episode) -> Example:
    """An entry as the rails read a reflected example (``rails.copies_values`` / ``copies_ngrams``).

    Query = every user turn; registry = every tool of the entry (held-out ones included); gold = the
    entry's gold calls, each ``{name: {param: [value]}}``, so a proposal that copies an entry's file
    names or ids is quarantined as a single-call one is.
    """
    messages = tuple(m for turn in episode.turns for m in turn.messages if m.get("role", "user") == "user")
    gold = _gold_bindings(episode)
    return Example(id=episode.id, category=episode.category, messages=messages,
                   registry=episode.tools_at(len(episode.turns) - 1), gold=gold or None,
                   expect="calls" if gold else "any_call", split=episode.split)


def _gold_bindings(episode: Episode) -> tuple[GoldCall, ...]:
    if episode.environment != "bfcl":
        return ()
    try:
        turns = gold_calls(episode)
    except ValueError:  # a gold string that is no literal call: the rails read the rest of the entry
        return ()
    return tuple({str(call.name): {k: [v] for k, v in call.arguments.items()}} for turn in turns for call in turn)


__all__ = ["EPISODE_ADVICE", "build_episode_feedback", "episode_metric", "rail_example", "render_episode_gold"]
