"""Run a reviewer configuration over a dataset: ``EvaluateConfig`` -> run directory + summary.

Per example, two conditions are recorded: ``base`` (the base agent alone) and the mechanism
(``r2``, ``gate+r2``, ...). The base prediction is computed once and cached on disk
(``BasePredictionCache``), so other mechanisms and prompt versions reuse it for free.

Failure policy (docs/design.md §10): an LM call that fails after retries, or any other error inside
one example, becomes a record with ``error`` (scored incorrect); no example is ever lost. Systemic
faults raise before work starts (bad config, missing key), as soon as a model turns out to be gone
(dead server, rejected key, unknown model: the finished examples stay in records.jsonl, run.json
says ``error``, ``--resume RUN_DIR`` continues) or after it: a run in which every example failed
has no result (``RunFailed``), and ``fail_on_error`` bounds the error share of any other.
Progress and cost are reported through ``saag_opt.events`` (``run_started``, ``example_finished``,
``run_finished``); an observer that raises is logged, never allowed to stop the run.

The configuration and its resume rule are ``evaluation.config``; the set-up is opened by
``agents.setup.open_setup`` (the one builder every verb uses); the records and the summary are
built by ``evaluation.records``. This module is the loop.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import as_completed
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from saag_opt import stopping, telemetry
from saag_opt.agents.base import BasePredictionCache
from saag_opt.agents.setup import Condition, open_setup
from saag_opt.data import load_dataset, round_robin, split_hash
from saag_opt.errors import ConfigError, CostCapReached, ModelUnavailableError, RunError, RunFailed, SaagOptError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluation.estimate import Estimate, estimate_evaluation
from saag_opt.evaluation.records import base_record, failed_record, mechanism_record, summarise
from saag_opt.evaluation.results import EvaluationSummary, ExampleRecord, RecordWriter, finished_records
from saag_opt.events import EventSink, emit
from saag_opt.lm import CostLedger
from saag_opt.lm.batch.rounds import BATCH_WORKERS, BatchRounds
from saag_opt.lm.disk_cache import configure_lm_cache
from saag_opt.lm.latency import lm_clock
from saag_opt.lm.spend.ledgerfile import open_ledger, save_costs
from saag_opt.model import Example
from saag_opt.paths import base_predictions_dir
from saag_opt.runfiles import (
    RunHeader,
    atomic_write_json,
    atomic_write_jsonl,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    resumed,
    write_header,
)

log = logging.getLogger(__name__)


@dataclass
class EvaluationResult:
    """What ``run_evaluation`` returns."""

    run_dir: Path
    summary: EvaluationSummary
    records: list[ExampleRecord] = field(default_factory=list)


@dataclass(frozen=True)
class _Pass:
    """One evaluate run at work: its configuration and examples, the opened set-up, the ledger it books on."""

    config: EvaluateConfig
    examples: list[Example]
    condition: Condition
    ledger: CostLedger
    run_id: str
    batch: BatchRounds | None = None
    """The Batch API rounds every LM call of the run joins (``--batch``), else None."""


def run_ledger(config: EvaluateConfig, run_dir: Path, parent: CostLedger | None = None) -> CostLedger:
    """This run's ledger: a child of ``parent`` (whose cap covers a bigger run), else its own.

    Its own is capped by ``config.max_cost``. What earlier attempts of the run spent (its
    ``costs.json``, when resumed) is counted in, and against the cap.
    """
    return open_ledger(config.max_cost, run_dir, parent=parent)


def _open(config: EvaluateConfig, run_dir: Path, examples: list[Example], ledger: CostLedger,
          on_event: EventSink | None = None) -> _Pass:
    """Open the set-up (raises for systemic faults: a missing key, an unknown prompt)."""
    cache = BasePredictionCache(config.cache_dir or base_predictions_dir())
    batch = BatchRounds(run_dir, on_event=on_event) if config.batch else None
    return _Pass(config, examples, open_setup(config.setup, ledger, cache, batch=batch), ledger, run_dir.name, batch)


def _ids_hash(examples: Sequence[Example]) -> str:
    """Which examples, in which order: a resumed run must see the same ones."""
    return hashlib.sha256("\n".join(e.id for e in examples).encode()).hexdigest()[:16]


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


def _header(config: EvaluateConfig, run_dir: Path, examples: Sequence[Example],
            args_passed: dict[str, Any] | None) -> RunHeader:
    setup = config.setup
    models = {"base": setup.base} | ({"reviewer": setup.reviewer} if setup.reviewer else {})
    return new_header(
        run_dir, "evaluate", config=config.model_dump(mode="json"),
        args_passed=args_passed or {}, models=models,
        plugins={"mechanism": {"spec": setup.mechanism.spec, "experimental": setup.mechanism.experimental,
                               "args": {"max_repairs": setup.max_repairs, "grounding": setup.grounding}},
                 "reviewer": {"class": "SaagInformedReviewer" if setup.saag_informed else "Reviewer",
                              "prompt": setup.prompt, "sha256": _prompt_sha(config, quiet=True),
                              "experimental": setup.saag_informed}},
        dataset={"spec": config.dataset, "split": config.split, "limit": config.limit,
                 **({"skip": config.skip} if config.skip else {}), "n": len(examples),
                 "ids_hash": _ids_hash(examples), "split_hash": split_hash(examples)})


def _reopen(run_dir: Path, config: EvaluateConfig, examples: Sequence[Example],
            args_passed: dict[str, Any] | None) -> tuple[RunHeader, list[ExampleRecord]]:
    """``run.json`` of a resumed run set back to ``started``, and the finished examples' records.

    ``records.jsonl`` is rewritten (atomically) with those records only, so an example cut in half
    (or a line torn by a crash) is redone and every example appears exactly once.

    Raises:
        RunError: not an evaluate run, or its examples are not the recorded ones any more.
    """
    header = read_header(run_dir)
    if header.verb != "evaluate":
        raise RunError(f"--resume {run_dir}: it is a {header.verb!r} run, not an evaluate run")
    ids = _ids_hash(examples)
    if header.dataset.get("ids_hash") not in (None, ids):
        raise RunError(f"--resume {run_dir}: dataset {config.dataset!r} no longer gives the run's examples (ids "
                       f"hash {ids} != {header.dataset.get('ids_hash')}); start a new run")
    recorded = (header.plugins.get("reviewer") or {}).get("sha256")
    if recorded and (now := _prompt_sha(config)) != recorded:  # e.g. an alias (reviewer@best) that moved
        raise RunError(f"--resume {run_dir}: prompt {config.setup.prompt!r} now resolves to other instructions "
                       f"(sha256 {str(now)[:12]}; the run used {recorded[:12]}); start a new run")
    kept = finished_records(run_dir / "records.jsonl", config.setup.mechanism.spec, (e.id for e in examples))
    atomic_write_jsonl(run_dir / "records.jsonl", [r.model_dump(mode="json") for r in kept])
    resumes = resumed(header, args_passed, finished_before=len(kept) // 2)
    header = header.model_copy(update={"status": "started", "finished": None, "error": None,
                                       "config": config.model_dump(mode="json"), "resumes": resumes})
    return header, kept


def run_evaluation(config: EvaluateConfig, *, on_event: EventSink | None = None,
                   args_passed: dict[str, Any] | None = None, ledger: CostLedger | None = None,
                   resume: Path | None = None) -> EvaluationResult:
    """Evaluate ``config`` and write ``runs/<timestamp>-evaluate/``.

    ``ledger``: the ledger (and spend cap) of a bigger run this evaluation is part of (compare's
    passes, optimize's test phase); the run books into a child of it. When the cap is reached the
    run ends with ``status="stopped"`` and a summary over the examples that finished.

    ``resume``: continue that evaluate run directory instead (``config`` from ``resume_config``):
    finished examples are kept and not asked again, the rest are appended, and ``summary.json``,
    ``costs.json`` (summed over attempts) and ``run.json`` are rewritten at the end.

    Raises:
        ConfigError: bad dataset/split/prompt/mechanism, or a mechanism without a reviewer.
        ModelUnavailableError: a model cannot be reached (missing key, dead server).
        RunError: the run directory cannot be written or resumed, or the error rate exceeds ``fail_on_error``.
        RunFailed: every example failed (``run.json`` says ``error``, the records are kept).
    """
    examples = load_dataset(config.dataset, split=config.split, limit=config.limit, skip=config.skip)
    if not examples:
        raise ConfigError(f"dataset: {config.dataset!r} (split {config.split!r}) has no examples")
    configure_lm_cache()
    finished: list[ExampleRecord] = []
    if resume is None:
        run_dir = create_run_dir(config.runs_dir, "evaluate")
        header = _header(config, run_dir, examples, args_passed)
    else:
        run_dir = resume
        header, finished = _reopen(run_dir, config, examples, args_passed)
    write_header(run_dir, header)
    with guarded_run(run_dir, header):
        work = _open(config, run_dir, examples, run_ledger(config, run_dir, ledger), on_event)
        done = {r.example_id for r in finished}
        emit(on_event, "resumed" if resume is not None else "run_started", f"run directory {run_dir}",
             run_dir=str(run_dir), total=len(examples), done=len(done))
        try:
            records, stopped = _run_all(work, [e for e in examples if e.id not in done], run_dir, on_event,
                                        finished=finished)
        finally:  # an interrupted attempt's spend is counted when the run resumes
            if work.batch is not None:  # workers still waiting on a batch give up; it stays in batches.json
                work.batch.close()
            save_costs(run_dir, work.ledger)
        summary = summarise(records, work.condition, examples, run_id=work.run_id, ledger=work.ledger,
                            seed=config.seed)
        if stopped is not None:
            summary = summary.model_copy(update={"stopped": str(stopped)})
        atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
        _check_errors(config, summary, records, run_dir)
    finish_header(run_dir, header, stopped)
    emit(on_event, "run_finished", f"done: {run_dir}", run_dir=str(run_dir))
    return EvaluationResult(run_dir, summary, records)


def preflight(config: EvaluateConfig) -> Estimate:
    """``--dry-run``: the expected calls, tokens and dollars by role; loads data, opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``run_evaluation`` would, before any work.
    """
    examples = load_dataset(config.dataset, split=config.split, limit=config.limit, skip=config.skip)
    setup = config.setup
    version = setup.prompt_version()
    return estimate_evaluation(examples, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                               instructions=dict(version.instructions) if version is not None else {})


def _check_errors(config: EvaluateConfig, summary: EvaluationSummary, records: Sequence[ExampleRecord],
                  run_dir: Path) -> None:
    """Fail a run whose every example failed (no result to report), or whose error share passes ``fail_on_error``.

    Raises:
        RunFailed: every example has an error (the first one is quoted).
        RunError: more than ``fail_on_error`` of the examples have one.
    """
    if summary.n_examples == 0:
        return
    if summary.errors == summary.n_examples:
        first = next((r.error for r in records if r.error), "")
        line = " ".join(first.split())
        raise RunFailed(f"all {summary.n_examples} examples failed, the first with: "
                        f"{line[:300] + '...' if len(line) > 300 else line} (see {run_dir / 'records.jsonl'})")
    if config.fail_on_error is None:
        return
    rate = summary.errors / summary.n_examples
    if rate > config.fail_on_error:
        raise RunError(f"{summary.errors}/{summary.n_examples} examples failed ({rate:.1%}), above "
                       f"--fail-on-error {config.fail_on_error:.1%}; see records.jsonl for the errors")


def _run_all(work: _Pass, todo: Sequence[Example], run_dir: Path, on_event: EventSink | None, *,
             finished: Sequence[ExampleRecord] = ()) -> tuple[list[ExampleRecord], CostCapReached | None]:
    """Every example's records, or those finished before the spend cap stopped the run (and why).

    ``todo``: the examples still to run; ``finished``: the records of those a resumed run already has.
    """
    writer = RecordWriter(run_dir / "records.jsonl")
    records: list[ExampleRecord] = list(finished)
    stopped: CostCapReached | None = None
    unavailable: ModelUnavailableError | None = None
    lock, total = threading.Lock(), len(work.examples)
    done = total - len(todo)
    try:
        # Stop hook: on SIGTERM/Ctrl-C queued examples are cancelled and in-flight ones dropped, so
        # records.jsonl holds whole examples only and --resume redoes just the missing ones.
        in_flight = min(max(1, len(todo)), BATCH_WORKERS) if work.batch is not None else work.config.workers
        if work.batch is not None:
            work.batch.expect(len(todo), in_flight or 1)
        with stopping.thread_pool(in_flight, thread_name_prefix="saag-eval") as pool:
            # round-robin over categories: a run stopped early still holds every category
            futures = [pool.submit(_evaluate_example, work, ex) for ex in round_robin(todo)]
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                try:
                    pair = future.result()  # raises only when the spend cap stops the run or a model is gone
                except CostCapReached as exc:
                    stopped = stopped or exc
                    for other in futures:
                        other.cancel()
                    continue
                except ModelUnavailableError as exc:
                    unavailable = unavailable or exc
                    for other in futures:
                        other.cancel()
                    continue
                with stopping.deferred():  # a stop never splits an example's records
                    for record in pair:
                        writer.write(record)
                with lock:
                    records.extend(pair)
                    done += 1
                if on_event is not None:  # the ledger snapshot is not free (a tune trial has no observer)
                    emit(on_event, "example_finished", f"{done}/{total} {pair[0].example_id}", done=done,
                         total=total, example_id=pair[0].example_id, base_correct=pair[0].correct,
                         final_correct=pair[1].correct, error=pair[1].error, costs=work.ledger.snapshot())
    finally:
        writer.close()
    if unavailable is not None:  # the examples that finished are in records.jsonl; --resume continues
        raise unavailable
    order = {ex.id: i for i, ex in enumerate(work.examples)}
    records.sort(key=lambda r: (order.get(r.example_id, 0), r.condition != "base"))
    return records, stopped


def _evaluate_example(work: _Pass, example: Example) -> tuple[ExampleRecord, ExampleRecord]:
    """Both records for one example (as a worker of the batch rounds under ``--batch``), in one span."""
    attributes = {"saag_opt.example.id": example.id, "saag_opt.example.category": example.category,
                  "saag_opt.mechanism": work.condition.mechanism.spec, "saag_opt.run_id": work.run_id}
    with telemetry.span("saag_opt.example", attributes) as current, \
            work.batch.worker() if work.batch is not None else nullcontext():
        base, final = _example_records(work, example)
        telemetry.set_attributes(current, {"saag_opt.base.correct": base.correct, "saag_opt.final.correct": final.correct,
                                           "saag_opt.error": final.error})
        return base, final


def _example_records(work: _Pass, example: Example) -> tuple[ExampleRecord, ExampleRecord]:
    """Both records for one example; any failure becomes an ``error`` record.

    Raises:
        CostCapReached: the spend cap refused a call; the example is unfinished and not recorded.
        ModelUnavailableError: a model cannot be reached or refuses the key; recording every later
            example as an error would only hide that, so the run stops (unfinished, not recorded).
    """
    condition, run_id = work.condition, work.run_id
    spec = condition.mechanism.spec
    cap = work.ledger.cap
    if cap is not None and cap.reached:
        raise CostCapReached(cap.message())
    try:
        with lm_clock() as base_clock:  # counts the base call's replays of unknown time
            base = condition.ctx.propose_initial(condition.agent, example)
        base_row = base_record(run_id, example, base, base_clock.untimed)
    except (CostCapReached, ModelUnavailableError):
        raise
    except Exception as exc:
        message = _error_text(exc)
        return failed_record(run_id, example, "base", message), failed_record(run_id, example, spec, message)
    try:
        lm_scope = dspy.context(lm=condition.reviewer_lm) if condition.reviewer_lm is not None else nullcontext()
        with lm_scope, dspy.track_usage() as tracker, lm_clock() as clock:
            outcome = condition.run(example)
        return base_row, mechanism_record(run_id, example, outcome, _tracker_tokens(tracker),
                                          base_clock.untimed + clock.untimed)
    except (CostCapReached, ModelUnavailableError):
        raise
    except Exception as exc:
        failed = failed_record(run_id, example, spec, _error_text(exc))
        return base_row, failed.model_copy(update={"base": base_row.final, "base_saag": base_row.saag})


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


def _tracker_tokens(tracker: Any) -> int:
    total = 0
    for usage in tracker.get_total_tokens().values():
        total += int(usage.get("total_tokens") or 0) or int(usage.get("prompt_tokens") or 0) + int(
            usage.get("completion_tokens") or 0)
    return total


__all__ = ["EvaluateConfig", "EvaluationResult", "preflight", "run_evaluation", "run_ledger"]
