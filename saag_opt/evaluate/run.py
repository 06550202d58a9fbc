"""``saag-opt evaluate``: a review set-up over a dataset, single calls or conversations, as one run directory.

Per item, two conditions are recorded: ``base`` (the base agent alone) and the mechanism (``r2``,
``gate+r2``, ...). The kind of work is resolved once, from the dataset spec (``data.workload``) or,
for ``--resume``, from the run's own ``run.json``; the ``Work`` of that kind (``evaluate.calls``,
``evaluate.conversations``) runs one item, and everything else is the same for both: the run
header and its resume rule, the loop (``evaluate.loop``), the summary's core, the failure policy.

Failure policy (docs/design.md §10): an error inside one item becomes a record with ``error``; no
item is ever lost. Systemic faults raise before work starts (bad config, missing key), as soon as a
model turns out to be gone (dead server, rejected key: the finished items stay in records.jsonl,
run.json says ``error``, ``--resume RUN_DIR`` continues) or after it: a run in which every item
failed has no result (``RunFailed``), and ``fail_on_error`` bounds the error share of any other.
Progress and cost are reported through ``saag_opt.events`` (``run_started``, ``example_finished``,
``run_finished``); an observer that raises is logged, never allowed to stop the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.setup import Condition
from saag_opt.artifacts import PromptVersion
from saag_opt.atomic import atomic_write_json
from saag_opt.data import split_hash
from saag_opt.data.workload import Workload, WorkloadKind
from saag_opt.episodes import Episode
from saag_opt.errors import ConfigError, RunError, RunFailed, SaagOptError
from saag_opt.evaluate.calls import Calls
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.conversations import Conversations, SimulatedUser
from saag_opt.evaluate.loop import Work, run_pairs
from saag_opt.evaluation.conversation_records import EpisodeSummary
from saag_opt.evaluation.estimate import Estimate
from saag_opt.evaluation.records import setup_facts
from saag_opt.evaluation.results import EvaluationSummary, ExampleRecord, PairedSummary, keep_finished
from saag_opt.events import EventSink, emit
from saag_opt.lm import CostLedger
from saag_opt.lm.disk_cache import configure_lm_cache
from saag_opt.lm.spend.ledgerfile import open_ledger, save_costs
from saag_opt.model import Example
from saag_opt.runfiles import (
    RunHeader,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    resumed,
    write_header,
)

Item = Example | Episode


class _Work(Work[Any, Any], Protocol):
    """What ``run_evaluation`` asks of either kind's work beyond the loop's ``Work``: its summary, its close."""

    def summarise(self, pairs: Sequence[tuple[Any, Any]], *, seed: int,
                  stopped: str | None) -> EvaluationSummary | EpisodeSummary:
        """The summary of the items that finished."""
        ...

    def close(self) -> None:
        """Release what the work holds open (the Batch API rounds)."""
        ...


class _Kind(Protocol):
    """How ``run_evaluation`` runs one kind of workload (``evaluate.calls.Calls``, ``evaluate.conversations``)."""

    @property
    def record(self) -> type[ExampleRecord]:
        """The row type of ``records.jsonl``."""
        ...

    def open(self, config: EvaluateConfig, run_dir: Path, ledger: CostLedger,
             on_event: EventSink | None) -> tuple[Condition, _Work]: ...

    def header(self, config: EvaluateConfig, items: Sequence[Any]) -> dict[str, Any]: ...

    def estimate(self, config: EvaluateConfig, items: Sequence[Any], *, reviewer: str | None, mechanism: Mechanism,
                 instructions: Mapping[str, str], base_cached: bool = False, command: str = "evaluate") -> Estimate: ...


KINDS: Mapping[WorkloadKind, _Kind] = {WorkloadKind.CALLS: Calls(), WorkloadKind.CONVERSATIONS: Conversations(),
                                       WorkloadKind.SIMULATED_USER: SimulatedUser()}
"""The one place a workload's kind decides how it is run, recorded and priced."""


@dataclass
class EvaluationResult:
    """What ``run_evaluation`` returns: the run directory, its summary and its records (item order, base first)."""

    run_dir: Path
    summary: EvaluationSummary | EpisodeSummary
    """An ``EvaluationSummary`` on single calls, an ``EpisodeSummary`` on conversations (their core: ``PairedSummary``)."""
    records: list[ExampleRecord] = field(default_factory=list)


def run_evaluation(config: EvaluateConfig, *, on_event: EventSink | None = None,
                   args_passed: dict[str, Any] | None = None, ledger: CostLedger | None = None,
                   resume: Path | None = None) -> EvaluationResult:
    """Evaluate ``config`` and write ``runs/<timestamp>-evaluate/`` (``-evaluate-multiturn/`` on conversations).

    ``ledger``: the ledger (and spend cap) of a bigger run this evaluation is part of (compare's
    passes, optimize's test phase, tune's trials); the run books into a child of it. When the cap
    is reached the run ends with ``status="stopped"`` and a summary over the items that finished.

    ``resume``: continue that evaluate run directory instead (``config`` from ``resume_config``):
    finished items are kept and not asked again, the rest are appended, and ``summary.json``,
    ``costs.json`` (summed over attempts) and ``run.json`` are rewritten at the end.

    Raises:
        ConfigError: bad dataset/split/prompt/mechanism, or a mechanism without a reviewer.
        ModelUnavailableError: a model cannot be reached (missing key, dead server).
        RunError: the run directory cannot be written or resumed, or the error rate exceeds ``fail_on_error``.
        RunFailed: every item failed (``run.json`` says ``error``, the records are kept).
    """
    work_of = config.workload
    kind = KINDS[work_of.kind]
    items = _items(config, work_of)
    configure_lm_cache()
    kept: list[Any] = []
    if resume is None:
        run_dir = create_run_dir(config.runs_dir, work_of.evaluate_verb)
        header = _header(config, work_of, kind, run_dir, items, args_passed)
    else:
        run_dir = resume
        header, kept = _reopen(run_dir, config, work_of, items, kind.record, args_passed)
    write_header(run_dir, header)
    with guarded_run(run_dir, header):
        own = open_ledger(config.max_cost, run_dir, parent=ledger)
        condition, work = kind.open(config, run_dir, own, on_event)
        emit(on_event, "resumed" if resume is not None else "run_started", f"run directory {run_dir}",
             run_dir=str(run_dir), total=len(items), done=len(kept) // 2)
        try:
            run = run_pairs(work, items, kept=kept, records_path=run_dir / "records.jsonl", cap=own.cap,
                            on_event=on_event, costs=own.snapshot)
        finally:  # an interrupted attempt's spend is counted when the run resumes
            work.close()
            save_costs(run_dir, own)
        summary = work.summarise(run.pairs, seed=config.seed, stopped=run.stopped)
        summary = summary.model_copy(update=setup_facts(condition, {i.split for i in items if i.split}, own))
        atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
        _check_errors(config, work_of, summary, run.records, run_dir)
    finish_header(run_dir, header, run.capped)
    emit(on_event, "run_finished", f"done: {run_dir}", run_dir=str(run_dir))
    return EvaluationResult(run_dir, summary, run.records)


def preflight_evaluate(config: EvaluateConfig) -> Estimate:
    """``--dry-run``: the expected LM calls, tokens and dollars by role; loads the data, opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``run_evaluation`` would, before any work.
    """
    setup, work_of = config.setup, config.workload
    return KINDS[work_of.kind].estimate(config, _items(config, work_of), reviewer=setup.reviewer,
                                        mechanism=setup.mechanism, instructions=_instructions(setup.prompt_version()))


def preflight_passes(config: EvaluateConfig, refs: Sequence[str]) -> Estimate:
    """``compare --dry-run``: the shared base pass (no reviewer), then one pass per prompt version (base calls cached).

    Raises:
        ConfigError, DatasetError, ArtifactError: as the compare would, before any work.
    """
    setup, work_of = config.setup, config.workload
    kind, items = KINDS[work_of.kind], _items(config, work_of)
    total = kind.estimate(config, items, reviewer=None, mechanism=setup.replace(mechanism="none").mechanism,
                          instructions={}, command="compare")
    for ref in refs:
        total.merge(kind.estimate(config, items, reviewer=setup.reviewer, mechanism=setup.mechanism,
                                  instructions=_instructions(setup.replace(prompt=ref).prompt_version()),
                                  base_cached=True))
    return total


def _instructions(version: PromptVersion | None) -> dict[str, str]:
    return dict(version.instructions) if version is not None else {}


def _items(config: EvaluateConfig, work_of: Workload) -> list[Any]:
    items = work_of.load(split=config.split, limit=config.limit, skip=config.skip, trials=config.trials)
    if not items:
        raise ConfigError(f"dataset: {config.dataset!r} (split {config.split!r}) has no {work_of.unit}")
    return items


def _ids_hash(items: Sequence[Item]) -> str:
    """Which items, in which order: a resumed run must see the same ones."""
    return hashlib.sha256("\n".join(i.id for i in items).encode()).hexdigest()[:16]


def _prompt_sha(config: EvaluateConfig, *, quiet: bool = False) -> str | None:
    """The reviewer prompt's content hash (None without a reviewer): what a resume must match.

    ``quiet``: None for an unknown reference too (the run then fails where it builds the reviewer,
    with the run directory marked ``error``).
    """
    try:
        version = config.setup.prompt_version()
    except SaagOptError:
        if quiet:
            return None
        raise
    return version.sha256 if version is not None else None


def _header(config: EvaluateConfig, work_of: Workload, kind: _Kind, run_dir: Path, items: Sequence[Item],
            args_passed: dict[str, Any] | None) -> RunHeader:
    setup, extra = config.setup, kind.header(config, items)
    models = {"base": setup.base} | ({"reviewer": setup.reviewer} if setup.reviewer else {}) | extra.get("models", {})
    plugins: dict[str, Any] = {
        "mechanism": {"spec": setup.mechanism.spec, "experimental": setup.mechanism.experimental,
                      "args": {"max_repairs": setup.max_repairs, "grounding": setup.grounding}},
        "reviewer": {"class": "SaagInformedReviewer" if setup.saag_informed else "Reviewer", "prompt": setup.prompt,
                     "sha256": _prompt_sha(config, quiet=True), "experimental": setup.saag_informed},
        **extra.get("plugins", {})}
    return new_header(
        run_dir, work_of.evaluate_verb, config=config.model_dump(mode="json"), args_passed=args_passed or {},
        models=models, plugins=plugins,
        dataset={"spec": config.dataset, "split": config.split, "limit": config.limit,
                 **({"skip": config.skip} if config.skip else {}), "n": len(items), "ids_hash": _ids_hash(items),
                 "split_hash": split_hash(items)})


def _reopen(run_dir: Path, config: EvaluateConfig, work_of: Workload, items: Sequence[Item],
            record: type[ExampleRecord], args_passed: dict[str, Any] | None) -> tuple[RunHeader, list[ExampleRecord]]:
    """``run.json`` of a resumed run set back to ``started``, and the finished items' records (``keep_finished``).

    Raises:
        RunError: not an evaluate run, or its items are not the recorded ones any more.
    """
    header = read_header(run_dir)
    if header.verb != work_of.evaluate_verb:
        raise RunError(f"--resume {run_dir}: it is a {header.verb!r} run, not an evaluate run of {config.dataset!r}")
    ids = _ids_hash(items)
    if header.dataset.get("ids_hash") not in (None, ids):
        raise RunError(f"--resume {run_dir}: dataset {config.dataset!r} no longer gives the run's "
                       f"{work_of.unit} (ids hash {ids} != {header.dataset.get('ids_hash')}); start a new run")
    recorded = (header.plugins.get("reviewer") or {}).get("sha256")
    if recorded and (now := _prompt_sha(config)) != recorded:  # e.g. an alias (reviewer@best) that moved
        raise RunError(f"--resume {run_dir}: prompt {config.setup.prompt!r} now resolves to other instructions "
                       f"(sha256 {str(now)[:12]}; the run used {recorded[:12]}); start a new run")
    kept = keep_finished(run_dir / "records.jsonl", config.setup.mechanism.spec, (i.id for i in items), record)
    resumes = resumed(header, args_passed, finished_before=len(kept) // 2)
    header = header.model_copy(update={"status": "started", "finished": None, "error": None,
                                       "config": config.model_dump(mode="json"), "resumes": resumes})
    return header, kept


def _check_errors(config: EvaluateConfig, work_of: Workload, summary: PairedSummary,
                  records: Sequence[ExampleRecord], run_dir: Path) -> None:
    """Fail a run whose every item failed (no result to report), or whose error share passes ``fail_on_error``.

    Raises:
        RunFailed: every item has an error (the first one is quoted).
        RunError: more than ``fail_on_error`` of the items have one.
    """
    n, unit = summary.n_items, work_of.unit
    if n == 0:
        return
    if summary.errors == n:
        first = next((r.error for r in records if r.error), "")
        line = " ".join(first.split())
        raise RunFailed(f"all {n} {unit} failed, the first with: "
                        f"{line[:300] + '...' if len(line) > 300 else line} (see {run_dir / 'records.jsonl'})")
    if config.fail_on_error is None:
        return
    rate = summary.errors / n
    if rate > config.fail_on_error:
        raise RunError(f"{summary.errors}/{n} {unit} failed ({rate:.1%}), above "
                       f"--fail-on-error {config.fail_on_error:.1%}; see records.jsonl for the errors")


__all__ = ["KINDS", "EvaluationResult", "preflight_evaluate", "preflight_passes", "run_evaluation"]
