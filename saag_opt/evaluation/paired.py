"""Records -> numbers: per-condition accuracy and the paired base-vs-reviewed summary.

One builder for every report that pairs a reviewed condition with the base agent on the same
examples: an evaluate run's ``summary.json``, each side of a compare run (and so optimize's
seed-vs-best test phase, which is a compare). Pure: no LM, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from saag_opt.evaluation.categories import CategoryScore, relevance_suite
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.results import ConditionSummary, ExampleRecord, LatencySummary


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise_condition(condition: str, records: Sequence[ExampleRecord]) -> ConditionSummary:
    """Accuracy per category, relevance-suite mean and irrelevance for one condition's records."""
    totals: dict[str, list[int]] = {}
    for record in records:
        cell = totals.setdefault(record.category, [0, 0])
        cell[0] += 1
        cell[1] += record.correct
    categories = {cat: CategoryScore(n=n, correct=c, accuracy=c / n) for cat, (n, c) in sorted(totals.items())}
    irrelevant = [(n, c) for cat, (n, c) in totals.items() if "irrelevance" in cat]
    irr_n = sum(n for n, _ in irrelevant)
    correct = sum(r.correct for r in records)
    return ConditionSummary(
        condition=condition, n=len(records), correct=correct, accuracy=correct / len(records) if records else None,
        categories=categories, relevance_suite=relevance_suite(categories),
        irrelevance=sum(c for _, c in irrelevant) / irr_n if irr_n else None,
        errors=sum(r.error is not None for r in records),
        reviewer_unusable=sum(r.reviewer_unusable for r in records),
        mean_seconds=_mean([r.seconds for r in records if r.error is None]))


@dataclass(frozen=True)
class PairedSummary:
    """A reviewed condition against its own base rows, example by example.

    Accuracy counts every row; help/harm, latency and the gated share count only the pairs where
    neither side has an error (a missing base row counts as an error).
    """

    base: ConditionSummary
    reviewed: ConditionSummary
    help_harm: HelpHarm
    latency: LatencySummary
    errors: int
    reviewer_calls_per_item: float | None
    agent_calls_per_item: float | None
    gated_share: float | None
    tokens: int


def summarise_pairs(condition: str, pairs: Sequence[tuple[ExampleRecord | None, ExampleRecord]], *,
                    gated: bool, seed: int = 0) -> PairedSummary:
    """The paired summary of ``(base row or None, reviewed row)`` per example (``gated``: the mechanism has a gate)."""
    bases = [b for b, _ in pairs if b is not None]
    finals = [f for _, f in pairs]
    ok = [(b, f) for b, f in pairs if b is not None and b.error is None and f.error is None]
    base_s, final_s = _mean([b.seconds for b, _ in ok]), _mean([f.seconds for _, f in ok])
    gates = [float(f.gated) for _, f in ok]
    return PairedSummary(
        base=summarise_condition("base", bases), reviewed=summarise_condition(condition, finals),
        help_harm=HelpHarm.from_pairs([(b.correct, f.correct) for b, f in ok], seed=seed),
        latency=LatencySummary(base_mean_seconds=base_s, final_mean_seconds=final_s,
                               overhead_x=final_s / base_s if base_s and final_s is not None else None,
                               untimed_replays=sum(b.untimed_replays + f.untimed_replays for b, f in ok)),
        errors=sum(1 for b, f in pairs if b is None or b.error is not None or f.error is not None),
        reviewer_calls_per_item=_mean([f.reviewer_calls for f in finals]),
        agent_calls_per_item=_mean([f.agent_calls for f in finals]),
        gated_share=_mean(gates) if gated and gates else None,
        tokens=sum(f.tokens for f in finals))


__all__ = ["PairedSummary", "summarise_condition", "summarise_pairs"]
