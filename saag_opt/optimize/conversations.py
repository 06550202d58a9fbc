"""Conversations as GEPA's work: a BFCL multi-turn entry played with a candidate reviewer, judged by BFCL.

**The rollout.** A single-call rollout is ``Condition.run`` on one example (``optimize.calls``). Here
it is the reviewed conversation loop ``evaluate`` runs (``evaluate.play.run_condition``
on ``play_episode``): every step proposed by the base agent, reviewed by the set-up's mechanism with
the candidate's reviewer, executed on a fresh environment, and the transcript judged by the
environment's ``check`` (BFCL's own checkers). The base run (every step through ``none``) does not
depend on the candidate, so it is played once per entry and process and kept (its proposals come
from the base-prediction cache anyway, so a resumed process replays it for free). Both runs are
``EpisodeRecord``s, the rows evaluate writes: what the metric scores (valid = 1) and what the
feedback describes.

Which reviewer call the reflection LM reads: dspy's GEPA adapter shows the inputs of one traced call
of the predictor, picked at random among the rollout's, and a conversation reviews every step.
The rollout traces into a list of its own (``ReviewerProgram.forward``); ``StepTracer`` notes which
entries each step's review added, ``focus_step`` names the step the feedback is about, and
``forward`` hands on only that step's entries, so the inputs the reflection LM is shown and the
feedback it reads are about the same step.

**The metric.** Score and objectives mirror the single-call metric (``calls.metric``,
docs/design.md §7): score = the reviewed run is valid by the environment's checker (BFCL's
``multi_turn_checker`` and ``multi_turn_irrelevance_checker``), 1.0 / 0.0; ``help`` = 1 when the
review turned an invalid base run valid, ``no_harm`` = 0 when it turned a valid one invalid; the
outcome class is ``feedback.classify_outcome`` of (base valid, reviewed valid, the review objected at
some step, an unreadable reply), so the rails' minibatch-collapse check reads conversations as it
reads calls.

Feedback (built only when GEPA reflects on a predictor) says what the reviewer saw and did, step by
step: each turn's user message, each step's proposal, the verdicts and the reviewer's feedback, the
revision, what ran and what it returned, where the run without review first differs, the turn the
checker fails, and which step's reviewer inputs the reflection LM is shown. What the checker read
from the gold is on labelled lines only (``feedback.GOLD_LABEL``): its message and state differences
(they quote the ground-truth state) and the gold calls per turn. None of it reaches the reviewer: a
step's inputs are built from the conversation so far and the tools (``agents/conversation.py``),
never from ``Episode.gold``.

``Conversations`` is this kind's ``rollouts.Work``. ``EpisodeRollout`` is pickled into gepa's
checkpoint (its evaluation cache keeps rollout outputs); runs checkpointed before this module existed
name it ``optimize.episode_rollout``, which stays as an alias.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import dspy

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.conversation import step_position
from saag_opt.agents.episode import MAXIMUM_STEP_LIMIT
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.mechanisms.no_review import NoReview
from saag_opt.agents.reviewer import Reviewer
from saag_opt.agents.setup import Condition
from saag_opt.data.bfcl_environment import gold_calls
from saag_opt.episodes import Environment, Episode, open_environment
from saag_opt.evaluate.play import BASE, RunParts, play_episode, run_condition
from saag_opt.evaluation.conversation_records import EpisodeRecord, JudgementRecord, StepRecord, TurnRecord
from saag_opt.evaluation.estimate import CHARS_PER_TOKEN, episode_step_sizes
from saag_opt.evaluation.results import CallRecord
from saag_opt.model import Example, GoldCall, ToolCall
from saag_opt.optimize.budget import RolloutSize
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

if TYPE_CHECKING:
    from saag_opt.optimize.program import RunFn

Span = tuple[int, int, int, int]
"""(turn, step, first trace entry, end): the dspy trace entries one step's review added."""


@dataclass(frozen=True)
class EpisodeRollout:
    """Both runs of one entry (base, and reviewed with the candidate) and where each step's review is traced.

    Picklable: gepa's evaluation cache keeps rollouts in its checkpoint.
    """

    base: EpisodeRecord
    reviewed: EpisodeRecord
    spans: tuple[Span, ...] = ()

    @property
    def error(self) -> str | None:
        """Why the rollout cannot be scored (an LM call failed after its retries, the environment failed)."""
        if self.base.error:
            return f"the base run failed: {self.base.error}"
        return f"the reviewed run failed: {self.reviewed.error}" if self.reviewed.error else None

    @property
    def reviewer_unusable(self) -> int:
        """Reviewer replies of the reviewed run that stayed unreadable (``RolloutContext`` counts them)."""
        return self.reviewed.reviewer_unusable

    @property
    def focus(self) -> tuple[int, int] | None:
        """(turn, step) the feedback is about (``focus_step``)."""
        return focus_step(self.reviewed)

    @property
    def trace_span(self) -> tuple[int, int] | None:
        """The dspy trace entries of the focus step's review (None: not traced, or no review there)."""
        focus = self.focus
        for turn, step, start, end in self.spans:
            if (turn, step) == focus and end > start:
                return start, end
        return None


def step_objected(step: StepRecord) -> bool:
    """Did the review object at this step (``calls.view_outcome``'s rule, per step of a conversation)?

    A rejection (or a SAAG failure, or an unreadable reply the policy turned into a revision), a
    candidate chosen over the proposal (s/g), or a guard that revised or withheld the calls.
    """
    if any(r.verdict in ("reject", "saag_fail") or (r.verdict == "reviewer_failed" and r.revised is not None)
           for r in step.rounds):
        return True
    if step.candidates:
        return step.final.calls != step.proposed.calls
    return step.withheld or (step.ruling is not None and not step.ruling.startswith("allow"))


def objected(record: EpisodeRecord) -> bool:
    """The review objected at some step of the run."""
    return any(step_objected(s) for t in record.turns for s in t.steps)


def focus_step(record: EpisodeRecord) -> tuple[int, int] | None:
    """The reviewed step the feedback is about; None when the reviewer saw no step.

    In the failing turn (else anywhere): the first step the review objected to, else the first that
    proposed calls, else the first reviewed one.
    """
    reviewed = [s for t in record.turns for s in t.steps if s.reviewer_calls > 0]
    failed = record.judgement.failed_turn if record.judgement is not None and not record.correct else None
    pools = ([s for s in reviewed if s.turn == failed], reviewed) if failed is not None else (reviewed,)
    for pool in pools:
        for pick in ([s for s in pool if step_objected(s)], [s for s in pool if s.proposed.calls], pool):
            if pick:
                return pick[0].turn, pick[0].index
    return None


class StepTracer:
    """The set-up's mechanism, noting the dspy trace entries each step's review adds (module docstring)."""

    def __init__(self, mechanism: Mechanism) -> None:
        self.mechanism = mechanism
        self.spans: list[Span] = []

    @property
    def spec(self) -> str:
        """The wrapped mechanism's spec (records name the condition by it)."""
        return self.mechanism.spec

    @property
    def components(self) -> tuple[str, ...]:
        """The wrapped mechanism's reviewer predictors."""
        return self.mechanism.components

    @property
    def needs_reviewer(self) -> bool:
        """As the wrapped mechanism."""
        return self.mechanism.needs_reviewer

    @property
    def experimental(self) -> bool:
        """As the wrapped mechanism."""
        return self.mechanism.experimental

    @property
    def gated(self) -> bool:
        """As the wrapped mechanism."""
        return self.mechanism.gated

    @property
    def candidates(self) -> int:
        """As the wrapped mechanism."""
        return self.mechanism.candidates

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """As the wrapped mechanism."""
        return self.mechanism.calls_per_example(reject_rate)

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """The wrapped mechanism on one step; its trace entries noted by the step's (turn, step)."""
        trace = dspy.settings.trace
        start = len(trace) if trace is not None else 0
        try:
            return self.mechanism.run(example, agent, reviewer, ctx=ctx)
        finally:
            if trace is not None:
                _, turn, step = step_position(example.id)
                self.spans.append((turn, step, start, len(trace)))


class EpisodeRollouts:
    """The ``RunFn`` of conversations: ``(episode, reviewer) -> EpisodeRollout`` (module docstring).

    Called from GEPA's evaluation threads: each rollout plays on its own environments, and the base
    runs are kept under a lock (two threads racing on one entry play the same cached run).
    """

    def __init__(self, condition: Condition, *, environment: Callable[[str], Environment] = open_environment,
                 max_steps: int = MAXIMUM_STEP_LIMIT) -> None:
        self._parts = RunParts(condition.agent, condition.reviewer, condition.mechanism, condition.ctx,
                               condition.reviewer_lm, "gepa", max_steps, environment, play_episode)
        self._none = NoReview()
        self._base: dict[str, EpisodeRecord] = {}
        self._lock = threading.Lock()

    def __call__(self, episode: Episode, reviewer: Any) -> EpisodeRollout:
        """Play ``episode`` reviewed by ``reviewer`` (and, once, without review).

        Raises:
            CostCapReached, ModelUnavailableError, ConfigError: systemic (``run_condition``).
        """
        base = self.base(episode)
        tracer = StepTracer(self._parts.mechanism)
        reviewed = run_condition(replace(self._parts, reviewer=reviewer), episode, tracer, tracer.spec)
        return EpisodeRollout(base, reviewed, tuple(tracer.spans))

    def base(self, episode: Episode) -> EpisodeRecord:
        """The entry's run without review, played once (a failed one is played again next time)."""
        with self._lock:
            kept = self._base.get(episode.id)
        if kept is not None:
            return kept
        record = run_condition(self._parts, episode, self._none, BASE)
        if record.error is None:
            with self._lock:
                record = self._base.setdefault(episode.id, record)
        return record


FEEDBACK_CHARS_PER_STEP = 250
"""Assumed characters of a conversation's feedback per step (proposal, verdict, result), for the estimate."""

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


def episode_metric(gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
                   pred_trace: Any = None) -> dspy.Prediction:
    """GEPA feedback metric over (dspy.Example(item=Episode), dspy.Prediction(outcome=EpisodeRollout)).

    A rollout that failed (no outcome, or a run that ended in an error) scores 0 with the reason as
    feedback, as ``calls.metric`` does.
    """
    rollout: Any = pred.get("outcome") if hasattr(pred, "get") else None  # an EpisodeRollout or a FailedRollout
    if rollout is None or rollout.error:
        reason = getattr(rollout, "error", None) or "the program produced no outcome"
        return dspy.Prediction(score=0.0, feedback=f"The rollout failed: {reason}.",
                               objective_scores={"help": 0.0, "no_harm": 1.0}, outcome_class="error")
    base_ok, final_ok = rollout.base.correct, rollout.reviewed.correct
    cls = classify_outcome(base_ok, final_ok, objected(rollout.reviewed), rollout.reviewer_unusable > 0)
    objectives = help_harm_objectives(base_ok, final_ok)
    feedback = f"Outcome: {cls}." if pred_name is None else build_episode_feedback(gold["item"], rollout, cls)
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


class Conversations:
    """``rollouts.Work`` for conversations (module docstring): an item is an ``Episode``, a BFCL multi-turn entry."""

    record = EpisodeRecord
    """The rows a test-phase compare of conversations writes (a conversation's rows whole: every turn, the verdict)."""

    def rollout(self, condition: Condition) -> RunFn:
        """``EpisodeRollouts`` on the set-up: one reviewed conversation, and once per entry the one without review."""
        return EpisodeRollouts(condition)

    def metric(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> dspy.Prediction:
        """``episode_metric``."""
        return episode_metric(gold, pred, trace, pred_name, pred_trace)

    def rail_example(self, item: Episode) -> Example:
        """``rail_example``: the entry read as one example."""
        return rail_example(item)

    def rollout_size(self, items: Sequence[Episode], reviews: float, revisions: float) -> RolloutSize:
        """One reviewed conversation per rollout: a review per step, every step's proposal counted uncached.

        The run leaves the cached base run at its first change; a reflected entry carries a
        conversation's feedback. The steps and each step's prompt are measured from the entries
        (``estimate.episode_step_sizes``).
        """
        steps, chars = episode_step_sizes(items, sample_size=20)
        return RolloutSize(steps * reviews, steps * (1.0 + revisions), chars / CHARS_PER_TOKEN,
                           steps * FEEDBACK_CHARS_PER_STEP / CHARS_PER_TOKEN,
                           f"one reviewed conversation of {steps:.1f} steps per rollout, every proposal counted uncached")


CONVERSATIONS = Conversations()
"""The conversation work (stateless: each ``rollout`` call builds its own base-run cache)."""


__all__ = ["CONVERSATIONS", "EPISODE_ADVICE", "Conversations", "EpisodeRollout", "EpisodeRollouts", "StepTracer",
           "build_episode_feedback", "episode_metric", "focus_step", "objected", "rail_example",
           "render_episode_gold", "step_objected"]
