"""What GEPA's feedback says on every kind of work: the outcome classes, the gold label, the objectives, calls as text.

A review's outcome is read the same way on single calls (``optimize.calls``) and on conversations
(``optimize.conversations``): the paired (base, final) correctness plus whether the review objected
gives one ``OutcomeClass``; ``help_harm_objectives`` gives gepa's two objectives from the correctness
alone. Shared so the rails' minibatch-collapse check, the failure-first sampler and the edit proposer
read both kinds' feedback alike. Feedback is read only by the reflection LM; what it quotes of the gold
is on lines that say ``GOLD_LABEL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from saag_opt.model import ToolCall, canonical_json

OutcomeClass = Literal["fixed", "broken", "missed error", "false alarm", "kept right", "kept wrong after review",
                       "reviewer error"]
"""How a review changed one example: the paired (base, final) correctness plus whether it objected."""

GOLD_LABEL = "for your analysis only; never shown to the reviewer"
"""What every feedback line that reads the gold says (it is one line each, so a reader can tell them apart)."""

FAILING: frozenset[str] = frozenset({"broken", "missed error", "false alarm", "kept wrong after review",
                                     "reviewer error", "error"})
"""Outcome classes a reviewer rule could change (``error``: the rollout itself failed)."""


def outcome_of(feedback: str) -> str | None:
    """The outcome class a feedback text (``build_feedback``'s, or a failed rollout's) starts with, or None."""
    if feedback.startswith("The rollout failed"):
        return "error"
    head = feedback.removeprefix("Outcome: ").split(".", 1)[0]
    return head if feedback.startswith("Outcome: ") else None


OUTCOME_ADVICE: dict[str, str] = {
    "fixed": "Good: the review caught a real error and the revision corrected it. Keep this behaviour.",
    "broken": "Harmful: the base call was already correct, the reviewer objected anyway and the revision made "
              "it wrong. The reviewer must approve calls that match the request and the tool schema.",
    "missed error": "The base call was wrong but the reviewer approved it. The reviewer should have flagged it.",
    "false alarm": "The base call was correct and the reviewer objected; the revision happened to stay correct, "
                   "but the objection cost an extra round. Approve correct calls.",
    "kept right": "Correct call approved. Keep this behaviour.",
    "kept wrong after review": "The reviewer objected to a wrong call, but the final call is still wrong: its "
                               "feedback was not specific enough for the agent to fix the call.",
    "reviewer error": "The reviewer's reply could not be read, even when asked twice, so it took no part in the "
                      "decision (a fixed policy did). The instruction must make the reviewer answer every time "
                      "with exactly the requested output fields and value types.",
}


def classify_outcome(base_correct: bool, final_correct: bool, objected: bool, unusable: bool = False) -> OutcomeClass:
    """Name the paired outcome.

    An unreadable reviewer reply wins (it is the reviewer's error whatever the policy made of it),
    then ``broken`` and ``fixed`` win over verdict-based classes.
    """
    if unusable:
        return "reviewer error"
    if base_correct and not final_correct:
        return "broken"
    if not base_correct and final_correct:
        return "fixed"
    if base_correct:
        return "false alarm" if objected else "kept right"
    return "kept wrong after review" if objected else "missed error"


def help_harm_objectives(base_ok: bool, final_ok: bool) -> dict[str, float]:
    """GEPA's two objectives from the paired correctness alone (not the outcome class).

    Why not the class: an unreadable reply after a revision is a "reviewer error" for the feedback, but
    the call was still fixed or broken, and the run's help/harm counts (``candidates``) must add up with
    the score: final right = base right + fixed - broken.
    """
    return {"help": 1.0 if final_ok and not base_ok else 0.0, "no_harm": 0.0 if base_ok and not final_ok else 1.0}


def describe_revision(before: Sequence[ToolCall], after: Sequence[ToolCall]) -> str:
    """What the agent changed after a rejection, in one line."""
    if tuple(before) == tuple(after):
        return "the agent kept the same call."
    b = {c.name: dict(c.arguments) for c in before}
    a = {c.name: dict(c.arguments) for c in after}
    if set(b) != set(a):
        return f"the agent changed the function(s) to {render_calls(after)}."
    changes = []
    for name, args in a.items():
        old = b.get(name, {})
        for p in sorted(set(old) | set(args)):
            if p not in args:
                changes.append(f"removed `{p}`")
            elif p not in old:
                changes.append(f"added `{p}`={short_value(args[p])}")
            elif canonical_json(old[p]) != canonical_json(args[p]):
                changes.append(f"`{p}`: {short_value(old[p])} -> {short_value(args[p])}")
    return "the agent " + (", ".join(changes) if changes else "reordered its calls") + "."


def render_calls(calls: Sequence[ToolCall]) -> str:
    """Calls as ``name(k=v, ...)``, one line (``(no call)`` for none)."""
    if not calls:
        return "(no call)"
    return "; ".join(f"{c.name}({', '.join(f'{k}={short_value(v)}' for k, v in c.arguments.items())})" for c in calls)


def short_value(value: Any, limit: int = 80) -> str:
    """A value as canonical JSON on one line, cut to ``limit`` characters."""
    return clip_text(canonical_json(value), limit)


def clip_text(text: str, limit: int = 400) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["FAILING", "GOLD_LABEL", "OUTCOME_ADVICE", "OutcomeClass", "classify_outcome", "clip_text",
           "describe_revision", "help_harm_objectives", "outcome_of", "render_calls", "short_value"]
