"""Two reviewed sides compared on the same examples, and the ``summary.json`` models of a compare run.

Pure: no LM, no I/O. ``compare_sides`` computes every number ``saag-opt compare`` reports from the
two sides' records (``Side``, defined here; ``evaluation.sides`` reads them from finished runs):
per-category accuracy (base, A, B), help/harm of each version against its own base rows, the
paired A-vs-B table (``HelpHarm`` over (A correct, B correct): "fixed" = only B right, "broken" =
only A right) with McNemar's exact p and a paired bootstrap CI of B - A, and tokens/dollars/latency
per version. Examples with an error on either side are left out of every paired table (as the
runner does). Compare runs are registered here with ``runfiles.register_summary``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from saag_opt.agents import parse_mechanism
from saag_opt.errors import ConfigError
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.paired import summarise_condition, summarise_pairs
from saag_opt.evaluation.results import ConditionSummary, ExampleRecord, LatencySummary
from saag_opt.runfiles import register_summary

COMPARE_SCHEMA_VERSION = 1
"""Version of the compare ``summary.json`` format."""

CompareMode = Literal["prompts", "runs"]
SideKey = Literal["a", "b"]


@dataclass(frozen=True)
class RecordedPrompt:
    """The reviewer prompt behind a finished run's condition, as that run recorded it."""

    prompt: dict[str, Any]
    """``{"prompt", "ref"?, "sha256"?}``: the reference given and the version it resolved to."""
    prompts_dir: str | None
    """The prompt store the run used (None: the default store)."""
    contaminated: list[str] | None
    """The split contamination the run itself recorded (None: a run too old to record it)."""

    @property
    def shown(self) -> str | None:
        """How tables name the prompt: the resolved reference, else the one given."""
        return self.prompt.get("ref") or self.prompt.get("prompt")


@dataclass
class Side:
    """One version's records, keyed by example id: its own base rows and its reviewed rows."""

    key: SideKey
    label: str
    condition: str
    mechanism: str
    base: dict[str, ExampleRecord]
    final: dict[str, ExampleRecord]
    source: dict[str, Any] = field(default_factory=dict)
    costs: dict[str, Any] | None = None
    run_dir: Path | None = None
    reviewer_prompt: RecordedPrompt | None = None
    """Runs mode: the reviewer prompt the source run recorded, for ``run_contamination``."""


def side_from_records(key: SideKey, label: str, condition: str, records: Sequence[ExampleRecord], *,
                      source: dict[str, Any], costs: dict[str, Any] | None, run_dir: Path | None) -> Side:
    """The side of ``condition``'s rows in ``records`` (the mechanism is the condition before any ``@label``)."""
    base = {r.example_id: r for r in records if r.condition == "base"}
    final = {r.example_id: r for r in records if r.condition == condition}
    mechanism = condition.split("@", 1)[0]
    return Side(key, label, condition, mechanism, base, final, source, costs, run_dir)




class PairedComparison(BaseModel):
    """A vs B on the same examples (examples with an error on either side excluded)."""

    n: int
    """Paired examples."""
    both_right: int
    """Both versions right."""
    b_only_right: int
    """A wrong, B right (B's gains)."""
    a_only_right: int
    """A right, B wrong (B's losses)."""
    both_wrong: int
    """Both versions wrong."""
    a_accuracy: float | None
    """Accuracy of A on the paired examples."""
    b_accuracy: float | None
    """Accuracy of B on the paired examples."""
    net_change: float | None
    """B accuracy - A accuracy (fraction)."""
    mcnemar_p: float
    """Two-sided exact McNemar p on the discordant pairs (b_only_right vs a_only_right)."""
    net_change_ci95: list[float] | None
    """Paired bootstrap 95% CI of ``net_change``."""

    @classmethod
    def from_help_harm(cls, hh: HelpHarm) -> PairedComparison:
        """Rename ``HelpHarm`` over (A correct, B correct): fixed = only B right, broken = only A right."""
        return cls(n=hh.n, both_right=hh.both_right, b_only_right=hh.fixed, a_only_right=hh.broken,
                   both_wrong=hh.both_wrong, a_accuracy=hh.base_accuracy, b_accuracy=hh.final_accuracy,
                   net_change=hh.net_change, mcnemar_p=hh.p_value,
                   net_change_ci95=list(hh.net_change_ci95) if hh.net_change_ci95 else None)

    def to_help_harm(self) -> HelpHarm:
        """The same table as ``HelpHarm`` with A as the reference (for rows shared with the base comparisons)."""
        low, high = self.net_change_ci95 or (None, None)
        return HelpHarm(both_right=self.both_right, fixed=self.b_only_right, broken=self.a_only_right,
                        both_wrong=self.both_wrong, p_value=self.mcnemar_p, ci_low=low, ci_high=high)


class SideSummary(BaseModel):
    """One version: accuracy, help/harm vs its base, latency and cost (over the matched examples)."""

    key: SideKey
    """``a`` or ``b``."""
    label: str
    """Short name for tables (prompt version name, or run id)."""
    condition: str
    """The reviewed condition in the records (``r2``, ``r2@v2``)."""
    mechanism: str
    """Mechanism spec."""
    source: dict[str, Any]
    """Where it came from: ``{"prompt", "sha256"}`` or ``{"run_dir", "verb", "status"}``."""
    run_dir: str | None
    """The evaluate run that produced it (prompts mode) or the source run (runs mode)."""
    accuracy: ConditionSummary
    """Reviewed accuracy per category, relevance suite, irrelevance."""
    help_harm: HelpHarm
    """Against this side's own base rows."""
    latency: LatencySummary
    """Mean seconds per example (base call included) and overhead vs base."""
    tokens: int
    """Tokens billed by the reviewed condition's rows (reviews + revisions; 0 for cache hits)."""
    dollars: float | None
    """Dollars of this version's own LM calls (None when unknown)."""
    costs: dict[str, Any] | None
    """Cost ledger per role of this version (prompts mode: its own run; runs mode: the source run)."""
    errors: int
    """Matched examples whose reviewed or base row carries an error."""
    reviewer_calls_per_item: float | None
    """Mean LLM reviewer calls per example."""
    gated_share: float | None
    """gate+ mechanisms: share of examples passed by the SAAG gate."""
    contaminated: list[str] = Field(default_factory=list)
    """Splits of the compared examples this version's reviewer prompt was trained or selected on (not
    held out). Runs mode: the prompt each source run recorded, checked the same way."""
    reviewer_mismatch: str | None = None
    """Prompts mode: why this version's reviewer is not the one GEPA tuned it for (``EvaluationSummary``)."""


class CompareSummary(BaseModel):
    """``summary.json`` of a compare run (also what ``--json`` writes)."""

    schema_version: int = COMPARE_SCHEMA_VERSION
    """Format version."""
    run_id: str | None = None
    """The compare run directory name."""
    mode: CompareMode
    """``prompts`` (evaluated now) or ``runs`` (finished runs, no LM calls)."""
    matched: int
    """Examples present in both sides."""
    only_a: int
    """Examples only A has."""
    only_b: int
    """Examples only B has."""
    base: ConditionSummary
    """The base agent alone on the matched examples (A's base rows)."""
    base_disagreements: int
    """Matched examples whose base correctness differs between the sides (0 when the base is shared)."""
    base_costs: dict[str, Any] | None = None
    """Prompts mode: the ledger of the shared base pass."""
    a: SideSummary
    """Version A."""
    b: SideSummary
    """Version B."""
    paired: PairedComparison
    """A vs B on the same examples."""
    notes: list[str] = Field(default_factory=list)
    """Caveats worth reading (different datasets, runs that did not finish, ...)."""
    stopped: str | None = None
    """Prompts mode: why the passes ended early (``--max-cost`` reached); the tables cover the
    examples both versions finished. None = complete."""


register_summary("compare", CompareSummary, records=ExampleRecord)


def _dollars(costs: Mapping[str, Any] | None) -> float | None:
    if not costs:
        return None
    roles = costs.get("roles", costs)
    total = roles.get("total") if isinstance(roles, Mapping) else None
    return float(total["dollars"]) if isinstance(total, Mapping) and "dollars" in total else None


def _gated(spec: str) -> bool:
    """The mechanism behind a condition name has a SAAG gate (False for a name no mechanism parses)."""
    try:
        return parse_mechanism(spec).gated
    except ConfigError:
        return False


def summarise_side(side: Side, ids: Sequence[str], *, seed: int = 0) -> SideSummary:
    """One side's numbers over ``ids`` (ids must be in ``side.final``; a missing base row counts as an error)."""
    paired = summarise_pairs(side.condition, [(side.base.get(i), side.final[i]) for i in ids],
                             gated=_gated(side.mechanism), seed=seed)
    return SideSummary(
        key=side.key, label=side.label, condition=side.condition, mechanism=side.mechanism, source=side.source,
        run_dir=str(side.run_dir) if side.run_dir else None, accuracy=paired.reviewed, help_harm=paired.help_harm,
        latency=paired.latency, tokens=paired.tokens, dollars=_dollars(side.costs), costs=side.costs,
        errors=paired.errors, reviewer_calls_per_item=paired.reviewer_calls_per_item,
        gated_share=paired.gated_share)


def matched_ids(a: Side, b: Side) -> list[str]:
    """Example ids with a reviewed row on both sides, in A's order."""
    return [i for i in a.final if i in b.final]


def compare_sides(a: Side, b: Side, *, mode: CompareMode, seed: int = 0) -> CompareSummary:
    """The full comparison over the examples both sides have (pure: no LM, no I/O).

    Raises:
        ConfigError: the sides share no example id.
    """
    ids = matched_ids(a, b)
    if not ids:
        raise ConfigError(
            f"nothing to compare: A ({a.label}, {len(a.final)} examples) and B ({b.label}, {len(b.final)} "
            "examples) have no example id in common; compare runs over the same dataset and split")
    ok = [i for i in ids if a.final[i].error is None and b.final[i].error is None]
    base_rows = [a.base[i] for i in ids if i in a.base]
    disagree = sum(1 for i in ids if i in a.base and i in b.base and a.base[i].correct != b.base[i].correct)
    paired = HelpHarm.from_pairs([(a.final[i].correct, b.final[i].correct) for i in ok], seed=seed)
    notes = []
    if disagree:
        notes.append(f"the base agent's verdict differs on {disagree} matched example(s): each version's "
                     "help/harm is measured against its own base rows")
    return CompareSummary(
        mode=mode, matched=len(ids), only_a=len(a.final) - len(ids), only_b=len(b.final) - len(ids),
        base=summarise_condition("base", base_rows), base_disagreements=disagree,
        a=summarise_side(a, ids, seed=seed), b=summarise_side(b, ids, seed=seed),
        paired=PairedComparison.from_help_harm(paired), notes=notes)


__all__ = ["COMPARE_SCHEMA_VERSION", "CompareMode", "CompareSummary", "PairedComparison", "RecordedPrompt", "Side",
           "SideKey", "SideSummary", "compare_sides", "matched_ids", "side_from_records", "summarise_side"]
