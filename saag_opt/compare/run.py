"""Compare reviewer prompt versions (or finished runs) side by side: ``saag-opt compare A B [C ...]``.

Two modes, chosen per argument by ``parse_side``:

* ``prompts``: every argument is a prompt reference. One evaluate run per version goes under the
  compare run directory, all sharing one base-prediction cache: ``base/`` (mechanism ``none``: it
  makes every base call once), then ``a/``, ``b/``, ``c/`` ... (the mechanism with each prompt; their
  base calls are cache hits). So the base agent is paid once and each version is evaluated once,
  however many pairs there are; each version's ledger holds only what it added (reviews and
  revisions) - the cost columns compare like with like.
* ``runs``: every argument is a run directory (``run.json`` inside; ``DIR#CONDITION`` picks one
  reviewed condition of a run that has several, e.g. ``runs/x-compare#r2@v2``). Records are matched
  by example id; no LM is called.

Both modes compute the same numbers from records (``comparison.compare_sides``, pure: every pair,
Holm-adjusted); finished runs are read as sides by ``compare.sides``. This module keeps the
configuration, the run directory (start, resume, finish) and the two modes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from saag_opt.artifacts import resolve_ref
from saag_opt.atomic import atomic_write_json
from saag_opt.compare.comparison import (
    MAX_VERSIONS,
    CompareMode,
    CompareSummary,
    compare_sides,
    matched_ids,
    side_keys,
)
from saag_opt.compare.sides import (
    RunRef,
    Side,
    SideKey,
    load_run_side,
    run_contamination,
    side_from_records,
)
from saag_opt.errors import ConfigError, CostCapReached, RunError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import EvaluationResult, preflight_passes, run_evaluation
from saag_opt.evaluation.estimate import Estimate
from saag_opt.evaluation.results import RecordWriter
from saag_opt.events import EventSink, emit
from saag_opt.lm import CostLedger
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.lm.spend.ledgerfile import earlier_roles
from saag_opt.resuming import refuse_changes
from saag_opt.runfiles import (
    RunHeader,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    resume_header,
    resumed,
    write_header,
)

if TYPE_CHECKING:
    from saag_opt.artifacts import PromptVersion


# -- configuration and argument detection ---------------------------------------------------------


class CompareConfig(BaseModel):
    """Everything ``saag-opt compare`` needs; stored in the compare run's ``run.json``.

    Two versions are also given and stored as ``a`` and ``b`` (as every two-version run recorded
    them); more are stored as ``versions``.
    """

    model_config = ConfigDict(extra="forbid")

    versions: list[str] = Field(min_length=2, max_length=MAX_VERSIONS)
    """The versions A, B, C ... in order: prompt references (``reviewer@v1``, an alias, a path) or run
    directories (all of one kind)."""
    evaluation: EvaluateConfig | None = None
    """Prompts mode: base/reviewer models, mechanism, dataset ... (its ``prompt`` and ``runs_dir`` are
    replaced per version). Ignored in runs mode."""
    runs_dir: Path = Path("runs")
    """Where ``<timestamp>-compare/`` is created."""
    seed: int = 0
    """Seed of the paired bootstrap CIs."""

    @model_validator(mode="before")
    @classmethod
    def _from_a_b(cls, data: Any) -> Any:
        """``a=``, ``b=`` (two versions, as recorded by every two-version run) read as ``versions``."""
        if not isinstance(data, Mapping) or not ({"a", "b"} & set(data)):
            return data
        if "versions" in data or not {"a", "b"} <= set(data):
            raise ValueError("give the versions as a and b, or as versions (not both, nor one of a, b)")
        return {k: v for k, v in data.items() if k not in ("a", "b")} | {"versions": [data["a"], data["b"]]}

    @model_serializer(mode="wrap")
    def _as_a_b(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Two versions written as ``a``, ``b`` first (the recorded shape); more as ``versions``."""
        data: dict[str, Any] = handler(self)
        if len(self.versions) != 2:
            return data
        a, b = data.pop("versions")
        return {"a": a, "b": b} | data

    @property
    def keys(self) -> list[str]:
        """The versions' keys: a, b, c ..."""
        return side_keys(len(self.versions))


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


def detect_mode(*texts: str) -> tuple[CompareMode, list[RunRef | str]]:
    """All prompt refs -> ``prompts``; all run dirs -> ``runs``; a mix is refused.

    Raises:
        ConfigError: a run directory and a prompt reference among the arguments.
    """
    sides = [parse_side(t) for t in texts]
    runs = [t for t, s in zip(texts, sides) if isinstance(s, RunRef)]
    if len(runs) == len(sides):
        return "runs", sides
    if not runs:
        return "prompts", sides
    ref_arg = next(t for t, s in zip(texts, sides) if not isinstance(s, RunRef))
    how = ("two prompt references (runs both now) or two run directories" if len(texts) == 2 else
           "only prompt references (runs them all now) or only run directories")
    raise ConfigError(f"cannot compare run directory {runs[0]!r} with prompt reference {ref_arg!r}: "
                      f"give {how} (no LM calls)")


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


def _write_records(run_dir: Path, sides: Sequence[Side], ids: Sequence[str]) -> None:
    """Matched rows: A's base rows once, then each side's reviewed rows under its condition name."""
    writer = RecordWriter(run_dir / "records.jsonl")
    first = sides[0]
    try:
        for i in ids:
            if i in first.base:
                writer.write(first.base[i].model_copy(update={"run_id": run_dir.name}))
            for side in sides:
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


def _finish(run_dir: Path, header: RunHeader, summary: CompareSummary, sides: Sequence[Side],
            cost_parts: Mapping[str, Mapping[str, Any] | None], dataset: dict[str, Any] | None = None) -> None:
    _write_records(run_dir, sides, matched_ids(sides))
    atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
    atomic_write_json(run_dir / "costs.json", {"schema_version": 1, "currency": "USD",
                                              "parts": dict(cost_parts), "roles": _sum_roles(cost_parts)})
    stopped = CostCapReached(summary.stopped) if summary.stopped else None
    finish_header(run_dir, header if dataset is None else header.model_copy(update={"dataset": dataset}), stopped)


# -- the two modes ----------------------------------------------------------------------------------


def _duplicates(values: Sequence[str]) -> set[str]:
    return {v for v in values if values.count(v) > 1}


def _disambiguate(sides: Sequence[Side]) -> None:
    """Distinct labels (run ids can repeat across folders) and distinct condition names for the records."""
    for label in _duplicates([s.label for s in sides]):
        same = [s for s in sides if s.label == label]
        if all(s.run_dir is not None for s in same):
            for s in same:
                s.label = f"{cast(Path, s.run_dir).parent.name}/{s.label}"
    for label in _duplicates([s.label for s in sides]):
        for s in sides:
            if s.label == label:
                s.label = f"{s.key.upper()}:{s.label}"
    for condition in _duplicates([s.condition for s in sides]):  # e.g. two evaluate runs of r2
        for s in sides:
            if s.condition == condition:
                s.condition = f"{s.condition}@{s.label}"


def _with_sides(summary: CompareSummary, **per_side: Mapping[str, Any]) -> CompareSummary:
    """``summary`` with fields of each side replaced: ``field={key: value}``."""
    sides = [s.model_copy(update={name: values[s.key] for name, values in per_side.items() if s.key in values})
             for s in summary.sides]
    return summary.model_copy(update={"sides": sides})


def compare_runs(config: CompareConfig, refs: Sequence[RunRef], *,
                 args_passed: dict[str, Any] | None = None) -> CompareResult:
    """Compare finished runs by example id; no LM is called.

    Raises:
        ConfigError: no records, an unknown ``#CONDITION``, or no example in common.
        RunError: unreadable run files, or the compare run directory cannot be written.
    """
    loaded = [load_run_side(key, ref) for key, ref in zip(config.keys, refs)]
    sides = [side for side, _ in loaded]
    _disambiguate(sides)
    summary = compare_sides(sides, mode="runs", seed=config.seed)
    ids = matched_ids(sides)
    checked = {s.key: run_contamination(s, ids) for s in sides}
    summary = _with_sides(summary, contaminated={k: marks for k, (marks, _) in checked.items()})
    notes = [n for _, side_notes in loaded for n in side_notes] + [n for _, n in checked.values() if n]
    datasets = {(s.source.get("dataset"), s.source.get("split")) for s in sides}
    summary.notes[:0] = notes + ([f"the runs used different datasets/splits {sorted(map(str, datasets))}; "
                                  "only examples with the same id are compared"] if len(datasets) > 1 else [])
    plugins = {"sources": {s.key: s.source | {"condition": s.condition} for s in sides}}
    run_dir, header = _start_run(config, "runs", args_passed, plugins, {}, {"matched": summary.matched})
    with guarded_run(run_dir, header):
        summary = summary.model_copy(update={"run_id": run_dir.name})
        _finish(run_dir, header, summary, sides, {s.key: s.costs for s in sides})
    return CompareResult(run_dir, summary)


def _labels(keys: Sequence[str], versions: Sequence[PromptVersion]) -> dict[str, str]:
    """Each version's name (``-<sha6>`` when another side's same name means other words; ``-<KEY>`` when the same)."""
    labels = [f"{v.version}-{v.sha256[:6]}" if any(o.version == v.version and o.sha256 != v.sha256 for o in versions)
              else str(v.version) for v in versions]
    twice = _duplicates(labels)
    return {k: f"{label}-{k.upper()}" if label in twice else label for k, label in zip(keys, labels)}


def _evaluate(settings: EvaluateConfig, on_event: EventSink | None, ledger: Any, resume: bool, runs_dir: Path,
              seed: int, **setup: Any) -> EvaluationResult:
    """One pass under ``runs_dir`` with ``setup`` changed (the prompt, the base pass's mechanism).

    With ``resume``, the pass an earlier attempt started there continues.
    """
    earlier = _pass_dir(runs_dir) if resume else None
    config = settings.with_setup(**setup).model_copy(update={"runs_dir": runs_dir, "seed": seed})
    return run_evaluation(config, on_event=on_event, ledger=ledger, resume=earlier)


def compare_ledger(settings: EvaluateConfig, passes: Sequence[Path] = ()) -> Any:
    """One ledger over all passes (base and each version): ``--max-cost`` caps the comparison, not each pass.

    ``passes``: run directories of earlier attempts' passes (``compare --resume``); what they spent
    is counted in the total and against the cap (each pass restores its own accounts).
    """
    spent = CostLedger()
    for run_dir in passes:
        spent.restore(earlier_roles(run_dir))
    ledger = CostLedger(cap=SpendCap(settings.max_cost, spent=spent.total_dollars())
                        if settings.max_cost is not None else None)
    ledger.restore(spent.to_dict()["roles"])
    return ledger


def _pass_dir(parent: Path) -> Path | None:
    """The evaluate run an earlier attempt of a compare started under ``parent`` (``base/``, ``a/``, ``b/`` ...)."""
    found = sorted(p.parent for p in parent.glob("*/run.json")) if parent.is_dir() else []
    return found[-1] if found else None


def _prompt_notes(settings: EvaluateConfig, shas: Mapping[str, str]) -> list[str]:
    mechanism = settings.setup.mechanism
    keys = list(shas)
    notes = [f"{ref.upper()} and {target.upper()} have identical instructions: differences are noise (or cache hits)"
             for i, ref in enumerate(keys) for target in keys[i + 1:] if shas[ref] == shas[target]]
    if not mechanism.needs_reviewer:
        notes.append(f"mechanism {mechanism.spec!r} does not use the reviewer prompt")
    if mechanism.candidates:
        later = ", ".join(k.upper() for k in keys[1:])
        theirs = "B's does" if len(keys) == 2 else "theirs do"
        notes.append(f"s<N>/g<N> candidates are generated in A's pass and reused (cached) by {later}, so A's cost "
                     f"includes them and {theirs} not")
    return notes


def compare_prompts(config: CompareConfig, refs: Sequence[str], *, on_event: EventSink | None = None,
                    args_passed: dict[str, Any] | None = None, ledger: Any = None,
                    resume: Path | None = None) -> CompareResult:
    """Evaluate every prompt version once on the same examples, the base agent paid once.

    ``ledger``: the ledger (and spend cap) of a bigger run this comparison is part of (optimize's
    test phase); else the comparison's own, capped by ``evaluation.max_cost``. When the cap stops a
    pass, the comparison covers the examples every version finished (``summary.stopped``), or
    raises ``CostCapReached`` when there are none.

    ``resume``: continue that compare run directory (``config`` from ``resume_compare_config``):
    each pass continues the evaluate run an earlier attempt started (finished examples are not
    asked again), and the comparison is written anew at the end.

    Raises:
        ConfigError: missing evaluation settings, bad dataset/mechanism, a mechanism without reviewer.
        ArtifactError: an unknown prompt reference (before anything runs).
        ModelUnavailableError, RunError: as ``run_evaluation``; a resumed prompt that changed.
    """
    settings = config.evaluation
    if settings is None:
        raise ConfigError("evaluation: comparing prompt versions needs the evaluation settings "
                          "(--base, --reviewer, --mechanism, --dataset)")
    store = settings.setup.prompts_dir
    keys = side_keys(len(refs))
    versions = [resolve_ref(ref, store) for ref in refs]
    labels = _labels(keys, versions)
    prompts = {k: {"prompt": ref, "ref": v.ref, "sha256": v.sha256} for k, ref, v in zip(keys, refs, versions)}
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
        passes = [d for k in ("base", *keys) if (d := _pass_dir(run_dir / k)) is not None] if resuming else []
        ledger = ledger if ledger is not None else compare_ledger(settings, passes)
        emit(on_event, "stage", "evaluating the base agent alone", stage="base", label="base")
        base = _evaluate(settings, on_event, ledger, resuming, mechanism="none", prompt=refs[0],
                         runs_dir=run_dir / "base", **common)
        results = {}
        for key, ref in zip(keys, refs):
            emit(on_event, "stage", f"evaluating {key.upper()} = {labels[key]}", stage=key, label=labels[key])
            results[key] = _evaluate(settings, on_event, ledger, resuming, prompt=ref, runs_dir=run_dir / key,
                                     **common)
        stopped = next((r.summary.stopped for r in (base, *results.values()) if r.summary.stopped), None)
        sides = [_prompt_side(k, labels[k], results[k], prompts[k]) for k in keys]
        if stopped and not matched_ids(sides):
            raise CostCapReached(stopped)  # nothing every version finished: no table to show
        summary = compare_sides(sides, mode="prompts", seed=config.seed)
        summary = _with_sides(summary, contaminated={k: r.summary.contaminated for k, r in results.items()},
                              reviewer_mismatch={k: r.summary.reviewer_mismatch for k, r in results.items()})
        summary = summary.model_copy(update={
            "run_id": run_dir.name, "base_costs": base.summary.costs, "stopped": stopped,
            "notes": summary.notes + _prompt_notes(settings, {k: v.sha256 for k, v in zip(keys, versions)})})
        dataset = read_header(base.run_dir).dataset
        _finish(run_dir, header, summary, sides, {"base": base.summary.costs} | {s.key: s.costs for s in sides},
                dataset)
    return CompareResult(run_dir, summary)


def resume_compare_config(run_dir: Path, passed: Mapping[str, Any] | None = None) -> CompareConfig:
    """The configuration a compare of prompt versions continues with (``compare --resume``).

    ``passed``: what the user typed with ``--resume`` (evaluate option names, plus ``ref_a``,
    ``ref_b``, ``ref_c`` ... per version given); the versions and the seed must repeat the record,
    the evaluation options follow the one resume rule (``resuming.refuse_changes``: only run
    options may change).

    Raises:
        RunError: not a compare run, or a compare of two finished runs (nothing to resume).
        ConfigError: ``passed`` contradicts the recorded configuration.
    """
    where = f"--resume {run_dir}"
    header = resume_header(run_dir, "compare")
    recorded = {k: v for k, v in header.config.items() if k != "mode"}
    if header.config.get("mode") != "prompts" or not recorded.get("evaluation"):
        raise RunError(f"{where}: a compare of finished runs calls no LM and has nothing to resume; run it again")
    given = dict(passed or {})
    config = CompareConfig.model_validate(recorded)
    typed = {k: v for k, v in given.items() if k.startswith("ref_")}
    had = dict(zip((f"ref_{k}" for k in config.keys), config.versions))
    clashes = [f"{arg[4:].upper()} {value!r} (the run has {had[arg]!r})" if arg in had else
               f"{arg[4:].upper()} {value!r} (the run has {len(had)} versions)"
               for arg, value in typed.items() if had.get(arg) != value]
    if "seed" in given and given["seed"] != recorded.get("seed"):
        clashes.append(f"--seed {given['seed']!r} (the run has {recorded.get('seed')!r})")
    evaluation = refuse_changes(EvaluateConfig.model_validate(recorded["evaluation"]),
                                {k: v for k, v in given.items() if k != "seed" and k not in typed}, where=where,
                                clashes=clashes)
    return config.model_copy(update={"evaluation": evaluation})


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
    resumes = resumed(header, args_passed)
    header = header.model_copy(update={"status": "started", "finished": None, "error": None, "resumes": resumes,
                                       "config": config.model_dump(mode="json") | {"mode": "prompts"}})
    write_header(run_dir, header)
    return header


def _prompt_side(key: SideKey, label: str, result: EvaluationResult, prompt: dict[str, Any]) -> Side:
    condition = f"{result.summary.mechanism}@{label}"
    records = [r if r.condition == "base" else r.model_copy(update={"condition": condition}) for r in result.records]
    return side_from_records(key, label, condition, records, source=prompt, costs=result.summary.costs,
                             run_dir=result.run_dir)


def preflight_compare(config: CompareConfig) -> Estimate:
    """``--dry-run``: the shared base pass plus one pass per prompt version (base calls cached).

    Finished runs cost nothing.

    Raises:
        ConfigError, ArtifactError, DatasetError: as ``run_compare`` would, before any work.
    """
    mode, sides = detect_mode(*config.versions)
    settings = config.evaluation
    if mode == "runs" or settings is None:
        count = "two" if len(sides) == 2 else str(len(sides))
        return Estimate("compare", 0, assumptions=[f"{count} finished runs: no LM call"])
    return preflight_passes(settings, [str(side) for side in sides])


def run_compare(config: CompareConfig, *, on_event: EventSink | None = None,
                args_passed: dict[str, Any] | None = None, resume: Path | None = None) -> CompareResult:
    """Compare reviewer prompt versions (each evaluated now) or finished runs (no LM calls), every pair tested.

    ``config.versions`` are two or more prompt references or two or more run directories, never
    mixed (``saag-opt compare A B [C ...]``). ``resume``: continue that compare run (prompts mode;
    ``config`` from ``resume_compare_config``).

    Raises:
        ConfigError: a run mixed with a prompt ref, no example in common, bad settings.
        ArtifactError, ModelUnavailableError, RunError: see ``compare_prompts`` / ``compare_runs``.
    """
    mode, sides = detect_mode(*config.versions)
    if mode == "runs":
        return compare_runs(config, [cast(RunRef, s) for s in sides], args_passed=args_passed)
    return compare_prompts(config, [str(s) for s in sides], on_event=on_event, args_passed=args_passed,
                           resume=resume)


__all__ = [
    "CompareConfig",
    "CompareResult",
    "compare_ledger",
    "compare_prompts",
    "compare_runs",
    "detect_mode",
    "parse_side",
    "preflight_compare",
    "resume_compare_config",
    "run_compare",
]
