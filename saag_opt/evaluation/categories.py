"""Accuracy per dataset category, and BFCL's non-live relevance mean: what ``score`` and ``evaluate`` both report."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

RELEVANCE_GROUPS = ("simple", "multiple", "parallel", "parallel_multiple")
"""BFCL's non-live AST groups; ``simple`` is itself the unweighted mean of ``simple_*`` (BFCL does so)."""



class CategoryScore(BaseModel):
    """Truth accuracy within one category."""

    n: int
    """Predictions scored in this category."""
    correct: int
    """How many were correct."""
    accuracy: float
    """correct / n."""


class RelevanceSuite(BaseModel):
    """BFCL's non-live summary: unweighted mean over the groups simple/multiple/parallel/parallel_multiple."""

    mean: float
    """Unweighted mean of the group accuracies present."""
    groups: dict[str, float]
    """Group -> accuracy (``simple`` = unweighted mean of the ``simple*`` categories)."""
    complete: bool
    """All four groups present; otherwise the mean is over fewer groups than BFCL's."""



def relevance_suite(categories: Mapping[str, CategoryScore]) -> RelevanceSuite | None:
    """BFCL's non-live mean over the four relevance groups present (None if none is)."""
    simple = [score.accuracy for cat, score in categories.items() if cat == "simple" or cat.startswith("simple_")]
    groups: dict[str, float] = {}
    if simple:
        groups["simple"] = sum(simple) / len(simple)
    for group in RELEVANCE_GROUPS[1:]:
        if group in categories:
            groups[group] = categories[group].accuracy
    if not groups:
        return None
    return RelevanceSuite(mean=sum(groups.values()) / len(groups), groups=groups,
                          complete=len(groups) == len(RELEVANCE_GROUPS))


__all__ = ["RELEVANCE_GROUPS", "CategoryScore", "RelevanceSuite", "relevance_suite"]
