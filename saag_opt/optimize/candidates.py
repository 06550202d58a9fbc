"""Help and harm of each GEPA candidate on val, read from gepa's state: no rollout runs again.

Why from the state: the metric (``rollouts.Work.metric``, either kind's) gives every val example two objective scores
besides its score (final call right): ``help`` (1 = the review fixed a wrong base call) and
``no_harm`` (0 = it broke a right one). gepa keeps, per candidate, their means over the val
examples it evaluated (``prog_candidate_objective_scores``) and the mean score
(``program_full_scores_val_set``), so over ``n`` examples the counts follow exactly:
``fixed = help * n``, ``broken = (1 - no_harm) * n`` and, since final right = base right + fixed -
broken, ``base_right = score * n - fixed + broken``. A rollout that failed, or whose reviewer reply
could not be read, is neither fixed nor broken for the metric, so its base call counts as right
exactly when its final call is.

Pure: no gepa import (the state is read by attribute), no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from saag_opt.agents.report_note import COMPONENT_PREFIX, is_note, note_of
from saag_opt.optimize.edits import rule_changes
from saag_opt.optimize.summary import CandidateHelpHarm


def count_help_harm(candidate: int, *, score: float, help_mean: float, no_harm_mean: float, n_val: int,
                    parent: int | None = None, version: str | None = None,
                    edit: Sequence[str] = (), components: Sequence[str] = (),
                    flips: tuple[int, int] | None = None) -> CandidateHelpHarm:
    """The counts behind a candidate's val means (see the module docstring for the arithmetic)."""
    fixed = round(help_mean * n_val)
    broken = round((1.0 - no_harm_mean) * n_val)
    return CandidateHelpHarm(candidate=candidate, version=version, parent=parent, n_val=n_val,
                             base_right=round(score * n_val) - fixed + broken, fixed=fixed, broken=broken,
                             val_accuracy=round(score, 6), edit=list(edit), components=list(components),
                             gained=None if flips is None else flips[0], lost=None if flips is None else flips[1])


def changed_components(parent: Mapping[str, str] | None, child: Mapping[str, str]) -> list[str]:
    """The predictors (``review``, ``report``) whose text differs from the parent's; ``[]`` for the seed."""
    if parent is None:
        return []
    return [key.removeprefix(COMPONENT_PREFIX) for key in sorted(child)
            if _text(key, parent.get(key, "")) != _text(key, child[key])]


def _text(key: str, text: str) -> str:
    """A predictor's text as a rule list reads it (a note's "(no note)" is no text)."""
    return note_of(text) if is_note(key) else text


def val_flips(parent: Mapping[Any, float], child: Mapping[Any, float]) -> tuple[int, int]:
    """``(gained, lost)`` over the val examples both were scored on: right now and wrong before, and the reverse."""
    shared = parent.keys() & child.keys()
    gained = sum(1 for i in shared if child[i] > parent[i])
    return gained, sum(1 for i in shared if child[i] < parent[i])


def by_component(candidates: Iterable[CandidateHelpHarm]) -> dict[str, dict[str, int]]:
    """Per edited predictor: candidates whose edit touched only it, and their val examples gained and lost.

    Why only single-component edits: a candidate that changed two predictors cannot say which one moved
    its outcomes; those are counted under ``both``.
    """
    out: dict[str, dict[str, int]] = {}
    for c in candidates:
        if not c.components or c.gained is None or c.lost is None:
            continue
        key = c.components[0] if len(c.components) == 1 else "both"
        row = out.setdefault(key, {"candidates": 0, "gained": 0, "lost": 0, "moved": 0})
        row["candidates"] += 1
        row["gained"] += c.gained
        row["lost"] += c.lost
        row["moved"] += 1 if c.gained or c.lost else 0
    return out


def candidate_edit(parent: Mapping[str, str] | None, child: Mapping[str, str]) -> list[str]:
    """Rule-level changes from ``parent`` over the predictors whose text changed (``[]`` for the seed).

    With several predictors each line names its predictor; a change that moves no rule (only
    whitespace) still shows as one line, so a changed candidate never reads as unchanged.
    """
    if parent is None:
        return []
    lines: list[str] = []
    for key in sorted(child):
        before, after = _text(key, parent.get(key, "")), _text(key, child[key])
        if before == after:
            continue
        prefix = f"{key.removeprefix(COMPONENT_PREFIX)}: " if len(child) > 1 else ""
        changes = rule_changes(before, after) or ["same rules, layout changed"]
        lines += [prefix + line for line in changes]
    return lines


def lineage_change(state: Any, idx: int) -> tuple[int | None, list[str], tuple[int, int] | None]:
    """Candidate ``idx``'s parent, the predictors its edit changed and its val ``(gained, lost)`` against the parent.

    Read by attribute from a gepa state (``from_state``; recompute.py reads a saved state the same way).
    """
    parent = next((p for p in state.parent_program_for_candidate[idx] if p is not None), None)
    if parent is None:
        return None, [], None
    scores = state.prog_candidate_val_subscores
    return (parent, changed_components(state.program_candidates[parent], state.program_candidates[idx]),
            val_flips(scores[parent], scores[idx]) if scores[parent] else None)


def from_state(state: Any, idx: int, version: str | None = None) -> CandidateHelpHarm | None:
    """Candidate ``idx``'s counts and edit from a gepa state; None when gepa kept no objective means for it."""
    if idx >= len(state.program_candidates):
        return None
    means = state.prog_candidate_objective_scores[idx] or {}
    n_val = len(state.prog_candidate_val_subscores[idx])
    if not n_val or "help" not in means or "no_harm" not in means:
        return None
    parent, components, flips = lineage_change(state, idx)
    before = state.program_candidates[parent] if parent is not None else None
    return count_help_harm(idx, score=float(state.program_full_scores_val_set[idx]),
                           help_mean=float(means["help"]), no_harm_mean=float(means["no_harm"]), n_val=n_val,
                           parent=parent, version=version, edit=candidate_edit(before, state.program_candidates[idx]),
                           components=components, flips=flips)


def dominates(a: CandidateHelpHarm, b: CandidateHelpHarm) -> bool:
    """``a`` fixes at least as many wrong base calls and breaks at most as many right ones, one strictly."""
    return a.fixed >= b.fixed and a.broken <= b.broken and (a.fixed > b.fixed or a.broken < b.broken)


def help_harm_front(candidates: Iterable[CandidateHelpHarm]) -> set[int]:
    """Indices of the candidates no other candidate dominates (``dominates``): the help-vs-harm front.

    Counts, not rates: every candidate is evaluated on the same val examples behind the same base
    agent, so the counts order them as the rates do and stay defined when a denominator is 0.
    """
    pool = list(candidates)
    return {c.candidate for c in pool if not any(dominates(other, c) for other in pool)}


__all__ = ["COMPONENT_PREFIX", "by_component", "candidate_edit", "changed_components", "count_help_harm", "dominates",
           "from_state", "help_harm_front", "lineage_change", "val_flips"]
