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

Both modes compute the same numbers from records (``comparison.compare_sides``, pure); finished runs
are read as sides by ``evaluation.sides``. This module keeps the configuration, the run directory
(start, resume, finish) and the two modes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict

from saag_opt.artifacts import resolve_ref
from saag_opt.data import load_dataset
from saag_opt.errors import ConfigError, CostCapReached, RunError
from saag_opt.evaluation.comparison import CompareMode, CompareSummary, compare_sides, matched_ids
from saag_opt.evaluation.config import EvaluateConfig
from saag_opt.evaluation.estimate import Estimate, estimate_evaluation
from saag_opt.evaluation.results import RecordWriter
from saag_opt.evaluation.runner import EvaluationResult, run_evaluation
from saag_opt.evaluation.sides import (
    RunRef,
    Side,
    SideKey,
    load_run_side,
    run_contamination,
    side_from_records,
)
from saag_opt.events import EventSink, emit
from saag_opt.lm import CostLedger
from saag_opt.lm.ledgerfile import earlier_roles
from saag_opt.lm.spendcap import SpendCap
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
    return side_from_records(key, label, condition, records, source=prompt, costs=result.summary.costs,
                             run_dir=result.run_dir)


def preflight_compare(config: CompareConfig) -> Estimate:
    """``--dry-run``: the shared base pass plus one pass per prompt version (base calls cached).

    Two finished runs cost nothing.

    Raises:
        ConfigError, ArtifactError, DatasetError: as ``run_compare`` would, before any work.
    """
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
