"""Compare two reviewer prompt versions (or two finished runs) side by side: ``saag-opt compare``.

Two modes, chosen per argument by ``parse_side``:

* ``prompts``: both arguments are prompt references. Three evaluate runs go under the compare run
  directory, all sharing one base-prediction cache: ``base/`` (mechanism ``none``: it makes every
  base call once), then ``a/`` and ``b/`` (the mechanism with each prompt; their base calls are cache
  hits). So the base agent is paid once, and each version's ledger holds only what that version
  added (reviews and revisions) - the cost columns compare like with like.
* ``runs``: both arguments are run directories (``run.json`` inside; ``DIR#CONDITION`` picks one
  reviewed condition of a run that has several, e.g. ``runs/x-compare#r2@v2``). Records are matched
  by example id; no LM is called.

Both modes compute the same numbers from records (``compare_sides``, pure): per-category accuracy
(base, A, B), help/harm of each version vs its own base, the paired A-vs-B table (``HelpHarm`` over
(A correct, B correct): "fixed" = only B right, "broken" = only A right) with McNemar's exact p and a
paired bootstrap CI of B - A, and tokens/dollars/latency per version. Examples with an error on
either side are left out of every paired table (as the runner does).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from saag_opt.errors import ConfigError, CostCapReached, RunError
from saag_opt.evaluation.config import EvaluateConfig
from saag_opt.evaluation.estimate import Estimate, estimate_evaluation
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.paired import summarise_condition, summarise_pairs
from saag_opt.evaluation.results import (
    ConditionSummary,
    ExampleRecord,
    LatencySummary,
    RecordWriter,
    read_records,
)
from saag_opt.evaluation.runner import EvaluationResult, run_evaluation
from saag_opt.events import EventSink, emit
from saag_opt.resuming import refuse_changes
from saag_opt.runfiles import (
    RunHeader,
    atomic_write_json,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    resume_header,
    utc_now,
    write_header,
)

if TYPE_CHECKING:
    from saag_opt.artifacts import PromptVersion

COMPARE_SCHEMA_VERSION = 1
"""Version of the compare ``summary.json`` format."""

CompareMode = Literal["prompts", "runs"]
SideKey = Literal["a", "b"]


# -- configuration and argument detection ---------------------------------------------------------


class CompareConfig(BaseModel):
    """Everything ``saag-opt compare`` needs; stored in the compare run's ``run.json``."""

    model_config = ConfigDict(extra="forbid")

    a: str
    """Version A: a prompt reference (``reviewer@v1``, an alias, a path) or a run directory."""
    b: str
    """Version B, same kinds as ``a`` (both prompts or both runs)."""
    evaluation: EvaluateConfig | None = None
    """Prompts mode: base/reviewer models, mechanism, dataset ... (its ``prompt`` and ``runs_dir`` are
    replaced per version). Ignored in runs mode."""
    runs_dir: Path = Path("runs")
    """Where ``<timestamp>-compare/`` is created."""
    seed: int = 0
    """Seed of the paired bootstrap CIs."""


@dataclass(frozen=True)
class RunRef:
    """A finished run directory, optionally with the reviewed condition to use (``DIR#CONDITION``)."""

    path: Path
    condition: str | None = None


def parse_side(text: str) -> RunRef | str:
    """An existing directory with ``run.json`` (optionally ``#CONDITION``) is a run; anything else a prompt ref.

    Raises:
        ConfigError: a directory without ``run.json`` (neither a run nor a prompt reference).
    """
    if (Path(text) / "run.json").is_file():
        return RunRef(Path(text))
    path_text, _, condition = text.rpartition("#")
    if path_text and (Path(path_text) / "run.json").is_file():
        return RunRef(Path(path_text), condition.strip() or None)
    if Path(text).is_dir():
        raise ConfigError(f"{text}: is a directory but has no run.json, so it is not a run directory "
                          "(give runs/<timestamp>-evaluate/, -optimize/ or -compare/, or a prompt reference)")
    return text


def detect_mode(a: str, b: str) -> tuple[CompareMode, RunRef | str, RunRef | str]:
    """Both prompt refs -> ``prompts``; both run dirs -> ``runs``; a mix is refused.

    Raises:
        ConfigError: one run directory and one prompt reference.
    """
    side_a, side_b = parse_side(a), parse_side(b)
    runs = (isinstance(side_a, RunRef), isinstance(side_b, RunRef))
    if runs == (True, True):
        return "runs", side_a, side_b
    if runs == (False, False):
        return "prompts", side_a, side_b
    run_arg, ref_arg = (a, b) if runs[0] else (b, a)
    raise ConfigError(f"cannot compare run directory {run_arg!r} with prompt reference {ref_arg!r}: "
                      "give two prompt references (runs both now) or two run directories (no LM calls)")


# -- sides ------------------------------------------------------------------------------------------


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
    reviewer_prompt: dict[str, Any] | None = None
    """Runs mode: the reviewer prompt the source run recorded (``prompt``, ``prompts_dir``, ``recorded``
    contamination), for ``run_contamination``."""


def _side_from_records(key: SideKey, label: str, condition: str, records: Sequence[ExampleRecord], *,
                       source: dict[str, Any], costs: dict[str, Any] | None, run_dir: Path | None) -> Side:
    base = {r.example_id: r for r in records if r.condition == "base"}
    final = {r.example_id: r for r in records if r.condition == condition}
    mechanism = condition.split("@", 1)[0]
    return Side(key, label, condition, mechanism, base, final, source, costs, run_dir)


# -- summary models ---------------------------------------------------------------------------------


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
                   net_change_ci95=[hh.ci_low, hh.ci_high] if hh.ci_low is not None and hh.ci_high is not None
                   else None)


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
    help_harm: dict[str, Any]
    """``HelpHarm.to_dict`` vs this side's own base rows."""
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


# -- pure comparison --------------------------------------------------------------------------------


def _dollars(costs: Mapping[str, Any] | None) -> float | None:
    if not costs:
        return None
    roles = costs.get("roles", costs)
    total = roles.get("total") if isinstance(roles, Mapping) else None
    return float(total["dollars"]) if isinstance(total, Mapping) and "dollars" in total else None


def _gated(spec: str) -> bool:
    """The mechanism behind a condition name has a SAAG gate (False for a name no mechanism parses)."""
    from saag_opt.agents import parse_mechanism

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


# -- reading finished runs --------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pick_condition(ref: RunRef, conditions: list[str]) -> str:
    if ref.condition is not None:
        if ref.condition not in conditions:
            raise ConfigError(f"{ref.path}: no reviewed condition {ref.condition!r} in records.jsonl; "
                              f"available: {conditions}")
        return ref.condition
    if not conditions:
        raise ConfigError(f"{ref.path}: records.jsonl has no reviewed rows (only base); nothing to compare")
    return conditions[-1]


def _run_costs(run_dir: Path, header: RunHeader, condition: str) -> dict[str, Any] | None:
    """The ledger belonging to ``condition``: an evaluate run's costs.json, a compare run's side."""
    if header.verb == "evaluate":
        return _read_json(run_dir / "costs.json")
    if header.verb == "compare":
        summary = _read_json(run_dir / "summary.json") or {}
        for key in ("a", "b"):
            side = summary.get(key) or {}
            if side.get("condition") == condition:
                return side.get("costs")
    return None


def _needs_reviewer(mechanism: Any) -> bool:
    from saag_opt.agents import parse_mechanism

    try:
        return parse_mechanism(str(mechanism)).needs_reviewer
    except ConfigError:
        return False


def _recorded_prompt(run_dir: Path, header: RunHeader, condition: str
                     ) -> tuple[dict[str, Any], str | None, list[str] | None] | None:
    """The reviewer prompt behind a run's ``condition``, as the run recorded it.

    Returns ``({"prompt", "ref"?, "sha256"?}, prompts_dir, contaminated-as-recorded)``, or None when
    the condition has no reviewer prompt (or the run does not say which). An optimize run's rows
    come from its test comparison, so that compare run is read.
    """
    if header.verb == "optimize":
        compare_run = ((_read_json(run_dir / "summary.json") or {}).get("test") or {}).get("compare_run")
        if not compare_run:
            return None
        inner = Path(compare_run) if (Path(compare_run) / "run.json").is_file() else run_dir / "test" / Path(
            compare_run).name  # recorded relative to the cwd of the optimize run
        try:
            return _recorded_prompt(inner, read_header(inner), condition)
        except RunError:
            return None
    if header.verb == "evaluate":
        config = header.config
        if not config.get("reviewer") or not _needs_reviewer(config.get("mechanism")):
            return None
        reviewer = header.plugins.get("reviewer") or {}
        prompt = {"prompt": reviewer.get("prompt") or config.get("prompt"), "sha256": reviewer.get("sha256")}
        recorded = (_read_json(run_dir / "summary.json") or {}).get("contaminated")
        return prompt, config.get("prompts_dir"), recorded
    if header.verb == "compare":
        summary = _read_json(run_dir / "summary.json") or {}
        for key in ("a", "b"):
            side = summary.get(key) or {}
            recorded_prompt = (header.plugins.get("prompts") or {}).get(key)
            if side.get("condition") == condition and recorded_prompt:
                return (dict(recorded_prompt), (header.config.get("evaluation") or {}).get("prompts_dir"),
                        side.get("contaminated"))
    return None


def run_contamination(side: Side, ids: Sequence[str]) -> tuple[list[str], str | None]:
    """Splits of ``side``'s examples ``ids`` its reviewer prompt was trained or selected on, and a note.

    The prompt version the source run used is looked up in its prompt store (by the hash it
    recorded when the reference, e.g. an alias, now means another version) and asked through
    ``PromptVersion.contaminated``, the same check evaluate and compare make when they run. When
    the version cannot be found any more, the run's own recorded mark is used and the note says so.
    """
    from saag_opt.artifacts import PromptStore
    from saag_opt.errors import SaagOptError

    found = side.reviewer_prompt
    if not found:
        return [], None
    prompt, prompts_dir, recorded = found["prompt"], found["prompts_dir"], found["recorded"]
    splits = {str(side.final[i].split) for i in ids if side.final[i].split}
    version = None
    try:
        store = PromptStore(prompts_dir)
        sha = prompt.get("sha256")
        try:
            version = store.resolve(str(prompt.get("ref") or prompt.get("prompt")))
        except SaagOptError:
            version = None
        if sha and (version is None or version.sha256 != sha):
            version = next(iter(store.find_by_sha(sha)), None)
    except SaagOptError:
        version = None
    if version is not None:
        return list(version.contaminated(splits)), None
    shown = prompt.get("ref") or prompt.get("prompt")
    if recorded is not None:
        return [s for s in recorded if s in splits], (f"{side.key.upper()}: prompt {shown} is not in the store any "
                                                      "more; its split contamination is the source run's record")
    return [], f"{side.key.upper()}: prompt {shown} is not in the store; could not check it for split contamination"


def load_run_side(key: SideKey, ref: RunRef) -> tuple[Side, list[str]]:
    """A side from a finished run, plus notes (unfinished run, several reviewed conditions).

    Raises:
        RunError: unreadable ``run.json`` or a bad record (file:line).
        ConfigError: no records, or an unknown ``#CONDITION``.
    """
    header = read_header(ref.path)
    if not (ref.path / "records.jsonl").is_file():
        raise ConfigError(f"{ref.path}: run has no records.jsonl (did it finish?); nothing to compare")
    records = read_records(ref.path / "records.jsonl")
    conditions = list(dict.fromkeys(r.condition for r in records if r.condition != "base"))
    condition = _pick_condition(ref, conditions)
    notes = []
    if header.status != "success":
        notes.append(f"{key.upper()}: run {header.run_id} has status {header.status!r}; its records may be partial")
    if len(conditions) > 1 and ref.condition is None:
        notes.append(f"{key.upper()}: {header.run_id} has conditions {conditions}; using {condition!r} "
                     f"(pick another with {ref.path}#CONDITION)")
    label = header.run_id if len(conditions) == 1 else f"{header.run_id}#{condition}"
    source = {"run_dir": str(ref.path), "verb": header.verb, "status": header.status,
              "dataset": header.dataset.get("spec"), "split": header.dataset.get("split")}
    recorded = _recorded_prompt(ref.path, header, condition)
    if recorded is not None:
        source["prompt"] = recorded[0].get("ref") or recorded[0].get("prompt")
    side = _side_from_records(key, label, condition, records, source=source,
                              costs=_run_costs(ref.path, header, condition), run_dir=ref.path)
    if recorded is not None:
        side.reviewer_prompt = {"prompt": recorded[0], "prompts_dir": recorded[1], "recorded": recorded[2]}
    return side, notes


# -- run directory ----------------------------------------------------------------------------------


@dataclass
class CompareResult:
    """What ``run_compare`` returns."""

    run_dir: Path
    summary: CompareSummary


def _start_run(config: CompareConfig, mode: CompareMode, args_passed: dict[str, Any] | None,
               plugins: dict[str, Any], models: dict[str, str], dataset: dict[str, Any]) -> tuple[Path, RunHeader]:
    run_dir = create_run_dir(config.runs_dir, "compare")
    stored = config.model_dump(mode="json") | {"mode": mode}
    if mode == "runs":
        stored["evaluation"] = None
    header = new_header(run_dir, "compare", config=stored, args_passed=args_passed or {}, models=models,
                        plugins=plugins, dataset=dataset)
    write_header(run_dir, header)
    return run_dir, header


def _write_records(run_dir: Path, a: Side, b: Side, ids: Sequence[str]) -> None:
    """Matched rows: A's base rows once, then each side's reviewed rows under its condition name."""
    writer = RecordWriter(run_dir / "records.jsonl")
    try:
        for i in ids:
            if i in a.base:
                writer.write(a.base[i].model_copy(update={"run_id": run_dir.name}))
            for side in (a, b):
                writer.write(side.final[i].model_copy(update={"run_id": run_dir.name, "condition": side.condition}))
    finally:
        writer.close()


def _sum_roles(parts: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """Per-role ledgers of several passes added up (numbers summed, model lists merged)."""
    out: dict[str, dict[str, Any]] = {}
    for costs in parts.values():
        for role, account in ((costs or {}).get("roles") or {}).items():
            cell = out.setdefault(role, {})
            for name, value in account.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    cell[name] = round(cell.get(name, 0) + value, 8)
                elif isinstance(value, list):
                    cell[name] = list(dict.fromkeys([*cell.get(name, []), *value]))
    return out


def _finish(run_dir: Path, header: RunHeader, summary: CompareSummary, a: Side, b: Side,
            cost_parts: Mapping[str, Mapping[str, Any] | None], dataset: dict[str, Any] | None = None) -> None:
    _write_records(run_dir, a, b, matched_ids(a, b))
    atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
    atomic_write_json(run_dir / "costs.json", {"schema_version": 1, "currency": "USD",
                                              "parts": dict(cost_parts), "roles": _sum_roles(cost_parts)})
    stopped = CostCapReached(summary.stopped) if summary.stopped else None
    finish_header(run_dir, header if dataset is None else header.model_copy(update={"dataset": dataset}), stopped)


# -- the two modes ----------------------------------------------------------------------------------


def _disambiguate(a: Side, b: Side) -> None:
    """Distinct labels (run ids can repeat across folders) and distinct condition names for the records."""
    if a.label == b.label and a.run_dir is not None and b.run_dir is not None:
        a.label, b.label = f"{a.run_dir.parent.name}/{a.label}", f"{b.run_dir.parent.name}/{b.label}"
    if a.label == b.label:
        a.label, b.label = f"A:{a.label}", f"B:{b.label}"
    if a.condition == b.condition:  # e.g. two evaluate runs of r2
        a.condition, b.condition = f"{a.condition}@{a.label}", f"{b.condition}@{b.label}"


def compare_runs(config: CompareConfig, ref_a: RunRef, ref_b: RunRef, *,
                 args_passed: dict[str, Any] | None = None) -> CompareResult:
    """Compare two finished runs by example id; no LM is called.

    Raises:
        ConfigError: no records, an unknown ``#CONDITION``, or no example in common.
        RunError: unreadable run files, or the compare run directory cannot be written.
    """
    (a, notes_a), (b, notes_b) = load_run_side("a", ref_a), load_run_side("b", ref_b)
    _disambiguate(a, b)
    summary = compare_sides(a, b, mode="runs", seed=config.seed)
    ids = matched_ids(a, b)
    (marks_a, note_a), (marks_b, note_b) = run_contamination(a, ids), run_contamination(b, ids)
    summary = summary.model_copy(update={"a": summary.a.model_copy(update={"contaminated": marks_a}),
                                         "b": summary.b.model_copy(update={"contaminated": marks_b})})
    notes_b += [n for n in (note_a, note_b) if n]
    datasets = {(s.source.get("dataset"), s.source.get("split")) for s in (a, b)}
    summary.notes[:0] = notes_a + notes_b + ([f"the runs used different datasets/splits {sorted(map(str, datasets))}; "
                                              "only examples with the same id are compared"]
                                             if len(datasets) > 1 else [])
    plugins = {"sources": {"a": a.source | {"condition": a.condition}, "b": b.source | {"condition": b.condition}}}
    run_dir, header = _start_run(config, "runs", args_passed, plugins, {}, {"matched": summary.matched})
    with guarded_run(run_dir, header):
        summary = summary.model_copy(update={"run_id": run_dir.name})
        _finish(run_dir, header, summary, a, b, {"a": a.costs, "b": b.costs})
    return CompareResult(run_dir, summary)


def _label(version: PromptVersion, other: PromptVersion) -> str:
    """The prompt version's name, disambiguated by hash when both sides share a name."""
    if version.version == other.version and version.sha256 != other.sha256:
        return f"{version.version}-{version.sha256[:6]}"
    return str(version.version)


def _evaluate(settings: EvaluateConfig, on_event: EventSink | None, ledger: Any, resume: bool, runs_dir: Path,
              seed: int, **setup: Any) -> EvaluationResult:
    """One pass under ``runs_dir`` with ``setup`` changed (the prompt, the base pass's mechanism).

    With ``resume``, the pass an earlier attempt started there continues.
    """
    earlier = _pass_dir(runs_dir) if resume else None
    config = settings.with_setup(**setup).model_copy(update={"runs_dir": runs_dir, "seed": seed})
    return run_evaluation(config, on_event=on_event, ledger=ledger, resume=earlier)


def compare_ledger(settings: EvaluateConfig, passes: Sequence[Path] = ()) -> Any:
    """One ledger over the three passes: ``--max-cost`` caps the comparison, not each pass.

    ``passes``: run directories of earlier attempts' passes (``compare --resume``); what they spent
    is counted in the total and against the cap (each pass restores its own accounts).
    """
    from saag_opt.lm import CostLedger
    from saag_opt.lm.ledgerfile import earlier_roles
    from saag_opt.lm.spendcap import SpendCap

    spent = CostLedger()
    for run_dir in passes:
        spent.restore(earlier_roles(run_dir))
    ledger = CostLedger(cap=SpendCap(settings.max_cost, spent=spent.total_dollars())
                        if settings.max_cost is not None else None)
    ledger.restore(spent.to_dict()["roles"])
    return ledger


def _pass_dir(parent: Path) -> Path | None:
    """The evaluate run an earlier attempt of a compare started under ``parent`` (``base/``, ``a/``, ``b/``)."""
    found = sorted(p.parent for p in parent.glob("*/run.json")) if parent.is_dir() else []
    return found[-1] if found else None


def _prompt_notes(settings: EvaluateConfig, same: bool) -> list[str]:
    mechanism = settings.setup.mechanism
    notes = []
    if same:
        notes.append("A and B have identical instructions: differences are noise (or cache hits)")
    if not mechanism.needs_reviewer:
        notes.append(f"mechanism {mechanism.spec!r} does not use the reviewer prompt")
    if mechanism.candidates:
        notes.append("s<N>/g<N> candidates are generated in A's pass and reused (cached) by B, so A's cost "
                     "includes them and B's does not")
    return notes


def compare_prompts(config: CompareConfig, ref_a: str, ref_b: str, *, on_event: EventSink | None = None,
                    args_passed: dict[str, Any] | None = None, ledger: Any = None,
                    resume: Path | None = None) -> CompareResult:
    """Evaluate both prompt versions on the same examples, the base agent paid once.

    ``ledger``: the ledger (and spend cap) of a bigger run this comparison is part of (optimize's
    test phase); else the comparison's own, capped by ``evaluation.max_cost``. When the cap stops a
    pass, the comparison covers the examples both versions finished (``summary.stopped``), or
    raises ``CostCapReached`` when there are none.

    ``resume``: continue that compare run directory (``config`` from ``resume_compare_config``):
    each pass continues the evaluate run an earlier attempt started (finished examples are not
    asked again), and the comparison is written anew at the end.

    Raises:
        ConfigError: missing evaluation settings, bad dataset/mechanism, a mechanism without reviewer.
        ArtifactError: an unknown prompt reference (before anything runs).
        ModelUnavailableError, RunError: as ``run_evaluation``; a resumed prompt that changed.
    """
    from saag_opt.artifacts import resolve_ref

    settings = config.evaluation
    if settings is None:
        raise ConfigError("evaluation: comparing prompt versions needs the evaluation settings "
                          "(--base, --reviewer, --mechanism, --dataset)")
    store = settings.setup.prompts_dir
    version_a, version_b = resolve_ref(ref_a, store), resolve_ref(ref_b, store)
    labels = {"a": _label(version_a, version_b), "b": _label(version_b, version_a)}
    if labels["a"] == labels["b"]:
        labels = {"a": f"{labels['a']}-A", "b": f"{labels['b']}-B"}
    prompts = {"a": {"prompt": ref_a, "ref": version_a.ref, "sha256": version_a.sha256},
               "b": {"prompt": ref_b, "ref": version_b.ref, "sha256": version_b.sha256}}
    setup = settings.setup
    models = {"base": setup.base} | ({"reviewer": setup.reviewer} if setup.reviewer else {})
    plugins = {"mechanism": {"spec": setup.mechanism.spec}, "prompts": prompts}
    if resume is None:
        run_dir, header = _start_run(config, "prompts", args_passed, plugins, models,
                                     {"spec": settings.dataset, "split": settings.split, "limit": settings.limit})
    else:
        run_dir, header = resume, _reopen_compare(resume, config, prompts, args_passed)
    with guarded_run(run_dir, header):
        common = {"seed": config.seed}
        resuming = resume is not None
        passes = [d for k in ("base", "a", "b") if (d := _pass_dir(run_dir / k)) is not None] if resuming else []
        ledger = ledger if ledger is not None else compare_ledger(settings, passes)
        emit(on_event, "stage", "evaluating the base agent alone", stage="base", label="base")
        base = _evaluate(settings, on_event, ledger, resuming, mechanism="none", prompt=ref_a,
                         runs_dir=run_dir / "base", **common)
        results = {}
        for key, ref in (("a", ref_a), ("b", ref_b)):
            emit(on_event, "stage", f"evaluating {key.upper()} = {labels[key]}", stage=key, label=labels[key])
            results[key] = _evaluate(settings, on_event, ledger, resuming, prompt=ref, runs_dir=run_dir / key,
                                     **common)
        stopped = next((r.summary.stopped for r in (base, *results.values()) if r.summary.stopped), None)
        a, b = (_prompt_side(k, labels[k], results[k], prompts[k]) for k in ("a", "b"))  # type: ignore[arg-type]
        if stopped and not matched_ids(a, b):
            raise CostCapReached(stopped)  # nothing both versions finished: no table to show
        summary = compare_sides(a, b, mode="prompts", seed=config.seed)
        summary = summary.model_copy(update={
            "run_id": run_dir.name, "base_costs": base.summary.costs, "stopped": stopped,
            "a": summary.a.model_copy(update={"contaminated": results["a"].summary.contaminated,
                                              "reviewer_mismatch": results["a"].summary.reviewer_mismatch}),
            "b": summary.b.model_copy(update={"contaminated": results["b"].summary.contaminated,
                                              "reviewer_mismatch": results["b"].summary.reviewer_mismatch}),
            "notes": summary.notes + _prompt_notes(settings, version_a.sha256 == version_b.sha256)})
        dataset = read_header(base.run_dir).dataset
        _finish(run_dir, header, summary, a, b, {"base": base.summary.costs, "a": a.costs, "b": b.costs}, dataset)
    return CompareResult(run_dir, summary)


def resume_compare_config(run_dir: Path, passed: Mapping[str, Any] | None = None) -> CompareConfig:
    """The configuration a compare of two prompt versions continues with (``compare --resume``).

    ``passed``: what the user typed with ``--resume`` (evaluate option names, plus ``ref_a`` /
    ``ref_b``); A, B and the seed must repeat the record, the evaluation options follow the one
    resume rule (``resuming.refuse_changes``: only run options may change).

    Raises:
        RunError: not a compare run, or a compare of two finished runs (nothing to resume).
        ConfigError: ``passed`` contradicts the recorded configuration.
    """
    where = f"--resume {run_dir}"
    header = resume_header(run_dir, "compare")
    recorded = {k: v for k, v in header.config.items() if k != "mode"}
    if header.config.get("mode") != "prompts" or not recorded.get("evaluation"):
        raise RunError(f"{where}: a compare of two finished runs calls no LM and has nothing to resume; run it again")
    given = dict(passed or {})
    clashes = [f"{name.upper()} {given[arg]!r} (the run has {recorded[name]!r})"
               for arg, name in (("ref_a", "a"), ("ref_b", "b")) if arg in given and given[arg] != recorded[name]]
    if "seed" in given and given["seed"] != recorded.get("seed"):
        clashes.append(f"--seed {given['seed']!r} (the run has {recorded.get('seed')!r})")
    evaluation = refuse_changes(EvaluateConfig.model_validate(recorded["evaluation"]),
                                {k: v for k, v in given.items() if k != "seed"}, where=where, clashes=clashes)
    return CompareConfig.model_validate(recorded | {"evaluation": evaluation})


def _reopen_compare(run_dir: Path, config: CompareConfig, prompts: Mapping[str, Mapping[str, Any]],
                    args_passed: dict[str, Any] | None) -> RunHeader:
    """``run.json`` of a resumed compare set back to ``started`` (refused if a prompt now means other words).

    Raises:
        RunError: a prompt reference (e.g. an alias) resolves to other instructions than the run used.
    """
    header = read_header(run_dir)
    recorded = header.plugins.get("prompts") or {}
    for key, now in prompts.items():
        was = (recorded.get(key) or {}).get("sha256")
        if was and was != now["sha256"]:
            raise RunError(f"--resume {run_dir}: {key.upper()} {now['prompt']!r} now resolves to other instructions "
                           f"(sha256 {str(now['sha256'])[:12]}; the run used {was[:12]}); start a new run")
    resumes = [*(getattr(header, "resumes", None) or []), {"at": utc_now(), "args_passed": args_passed or {}}]
    header = header.model_copy(update={"status": "started", "finished": None, "error": None, "resumes": resumes,
                                       "config": config.model_dump(mode="json") | {"mode": "prompts"}})
    write_header(run_dir, header)
    return header


def _prompt_side(key: SideKey, label: str, result: EvaluationResult, prompt: dict[str, Any]) -> Side:
    condition = f"{result.summary.mechanism}@{label}"
    records = [r if r.condition == "base" else r.model_copy(update={"condition": condition}) for r in result.records]
    return _side_from_records(key, label, condition, records, source=prompt, costs=result.summary.costs,
                              run_dir=result.run_dir)


def preflight_compare(config: CompareConfig) -> Estimate:
    """``--dry-run``: the shared base pass plus one pass per prompt version (base calls cached).

    Two finished runs cost nothing.

    Raises:
        ConfigError, ArtifactError, DatasetError: as ``run_compare`` would, before any work.
    """
    from saag_opt.data import load_dataset

    mode, side_a, side_b = detect_mode(config.a, config.b)
    settings = config.evaluation
    if mode == "runs" or settings is None:
        return Estimate("compare", 0, assumptions=["two finished runs: no LM call"])
    examples = load_dataset(settings.dataset, split=settings.split, limit=settings.limit)
    setup = settings.setup
    total = estimate_evaluation(examples, base=setup.base, reviewer=None, mechanism=setup.replace(
        mechanism="none").mechanism, command="compare")
    for ref in (str(side_a), str(side_b)):
        version = setup.replace(prompt=ref).prompt_version()
        total.merge(estimate_evaluation(examples, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                                        instructions=dict(version.instructions) if version is not None else {},
                                        base_cached=True))
    return total


def run_compare(config: CompareConfig, *, on_event: EventSink | None = None,
                args_passed: dict[str, Any] | None = None, resume: Path | None = None) -> CompareResult:
    """``saag-opt compare A B``: two prompt refs (evaluated now) or two run dirs (no LM calls).

    ``resume``: continue that compare run (prompts mode; ``config`` from ``resume_compare_config``).

    Raises:
        ConfigError: a run mixed with a prompt ref, no example in common, bad settings.
        ArtifactError, ModelUnavailableError, RunError: see ``compare_prompts`` / ``compare_runs``.
    """
    mode, side_a, side_b = detect_mode(config.a, config.b)
    if mode == "runs":
        return compare_runs(config, cast(RunRef, side_a), cast(RunRef, side_b), args_passed=args_passed)
    return compare_prompts(config, str(side_a), str(side_b), on_event=on_event, args_passed=args_passed,
                           resume=resume)


__all__ = [
    "COMPARE_SCHEMA_VERSION",
    "CompareConfig",
    "CompareMode",
    "CompareResult",
    "CompareSummary",
    "PairedComparison",
    "RunRef",
    "Side",
    "SideSummary",
    "compare_prompts",
    "compare_runs",
    "compare_sides",
    "detect_mode",
    "load_run_side",
    "matched_ids",
    "parse_side",
    "preflight_compare",
    "resume_compare_config",
    "run_compare",
    "run_contamination",
    "summarise_side",
]
