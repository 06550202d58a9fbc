"""N reviewed sides compared on the same examples, and the ``summary.json`` models of a compare run.

Pure: no LM, no I/O. ``compare_sides`` computes every number ``saag-opt compare`` reports from the
sides' records (``Side``, defined here; ``compare.sides`` reads them from finished runs):
per-category accuracy (base and each version), help/harm of each version against its own base
rows, and for every pair of versions the paired table (``HelpHarm`` over (A correct, B correct):
"fixed" = only B right, "broken" = only A right) with McNemar's exact p, its Holm-adjusted p over
all pairs (``holm``), and a paired bootstrap CI of B - A; tokens/dollars/latency per version.
The pair is the unit: two versions are one pair (docs/design.md §19). Examples with an error on
either side of a pair are left out of its paired table (as the runner does). Compare runs are
registered here with ``runfiles.register_summary``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from saag_opt.errors import ConfigError
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.paired import summarise_condition, summarise_pairs
from saag_opt.evaluation.results import ConditionSummary, ExampleRecord, LatencySummary
from saag_opt.runfiles import register_summary

COMPARE_SCHEMA_VERSION = 2
"""Version of the compare ``summary.json`` format: 2 holds N versions (``sides``, ``pairs``)."""
TWO_VERSION_SCHEMA = 1
"""The format a comparison of two versions is written in (``a``, ``b``, ``paired``): the bytes every
two-version run has always had, so older runs, their readers and scripts read on; both formats read."""

CompareMode = Literal["prompts", "runs"]
SideKey = str
"""A version's key: ``a``, ``b``, ``c`` ... in argument order (``side_keys``)."""
MAX_VERSIONS = 26
"""Versions one comparison takes (one letter each)."""


def side_keys(n: int) -> list[str]:
    """The keys of ``n`` versions in argument order: ``a``, ``b``, ``c`` ...

    Raises:
        ConfigError: fewer than 2 or more than ``MAX_VERSIONS`` versions.
    """
    if not 2 <= n <= MAX_VERSIONS:
        raise ConfigError(f"compare takes 2 to {MAX_VERSIONS} versions, got {n}")
    return [chr(ord("a") + i) for i in range(n)]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p values, in the input order.

    Why: with N versions there are N(N-1)/2 McNemar tests; Holm controls the family-wise error
    rate without assuming independence and is uniformly more powerful than Bonferroni. The k-th
    smallest p is multiplied by (m - k + 1), capped at 1, and made monotone in rank.
    """
    m, running = len(p_values), 0.0
    adjusted = [0.0] * m
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def pair_keys(keys: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair (reference, target) of versions, the reference the earlier argument: (a, b), (a, c), (b, c)."""
    return [(ref, target) for i, ref in enumerate(keys) for target in keys[i + 1:]]


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
    """One pair of versions on the same examples (examples with an error on either side excluded).

    In the pair's own terms its reference is "A" and its target "B" (``ref``, ``target`` name the
    versions): ``b_only_right`` counts the target's gains.
    """

    ref: SideKey
    """The reference version's key (the pair's A)."""
    target: SideKey
    """The target version's key (the pair's B)."""

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
    holm_p: float
    """``mcnemar_p`` Holm-adjusted over every pair of the comparison (equal to it for two versions)."""

    @classmethod
    def from_help_harm(cls, hh: HelpHarm, ref: SideKey, target: SideKey, holm_p: float) -> PairedComparison:
        """Rename ``HelpHarm`` over (A correct, B correct): fixed = only B right, broken = only A right."""
        return cls(ref=ref, target=target, n=hh.n, both_right=hh.both_right, b_only_right=hh.fixed,
                   a_only_right=hh.broken, both_wrong=hh.both_wrong, a_accuracy=hh.base_accuracy,
                   b_accuracy=hh.final_accuracy, net_change=hh.net_change, mcnemar_p=hh.p_value,
                   net_change_ci95=list(hh.net_change_ci95) if hh.net_change_ci95 else None, holm_p=holm_p)

    def to_help_harm(self) -> HelpHarm:
        """The same table as ``HelpHarm`` with A as the reference (for rows shared with the base comparisons)."""
        low, high = self.net_change_ci95 or (None, None)
        return HelpHarm(both_right=self.both_right, fixed=self.b_only_right, broken=self.a_only_right,
                        both_wrong=self.both_wrong, p_value=self.mcnemar_p, ci_low=low, ci_high=high)


class SideSummary(BaseModel):
    """One version: accuracy, help/harm vs its base, latency and cost (over the matched examples)."""

    key: SideKey
    """``a``, ``b``, ``c`` ... in argument order."""
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


_PAIR_ONLY = ("ref", "target", "holm_p")
"""Pair fields the two-version format leaves out (one pair: A vs B, Holm p = p)."""


class CompareSummary(BaseModel):
    """``summary.json`` of a compare run (also what ``--json`` writes), for any number of versions.

    Two versions are written in the two-version format (``TWO_VERSION_SCHEMA``: ``a``, ``b``,
    ``paired``, ``only_a``, ``only_b``) and read back from it; ``a``, ``b`` and ``paired`` are
    also properties, so code about a pair of versions reads them by name.
    """

    schema_version: int = COMPARE_SCHEMA_VERSION
    """Format version (in memory always the current one; see ``TWO_VERSION_SCHEMA``)."""
    run_id: str | None = None
    """The compare run directory name."""
    mode: CompareMode
    """``prompts`` (evaluated now) or ``runs`` (finished runs, no LM calls)."""
    matched: int
    """Examples present in every side."""
    only: dict[SideKey, int]
    """Per version: its examples missing from at least one other version (left out of every table)."""
    base: ConditionSummary
    """The base agent alone on the matched examples (A's base rows)."""
    base_disagreements: int
    """Matched examples whose base correctness differs between the sides (0 when the base is shared)."""
    base_costs: dict[str, Any] | None = None
    """Prompts mode: the ledger of the shared base pass."""
    sides: list[SideSummary]
    """The versions, in argument order (keys a, b, c ...)."""
    pairs: list[PairedComparison]
    """Every pair of versions (``pair_keys`` order), McNemar p Holm-adjusted over all of them."""
    notes: list[str] = Field(default_factory=list)
    """Caveats worth reading (different datasets, runs that did not finish, ...)."""
    stopped: str | None = None
    """Prompts mode: why the passes ended early (``--max-cost`` reached); the tables cover the
    examples every version finished. None = complete."""

    @model_validator(mode="before")
    @classmethod
    def _from_two_versions(cls, data: Any) -> Any:
        """A file in the two-version format read as sides a, b and their one pair."""
        if not isinstance(data, Mapping) or "sides" in data or "a" not in data:
            return data
        rest = {k: v for k, v in data.items() if k not in ("a", "b", "paired", "only_a", "only_b")}
        paired = data.get("paired")
        pair = dict(paired) | {"ref": "a", "target": "b", "holm_p": paired.get("mcnemar_p")} \
            if isinstance(paired, Mapping) else paired
        return rest | {"schema_version": COMPARE_SCHEMA_VERSION, "only": {"a": data.get("only_a"),
                                                                          "b": data.get("only_b")},
                       "sides": [data.get("a"), data.get("b")], "pairs": [pair]}

    @model_serializer(mode="wrap")
    def _two_versions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Two versions written as they always were (key order included); more in the N-version format."""
        data: dict[str, Any] = handler(self)
        if len(self.sides) != 2 or len(self.pairs) != 1:
            return data
        only, (a, b), (pair,) = data["only"], data["sides"], data["pairs"]
        return {"schema_version": TWO_VERSION_SCHEMA, "run_id": data["run_id"], "mode": data["mode"],
                "matched": data["matched"], "only_a": only["a"], "only_b": only["b"], "base": data["base"],
                "base_disagreements": data["base_disagreements"], "base_costs": data["base_costs"], "a": a, "b": b,
                "paired": {k: v for k, v in pair.items() if k not in _PAIR_ONLY}, "notes": data["notes"],
                "stopped": data["stopped"]}

    @property
    def keys(self) -> list[SideKey]:
        """The versions' keys in argument order."""
        return [s.key for s in self.sides]

    def pair(self, ref: SideKey, target: SideKey) -> PairedComparison:
        """The pair (``ref``, ``target``) as stored (the reference is the earlier argument).

        Raises:
            KeyError: no such pair.
        """
        for pair in self.pairs:
            if (pair.ref, pair.target) == (ref, target):
                return pair
        raise KeyError(f"no pair {ref!r}, {target!r} in this comparison")

    @property
    def a(self) -> SideSummary:
        """Version A (the first argument)."""
        return self.sides[0]

    @property
    def b(self) -> SideSummary:
        """Version B (the second argument)."""
        return self.sides[1]

    @property
    def paired(self) -> PairedComparison:
        """A vs B on the same examples."""
        return self.pair(self.a.key, self.b.key)

    @property
    def only_a(self) -> int:
        """Examples only A has (not in every other version)."""
        return self.only[self.a.key]

    @property
    def only_b(self) -> int:
        """Examples of B missing from another version."""
        return self.only[self.b.key]


register_summary("compare", CompareSummary, records=ExampleRecord)


def _dollars(costs: Mapping[str, Any] | None) -> float | None:
    if not costs:
        return None
    roles = costs.get("roles", costs)
    total = roles.get("total") if isinstance(roles, Mapping) else None
    return float(total["dollars"]) if isinstance(total, Mapping) and "dollars" in total else None


def _gated(spec: str) -> bool:
    """The mechanism behind a condition name has a SAAG gate (False for a name no mechanism parses)."""
    from saag_opt.agents import parse_mechanism  # noqa: PLC0415 - heavy: dspy (agents face); a run reader stays light

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


def matched_ids(sides: Sequence[Side]) -> list[str]:
    """Example ids with a reviewed row on every side, in A's order."""
    first, *rest = sides
    return [i for i in first.final if all(i in s.final for s in rest)]


def _names(sides: Sequence[Side]) -> str:
    """``A (v1, 12 examples), B (...) and C (...)`` for a message."""
    parts = [f"{s.key.upper()} ({s.label}, {len(s.final)} examples)" for s in sides]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def compare_pairs(sides: Sequence[Side], ids: Sequence[str], *, seed: int = 0) -> list[PairedComparison]:
    """Every pair over ``ids`` (each without the examples either of its sides has an error on), Holm-adjusted."""
    by_key = {s.key: s for s in sides}
    tables = []
    for ref, target in pair_keys([s.key for s in sides]):
        a, b = by_key[ref], by_key[target]
        ok = [i for i in ids if a.final[i].error is None and b.final[i].error is None]
        tables.append((ref, target, HelpHarm.from_pairs([(a.final[i].correct, b.final[i].correct) for i in ok],
                                                        seed=seed)))
    adjusted = holm([hh.p_value for _, _, hh in tables])
    return [PairedComparison.from_help_harm(hh, ref, target, p) for (ref, target, hh), p in zip(tables, adjusted)]


def compare_sides(sides: Sequence[Side], *, mode: CompareMode, seed: int = 0) -> CompareSummary:
    """The full comparison over the examples every side has (pure: no LM, no I/O).

    Raises:
        ConfigError: fewer than two sides, or the sides share no example id.
    """
    side_keys(len(sides))
    ids = matched_ids(sides)
    if not ids:
        raise ConfigError(f"nothing to compare: {_names(sides)} have no example id in common; "
                          "compare runs over the same dataset and split")
    first = sides[0]
    base_rows = [first.base[i] for i in ids if i in first.base]
    disagree = sum(1 for i in ids if i in first.base and any(
        i in s.base and s.base[i].correct != first.base[i].correct for s in sides[1:]))
    notes = []
    if disagree:
        notes.append(f"the base agent's verdict differs on {disagree} matched example(s): each version's "
                     "help/harm is measured against its own base rows")
    return CompareSummary(
        mode=mode, matched=len(ids), only={s.key: len(s.final) - len(ids) for s in sides},
        base=summarise_condition("base", base_rows), base_disagreements=disagree,
        sides=[summarise_side(s, ids, seed=seed) for s in sides], pairs=compare_pairs(sides, ids, seed=seed),
        notes=notes)


__all__ = ["COMPARE_SCHEMA_VERSION", "MAX_VERSIONS", "TWO_VERSION_SCHEMA", "CompareMode", "CompareSummary",
           "PairedComparison", "RecordedPrompt", "Side", "SideKey", "SideSummary", "compare_pairs", "compare_sides",
           "holm", "matched_ids", "pair_keys", "side_from_records", "side_keys", "summarise_side"]
