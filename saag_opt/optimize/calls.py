"""Single calls as GEPA's work: one example, one reviewed call, scored by BFCL's rules (docs/design.md §7).

The rollout is ``Condition.run`` on one example: the set-up ``agents.setup.open_setup`` opened, with
the candidate's reviewer, so GEPA's requests are the ones ``evaluate`` sends. ``SingleCalls`` is this
kind's ``rollouts.Work``; ``optimize.conversations`` is the other kind.

Score = the final call (after review) is correct by BFCL's rules (1.0 / 0.0). ``objective_scores``
carry the two halves of a reviewer's job as "higher is better" per-example values, so gepa's
``frontier_type="hybrid"`` keeps prompts that help and prompts that do no harm on the frontier:
``help`` = 1 when the review fixed a wrong base call, ``no_harm`` = 0 when it broke a right one.

Feedback is read only by the reflection LM. It may quote the gold calls (that is the training
signal, on one line labelled as gold), but nothing here is ever passed to the reviewer: the reviewer's
inputs are built by the mechanism from the conversation, the tool docs and the tentative calls alone
(with ``--saag-informed``, also the gold-free SAAG report of those calls, which the reflection LM then
reads among the reviewer's inputs; tests/optimize/test_saag_informed.py checks both from the request log).

Scoring calls (``pred_name is None``) happen for every rollout, so they compute only the truth
check and the outcome class; the SAAG diagnosis and the long text are built only when GEPA asks
for feedback on a predictor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dspy

from saag_opt.evaluation.estimate import prompt_tokens
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.model import Example, ToolCall
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
    short_value,
)
from saag_opt.saag import diagnose_with_gold
from saag_opt.saag.truth import check_truth

if TYPE_CHECKING:
    from saag_opt.agents.setup import Condition
    from saag_opt.optimize.program import RunFn


@dataclass(frozen=True, slots=True)
class ReviewStep:
    """One review round as the metric sees it: the verdict, its feedback, and the calls it led to."""

    error: bool
    feedback: str
    revised: tuple[ToolCall, ...] | None
    unusable: bool = False


@dataclass(frozen=True, slots=True)
class RolloutView:
    """The parts of a mechanism outcome the metric needs, independent of the mechanism family."""

    base_calls: tuple[ToolCall, ...]
    steps: tuple[ReviewStep, ...]
    final_calls: tuple[ToolCall, ...]
    error: str | None = None
    unusable: int = 0
    """Reviewer replies that stayed unreadable (reviews, a selection, grades)."""

    @property
    def objected(self) -> bool:
        """Did the reviewer reject at least once?"""
        return any(step.error for step in self.steps)


def _calls_of(value: Any) -> tuple[ToolCall, ...]:
    """Calls from a Proposal, a model Prediction, a list of ToolCall, or None (= abstain)."""
    if value is None:
        return ()
    value = getattr(value, "prediction", value)
    calls = getattr(value, "calls", value)
    return tuple(c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in calls)


def view_outcome(outcome: Any) -> RolloutView:
    """Adapt an ``agents.mechanisms.MechanismOutcome`` to a ``RolloutView``.

    Progressive/gate rounds: ``verdict`` "reject" is an objection, "approve" and "reviewer_failed"
    are not. s/g mechanisms have no verdicts; choosing a candidate other than the base call counts as
    the objection, and one step summarises the candidates and grades.
    """
    if isinstance(outcome, RolloutView):
        return outcome
    steps = [ReviewStep(error=getattr(r, "verdict", "") in ("reject", "saag_fail") or (
                            getattr(r, "verdict", "") == "reviewer_failed" and getattr(r, "revised", None) is not None),
                        feedback=str((getattr(r, "note", None) if getattr(r, "verdict", "") == "reviewer_failed"
                                      else None) or getattr(r, "feedback", None) or getattr(r, "note", None) or ""),
                        revised=_calls_of(r.revised) if getattr(r, "revised", None) is not None else None,
                        unusable=getattr(r, "verdict", "") == "reviewer_failed")
             for r in getattr(outcome, "rounds", ()) or ()]
    base = _calls_of(getattr(outcome, "base", None))
    final = _calls_of(getattr(outcome, "final", None))
    candidates = getattr(outcome, "candidates", ()) or ()
    if candidates:
        steps.append(ReviewStep(error=final != base, feedback=_describe_candidates(outcome), revised=final))
    return RolloutView(base_calls=base, steps=tuple(steps), final_calls=final,
                       error=getattr(outcome, "error", None),
                       unusable=int(getattr(outcome, "reviewer_unusable", 0) or sum(s.unusable for s in steps)))


def _describe_candidates(outcome: Any) -> str:
    parts = []
    for cand in outcome.candidates:
        grade = "" if cand.score is None else f", grade {cand.score:.2f}"
        why = f" ({clip_text(cand.rationale, 120)})" if getattr(cand, "rationale", None) else ""
        parts.append(f"[{cand.index}] T={cand.temperature:.2f}{grade}: {render_calls(_calls_of(cand.prediction))}{why}")
    chosen = "no call (the no-call option)" if outcome.selected is None else f"candidate {outcome.selected}"
    return f"selected {chosen} of: " + "; ".join(parts)


def _example_of(gold: Any) -> Example:
    item = gold.get("item") if hasattr(gold, "get") else None
    if not isinstance(item, Example):
        raise TypeError("GEPA metric: the dspy.Example must carry the saag Example under 'item'")
    return item


def _outcome_of(pred: Any) -> RolloutView | None:
    outcome = pred.get("outcome") if hasattr(pred, "get") else None
    return None if outcome is None else view_outcome(outcome)


def metric(gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
           pred_trace: Any = None) -> dspy.Prediction:
    """GEPA feedback metric over (dspy.Example(item=Example), dspy.Prediction(outcome=...)).

    A rollout that failed (no outcome, or an outcome with ``error``) scores 0 with the error as
    feedback, so one broken example never stops the run.
    """
    example = _example_of(gold)
    view = _outcome_of(pred)
    if view is None or view.error:
        reason = view.error if view is not None else "the program produced no outcome"
        return dspy.Prediction(score=0.0, feedback=f"The rollout failed: {reason}.",
                               objective_scores={"help": 0.0, "no_harm": 1.0}, outcome_class="error")
    base = check_truth(view.base_calls, example)
    final = base if view.final_calls == view.base_calls else check_truth(view.final_calls, example)
    base_ok, final_ok = base.correct, final.correct
    cls = classify_outcome(base_ok, final_ok, view.objected, view.unusable > 0)
    objectives = help_harm_objectives(base_ok, final_ok)
    if pred_name is None:
        feedback = f"Outcome: {cls}."
    else:
        feedback = build_feedback(example, view, cls, final_ok, errors=(base.reason, final.reason))
    return dspy.Prediction(score=1.0 if final_ok else 0.0, feedback=feedback,
                           objective_scores=objectives, outcome_class=cls)


def build_feedback(example: Example, view: RolloutView, cls: OutcomeClass, final_ok: bool,
                   errors: tuple[str, str] | None = None) -> str:
    """The reflection text: SAAG diagnosis of the base call, each verdict, the revision, the outcome.

    ``errors``: BFCL's error type of the base and the final call (``TruthResult.reason``: ``value:city``,
    ``wrong_func_name``...), named on their lines; parameter and function names only, never a gold value.
    """
    base_error, final_error = errors if errors is not None else (None, None)
    lines = [f"Outcome: {cls}. {OUTCOME_ADVICE[cls]}"]
    lines.append(f"Base call: {render_calls(view.base_calls)}" + _error_note(base_error))
    lines.extend(describe_saag(view.base_calls, example))
    for i, step in enumerate(view.steps, start=1):
        verdict = "REJECTED (error=true)" if step.error else "APPROVED (error=false)"
        if step.unusable:
            verdict = (f"UNUSABLE: the reply could not be read ({clip_text(step.feedback, 160)}); "
                       f"the run's policy counted it as {'a rejection' if step.error else 'an approval'}")
            lines.append(f"Review {i}: {verdict}.")
            if step.revised is not None:
                lines.append(f"Revision {i}: {describe_revision(view.base_calls if i == 1 else _prev(view, i), step.revised)}")
            continue
        lines.append(f"Review {i}: {verdict}." + (f" Reviewer feedback: {clip_text(step.feedback)}" if step.feedback else ""))
        if step.revised is not None:
            lines.append(f"Revision {i}: {describe_revision(view.base_calls if i == 1 else _prev(view, i), step.revised)}")
    if not view.steps:
        lines.append("The reviewer was not consulted for this example.")
    if view.unusable and not any(step.unusable for step in view.steps):
        lines.append(f"{view.unusable} reviewer repl{'y' if view.unusable == 1 else 'ies'} (selection or grades) "
                     "could not be read and fell back to the default candidate or rank.")
    lines.append(f"Final call: {render_calls(view.final_calls)} -> {'correct' if final_ok else 'incorrect'}"
                 f"{_error_note(final_error)}.")
    lines.append(f"Expected (gold, {GOLD_LABEL}): {render_gold(example)}")
    return "\n".join(lines)


def _error_note(reason: str | None) -> str:
    return "" if reason in (None, "ok") else f" (BFCL error type: {reason})"


def _prev(view: RolloutView, i: int) -> tuple[ToolCall, ...]:
    for step in reversed(view.steps[: i - 1]):
        if step.revised is not None:
            return step.revised
    return view.base_calls


def describe_saag(calls: Sequence[ToolCall], example: Example) -> list[str]:
    """SAAG lines for the base call: stage reached and the stage diagnostics (gold-free)."""
    report = diagnose_with_gold(list(calls), example)
    if not getattr(report, "applicable", True):
        return ["SAAG cascade: not applicable (the gold says no call is correct; only the truth check decides)."]
    stage = getattr(report, "stage_reached", None)
    head = "SAAG cascade: PASSED all three stages" if getattr(report, "passed", False) else \
        f"SAAG cascade: failed at stage {stage} ({_STAGE_NAMES.get(stage, 'unknown')})"
    lines = [head + "."]
    for k, rep in enumerate(getattr(report, "calls", ()) or (), start=1):
        detail = _call_diagnostics(rep)
        if detail:
            lines.append(f"  call {k}: " + "; ".join(detail))
    for corr in getattr(report, "corrections", ()) or ():
        lines.append(f"  SAAG correction: {clip_text(str(corr))}")
    return lines


_STAGE_NAMES: dict[Any, str] = {1: "registry: function name", 2: "structure: parameter names",
                                3: "grounding: argument values", "passed": "passed"}


def _call_diagnostics(rep: Any) -> list[str]:
    """Per-call SAAG fields worth telling the reflection LM; absent fields are skipped."""
    out: list[str] = []
    fnem = getattr(rep, "fnem", None)
    if fnem == -1:
        out.append("FNEM=-1 (no parsable call)")
    elif fnem == 0:
        out.append(f"FNEM=0 (name not registered), NCS={_num(getattr(rep, 'ncs', None))}, "
                   f"nearest registered name `{getattr(rep, 'nearest_name', None)}`")
    for label, attr in (("missing required params", "missing_required"), ("spurious params", "spurious")):
        vals = getattr(rep, attr, None)
        if vals:
            out.append(f"{label}: {', '.join(map(str, vals))}")
    drifted = getattr(rep, "drifted", None)
    if drifted:
        items = drifted.items() if isinstance(drifted, Mapping) else ((d, None) for d in drifted)
        out.append("drifted params: " + ", ".join(f"`{p}`" + (f" (did you mean `{n}`)" if n else "") for p, n in items))
    h = getattr(rep, "h", None)
    if isinstance(h, Mapping):
        ungrounded = [p for p, v in h.items() if v]
        if ungrounded:
            vhr = _num(getattr(rep, "vhr", None))
            out.append(f"ungrounded values (not found in the request): {', '.join(ungrounded)}; VHR={vhr}")
    return out


def render_gold(example: Example) -> str:
    """Gold calls as text (feedback only)."""
    if example.expect == "no_call":
        return "no function call should be made."
    if example.expect == "any_call":
        return "any relevant function call is acceptable."
    parts = []
    for gold in example.gold or ():
        for name, params in gold.items():
            args = ", ".join(f"{p}={short_value(list(v))}" for p, v in params.items())
            parts.append(f"{name}({args})")
    return "; ".join(parts) + ' (lists give acceptable values; "" = may be omitted)'


def _num(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.2f}"


class SingleCalls:
    """``rollouts.Work`` for single calls (module docstring): an item is an ``Example``."""

    record = ExampleRecord
    """The rows a test-phase compare of single calls writes."""

    def rollout(self, condition: Condition) -> RunFn:
        """``Condition.run``: the set-up's mechanism on one example, with the reviewer it is given."""
        return condition.run

    def metric(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> dspy.Prediction:
        """``metric``."""
        return metric(gold, pred, trace, pred_name, pred_trace)

    def rail_example(self, item: Example) -> Example:
        """The example itself: the rails read what the reflection LM read."""
        return item

    def rollout_size(self, items: Sequence[Example], reviews: float, revisions: float) -> RolloutSize:
        """One reviewed call per rollout, the base agent's first answer cached."""
        return RolloutSize(reviews, revisions, prompt_tokens(items, sample_size=20), 0.0, "base first answers cached")


CALLS = SingleCalls()
"""The single-call work (stateless: one for every run)."""


__all__ = ["CALLS", "ReviewStep", "RolloutView", "SingleCalls", "build_feedback", "describe_saag", "metric",
           "render_gold", "view_outcome"]
