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
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import as_completed
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import dspy
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from saag_opt import stopping
from saag_opt.agents import (
    BaseAgent,
    BasePredictionCache,
    Mechanism,
    MechanismContext,
    MechanismOutcome,
    Proposal,
    Reviewer,
    make_reviewer,
    parse_mechanism,
)
from saag_opt.errors import ConfigError, CostCapReached, ModelUnavailableError, RunError, RunFailed, SaagOptError
from saag_opt.evaluation.paired import summarise_pairs
from saag_opt.evaluation.results import (
    CallRecord,
    CandidateRecord,
    EvaluationSummary,
    ExampleRecord,
    RecordWriter,
    RoundRecord,
    finished_records,
)
from saag_opt.events import EventSink, emit
from saag_opt.lm.latency import lm_clock
from saag_opt.lm.ledgerfile import save_costs
from saag_opt.lm.retry import RequestTimeout, call_options
from saag_opt.model import Example, Prediction
from saag_opt.paths import base_predictions_dir, configure_lm_cache
from saag_opt.runfiles import (
    RunHeader,
    atomic_write_json,
    atomic_write_jsonl,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    resume_header,
    utc_now,
    write_header,
)
from saag_opt.saag import INTERVENTION_GROUNDING, diagnose_with_gold, judge_with_gold
from saag_opt.saag.modes import ModeName

if TYPE_CHECKING:
    from saag_opt.artifacts import PromptVersion

log = logging.getLogger(__name__)

_RAW_LIMIT = 2000


class EvaluateConfig(BaseModel):
    """Everything ``saag-opt evaluate`` needs; stored (without secrets) in ``run.json``."""

    model_config = ConfigDict(extra="forbid")

    base: str
    """Base agent model spec (``gpt-4o``, ``local``, ``openai/<m>@URL``, ``fake@URL``)."""
    reviewer: str | None = None
    """Reviewer model spec; required by a mechanism that calls the reviewer (``Mechanism.needs_reviewer``)."""
    prompt: str = "reviewer@v2"
    """Reviewer prompt reference (``reviewer@v2``, an alias, or a path)."""
    mechanism: str = "r2"
    """A registered mechanism spec (``agents.mechanism_names()``: none, saag, r2, s5, gate+r2, ...)."""
    saag_informed: bool = False
    """Experimental: the review predictor also sees the gold-free SAAG report."""
    grounding: ModeName = INTERVENTION_GROUNDING
    """Stage 3 of the gold-free cascade that triggers binary/saag self-repair and gate+, and that the
    SAAG-informed reviewer sees: ``calibrated`` (default) or the ``paper``'s verbatim test."""
    reviewer_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature of the reviewer (reasoning models ignore it; the base agent stays at 0)."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """Reasoning effort sent to a reasoning reviewer model (gpt-5*, o-series); None = the model's default."""
    dataset: str = "shipped:bfcl"
    """Dataset spec (see ``saag-opt datasets list``)."""
    split: str | None = None
    """Keep only this split (train | val | test)."""
    limit: int | None = Field(default=None, ge=1)
    """Keep N examples (after the split filter), spread round-robin over the categories."""
    workers: int | None = Field(default=None, ge=1, le=64)
    """Examples evaluated concurrently (threads); None = 4, or 1 with an embedded model."""
    max_repairs: int = Field(default=5, ge=0, le=50)
    """Repair budget of the binary/saag self-repair loops."""
    seed: int = 0
    """Seed for the bootstrap CI (LM calls are deterministic through the cache)."""
    runs_dir: Path = Path("runs")
    """Where ``<timestamp>-evaluate/`` is created."""
    prompts_dir: Path | None = None
    """Prompt store ``prompt`` resolves in (None = ``$SAAG_OPT_PROMPTS``, else the user's; see ``saag_opt.paths``)."""
    cache_dir: Path | None = None
    """Base-prediction cache; default ``<saag-opt cache>/base-predictions``."""
    fail_on_error: float | None = Field(default=None, ge=0.0, le=1.0)
    """Mark the run failed when more than this share of examples errored."""
    retries: int = Field(default=4, ge=0, le=20)
    """Extra attempts per LM call after 429/5xx/timeouts/malformed replies."""
    retry_base_delay: float = Field(default=1.0, ge=0.0, le=60.0)
    """First backoff delay in seconds (doubles per attempt, jittered)."""
    request_timeout: RequestTimeout = None
    """Seconds one LM request may take before it is retried (None = the HTTP client's bound; ``lm.retry``)."""
    max_cost: float | None = Field(default=None, gt=0.0)
    """Hard cap in USD over every LM call of the run: a call that could pass it is not sent, the run
    stops cleanly with the finished examples kept (``summary.stopped``)."""
    on_unusable: Literal["approve", "reject"] = "approve"
    """What an unreadable review (after one retry) means: approve = the base call runs as proposed."""

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, value: str) -> str:
        parse_mechanism(value)
        return value.strip().lower()

    @model_validator(mode="after")
    def _reviewer_needed(self) -> EvaluateConfig:
        if self.reviewer is None and parse_mechanism(self.mechanism).needs_reviewer:
            raise ValueError(f"mechanism {self.mechanism!r} needs a reviewer model: pass --reviewer "
                             "(e.g. gpt-5-mini or local), or use --mechanism none|binary|saag")
        return self

    @model_validator(mode="after")
    def _default_workers(self) -> EvaluateConfig:
        if self.workers is None:
            from saag_opt.lm import default_workers

            self.workers = default_workers(self.base, self.reviewer)
        return self

    @field_validator("base", "reviewer")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None:
            from saag_opt.lm import parse_model_spec

            parse_model_spec(value)
        return value


@dataclass
class EvaluationResult:
    """What ``run_evaluation`` returns."""

    run_dir: Path
    summary: EvaluationSummary
    records: list[ExampleRecord] = field(default_factory=list)


@dataclass
class _Setup:
    config: EvaluateConfig
    examples: list[Example]
    agent: BaseAgent
    reviewer: Reviewer | None
    mechanism: Mechanism
    ctx: MechanismContext
    ledger: Any
    reviewer_lm: Any
    run_id: str
    prompt_version: PromptVersion | None = None
    """The reviewer's prompt version (None without a reviewer): what it was trained/selected on."""


def run_ledger(config: EvaluateConfig, run_dir: Path, parent: Any = None) -> Any:
    """This run's ledger: a child of ``parent`` (whose cap covers a bigger run), else its own.

    Its own is capped by ``config.max_cost``. What earlier attempts of the run spent (its
    ``costs.json``, when resumed) is counted in, and against the cap.
    """
    from saag_opt.lm.ledgerfile import open_ledger

    return open_ledger(config.max_cost, run_dir, parent=parent)


def _build(config: EvaluateConfig, run_id: str, examples: list[Example], ledger: Any) -> _Setup:
    """Open models and build agent, reviewer and mechanism (raises for systemic faults)."""
    from saag_opt.lm import open_lm, parse_model_spec

    mechanism = parse_mechanism(config.mechanism, max_repairs=config.max_repairs)
    options = call_options(retries=config.retries, retry_base_delay=config.retry_base_delay,
                           request_timeout=config.request_timeout)
    agent = BaseAgent(open_lm(parse_model_spec(config.base), role="base", ledger=ledger, **options), ledger=ledger)
    reviewer, reviewer_lm, version = None, None, None
    if mechanism.needs_reviewer:
        if config.reviewer is None:
            raise ConfigError(f"reviewer: mechanism {mechanism.spec!r} needs --reviewer")
        from saag_opt.artifacts import resolve_ref

        version = resolve_ref(config.prompt, config.prompts_dir)
        reviewer = make_reviewer(version, saag_informed=config.saag_informed, grounding=config.grounding)
        reviewer_options = options | {"temperature": config.reviewer_temperature}
        if config.reasoning_effort is not None:
            reviewer_options["reasoning_effort"] = config.reasoning_effort
        reviewer_lm = open_lm(parse_model_spec(config.reviewer), role="reviewer", ledger=ledger, **reviewer_options)
        reviewer.set_lm(reviewer_lm)
    cache = BasePredictionCache(config.cache_dir or base_predictions_dir())
    ctx = MechanismContext(cache=cache, max_repairs=config.max_repairs, on_unusable=config.on_unusable,
                           grounding=config.grounding)
    return _Setup(config, examples, agent, reviewer, mechanism, ctx, ledger, reviewer_lm, run_id, version)


def _ids_hash(examples: Sequence[Example]) -> str:
    """Which examples, in which order: a resumed run must see the same ones."""
    return hashlib.sha256("\n".join(e.id for e in examples).encode()).hexdigest()[:16]


def _header(config: EvaluateConfig, run_dir: Path, examples: Sequence[Example],
            args_passed: dict[str, Any] | None) -> RunHeader:
    from saag_opt.data import split_hash

    mechanism = parse_mechanism(config.mechanism, max_repairs=config.max_repairs)
    ids = _ids_hash(examples)
    models = {"base": config.base} | ({"reviewer": config.reviewer} if config.reviewer else {})
    return new_header(
        run_dir, "evaluate", config=config.model_dump(mode="json"),
        args_passed=args_passed or {}, models=models,
        plugins={"mechanism": {"spec": mechanism.spec, "experimental": mechanism.experimental,
                               "args": {"max_repairs": config.max_repairs, "grounding": config.grounding}},
                 "reviewer": {"class": "SaagInformedReviewer" if config.saag_informed else "Reviewer",
                              "prompt": config.prompt, "sha256": _prompt_sha(config, quiet=True),
                              "experimental": config.saag_informed}},
        dataset={"spec": config.dataset, "split": config.split, "limit": config.limit, "n": len(examples),
                 "ids_hash": ids, "split_hash": split_hash(examples)})


RESUMABLE_OPTIONS = frozenset({"workers", "max_cost", "fail_on_error"})
"""Options ``--resume`` may change (how the rest of the run goes, not what it measures)."""

_FLAGS = {"prompts_dir": "--store", "split": "--split"}


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def resume_config(run_dir: Path, passed: Mapping[str, Any] | None = None) -> EvaluateConfig:
    """The configuration an evaluate run continues with: its ``run.json``'s, plus allowed changes.

    ``passed``: options the user gave with ``--resume`` (field -> value). Those in
    ``RESUMABLE_OPTIONS`` replace the recorded value; any other must equal it (``runs_dir`` is
    ignored: the run directory is given).

    Raises:
        RunError: ``run_dir`` is not an evaluate run, or its ``run.json`` cannot be read.
        ConfigError: ``passed`` contradicts the recorded configuration (one line naming the options).
    """
    header = resume_header(run_dir, "evaluate")
    return resumed_settings(header.config, passed, where=f"--resume {run_dir}")


def resumed_settings(recorded: Mapping[str, Any], passed: Mapping[str, Any] | None, *, where: str,
                     clashes: Sequence[str] = ()) -> EvaluateConfig:
    """``recorded`` (a run's evaluation settings) with the ``RESUMABLE_OPTIONS`` in ``passed`` applied.

    Every other option in ``passed`` must repeat the recorded value; ``clashes`` are the caller's
    own contradictions (e.g. compare's A and B), reported in the same line.

    Raises:
        ConfigError: a contradiction (one line naming each option, its value and the recorded one).
    """
    stored = EvaluateConfig.model_validate(recorded)
    given = {k: v for k, v in (passed or {}).items() if k in EvaluateConfig.model_fields and k != "runs_dir"}
    fixed = {k: v for k, v in given.items() if k not in RESUMABLE_OPTIONS}
    try:
        asked = EvaluateConfig.model_validate(dict(recorded) | fixed)
        differs = [k for k in fixed if getattr(asked, k) != getattr(stored, k)]
    except ValueError:
        differs = [k for k, v in fixed.items() if v != recorded.get(k)]
    found = [*clashes, *(f"{_flag(k)} {fixed[k]!r} (the run has {recorded.get(k)!r})" for k in differs)]
    if found:
        raise ConfigError(f"{where}: {'; '.join(found)}: a resumed run keeps its recorded configuration; drop "
                          f"{'these options' if len(found) > 1 else 'that option'} or start a new run "
                          f"(only {', '.join(_flag(k) for k in sorted(RESUMABLE_OPTIONS))} may change)")
    changes = {k: v for k, v in given.items() if k in RESUMABLE_OPTIONS}
    return EvaluateConfig.model_validate(dict(recorded) | changes) if changes else stored


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
        raise RunError(f"--resume {run_dir}: prompt {config.prompt!r} now resolves to other instructions (sha256 "
                       f"{str(now)[:12]}; the run used {recorded[:12]}); start a new run")
    spec = parse_mechanism(config.mechanism, max_repairs=config.max_repairs).spec
    kept = finished_records(run_dir / "records.jsonl", spec, (e.id for e in examples))
    atomic_write_jsonl(run_dir / "records.jsonl", [r.model_dump(mode="json") for r in kept])
    resumes = [*(getattr(header, "resumes", None) or []),
               {"at": utc_now(), "args_passed": args_passed or {}, "finished_before": len(kept) // 2}]
    header = header.model_copy(update={"status": "started", "finished": None, "error": None,
                                       "config": config.model_dump(mode="json"), "resumes": resumes})
    return header, kept


def run_evaluation(config: EvaluateConfig, *, on_event: EventSink | None = None,
                   args_passed: dict[str, Any] | None = None, ledger: Any = None,
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
    from saag_opt.data import load_dataset

    examples = load_dataset(config.dataset, split=config.split, limit=config.limit)
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
        setup = _build(config, run_dir.name, examples, run_ledger(config, run_dir, ledger))
        done = {r.example_id for r in finished}
        emit(on_event, "resumed" if resume is not None else "run_started", f"run directory {run_dir}",
             run_dir=str(run_dir), total=len(examples), done=len(done))
        try:
            records, stopped = _run_all(setup, [e for e in examples if e.id not in done], run_dir, on_event,
                                        finished=finished)
        finally:  # an interrupted attempt's spend is counted when the run resumes
            save_costs(run_dir, setup.ledger)
        summary = summarise(records, setup, seed=config.seed)
        if stopped is not None:
            summary = summary.model_copy(update={"stopped": str(stopped)})
        atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
        _check_errors(config, summary, records, run_dir)
    finish_header(run_dir, header, stopped)
    emit(on_event, "run_finished", f"done: {run_dir}", run_dir=str(run_dir))
    return EvaluationResult(run_dir, summary, records)


def preflight(config: EvaluateConfig) -> Any:
    """``--dry-run``: the expected calls, tokens and dollars by role; loads data, opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``run_evaluation`` would, before any work.
    """
    from saag_opt.data import load_dataset
    from saag_opt.evaluation.estimate import estimate_evaluation

    examples = load_dataset(config.dataset, split=config.split, limit=config.limit)
    return estimate_evaluation(examples, base=config.base, reviewer=config.reviewer, mechanism=config.mechanism,
                               instructions=prompt_instructions(config), max_repairs=config.max_repairs)


def _prompt_sha(config: EvaluateConfig, *, quiet: bool = False) -> str | None:
    """The reviewer prompt's content hash (None without a reviewer): what a resume must match.

    ``quiet``: None for an unknown reference too (the run then fails where it builds the reviewer,
    with the run directory marked ``error``).
    """
    if config.reviewer is None or not parse_mechanism(config.mechanism).needs_reviewer:
        return None
    from saag_opt.artifacts import resolve_ref

    try:
        return resolve_ref(config.prompt, config.prompts_dir).sha256
    except SaagOptError:
        if quiet:
            return None
        raise


def prompt_instructions(config: EvaluateConfig) -> dict[str, str]:
    """The reviewer prompt's instructions ({} when the mechanism has no reviewer)."""
    if config.reviewer is None or not parse_mechanism(config.mechanism).needs_reviewer:
        return {}
    from saag_opt.artifacts import resolve_ref

    return dict(resolve_ref(config.prompt, config.prompts_dir).instructions)


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


def _run_all(setup: _Setup, todo: Sequence[Example], run_dir: Path, on_event: EventSink | None, *,
             finished: Sequence[ExampleRecord] = ()) -> tuple[list[ExampleRecord], CostCapReached | None]:
    """Every example's records, or those finished before the spend cap stopped the run (and why).

    ``todo``: the examples still to run; ``finished``: the records of those a resumed run already has.
    """
    writer = RecordWriter(run_dir / "records.jsonl")
    records: list[ExampleRecord] = list(finished)
    stopped: CostCapReached | None = None
    unavailable: ModelUnavailableError | None = None
    lock, total = threading.Lock(), len(setup.examples)
    done = total - len(todo)
    try:
        # Stop hook: on SIGTERM/Ctrl-C queued examples are cancelled and in-flight ones dropped, so
        # records.jsonl holds whole examples only and --resume redoes just the missing ones.
        with stopping.thread_pool(setup.config.workers, thread_name_prefix="saag-eval") as pool:
            futures = [pool.submit(_evaluate_example, setup, ex) for ex in todo]
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
                         final_correct=pair[1].correct, error=pair[1].error, costs=setup.ledger.snapshot())
    finally:
        writer.close()
    if unavailable is not None:  # the examples that finished are in records.jsonl; --resume continues
        raise unavailable
    order = {ex.id: i for i, ex in enumerate(setup.examples)}
    records.sort(key=lambda r: (order.get(r.example_id, 0), r.condition != "base"))
    return records, stopped


def _evaluate_example(setup: _Setup, example: Example) -> tuple[ExampleRecord, ExampleRecord]:
    """Both records for one example; any failure becomes an ``error`` record.

    Raises:
        CostCapReached: the spend cap refused a call; the example is unfinished and not recorded.
        ModelUnavailableError: a model cannot be reached or refuses the key; recording every later
            example as an error would only hide that, so the run stops (unfinished, not recorded).
    """
    spec = setup.mechanism.spec
    cap = setup.ledger.cap
    if cap is not None and cap.reached:
        raise CostCapReached(cap.message())
    try:
        with lm_clock() as base_clock:  # counts the base call's replays of unknown time
            base = setup.ctx.propose_initial(setup.agent, example)
        base_record = _base_record(setup, example, base, base_clock.untimed)
    except (CostCapReached, ModelUnavailableError):
        raise
    except Exception as exc:
        message = _error_text(exc)
        return _failed_record(setup, example, "base", message), _failed_record(setup, example, spec, message)
    try:
        lm_scope = dspy.context(lm=setup.reviewer_lm) if setup.reviewer_lm is not None else nullcontext()
        with lm_scope, dspy.track_usage() as tracker, lm_clock() as clock:
            outcome = setup.mechanism.run(example, setup.agent, setup.reviewer, ctx=setup.ctx)
        return base_record, _mechanism_record(setup, example, outcome, _tracker_tokens(tracker),
                                              base_clock.untimed + clock.untimed)
    except (CostCapReached, ModelUnavailableError):
        raise
    except Exception as exc:
        failed = _failed_record(setup, example, spec, _error_text(exc))
        return base_record, failed.model_copy(update={"base": base_record.final, "base_saag": base_record.saag})


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


def _tracker_tokens(tracker: Any) -> int:
    total = 0
    for usage in tracker.get_total_tokens().values():
        total += int(usage.get("total_tokens") or 0) or int(usage.get("prompt_tokens") or 0) + int(
            usage.get("completion_tokens") or 0)
    return total


def call_record(prediction: Prediction) -> CallRecord:
    """A prediction as stored."""
    raw = prediction.raw if prediction.raw is None else prediction.raw[:_RAW_LIMIT]
    return CallRecord(calls=[c.to_dict() for c in prediction.calls], raw=raw, status=prediction.status)


def _common(setup: _Setup, example: Example, condition: str) -> dict[str, Any]:
    return {"run_id": setup.run_id, "example_id": example.id, "category": example.category,
            "split": example.split, "condition": condition}


def _base_record(setup: _Setup, example: Example, base: Proposal, untimed: int) -> ExampleRecord:
    verdict = judge_with_gold(base.prediction.calls, example)
    return ExampleRecord(**_common(setup, example, "base"), final=call_record(base.prediction),
                         correct=verdict.correct, truth_reason=verdict.reason, saag=verdict.cascade.to_dict(),
                         seconds=base.seconds, untimed_replays=untimed,
                         tokens=0 if base.cached else base.tokens, cached=base.cached)


def _mechanism_record(setup: _Setup, example: Example, outcome: MechanismOutcome, tokens: int,
                      untimed: int) -> ExampleRecord:
    verdict = judge_with_gold(outcome.final.calls, example)
    base_saag = diagnose_with_gold(outcome.base.prediction.calls, example).to_dict()
    rounds = [RoundRecord(index=r.index, reviewer=r.reviewer, verdict=r.verdict, tentative=call_record(r.tentative),
                          feedback=r.feedback, revised=call_record(r.revised) if r.revised else None, note=r.note)
              for r in outcome.rounds]
    cands = [CandidateRecord(index=c.index, temperature=c.temperature, prediction=call_record(c.prediction),
                             score=c.score, rationale=c.rationale) for c in outcome.candidates]
    return ExampleRecord(
        **_common(setup, example, outcome.mechanism), final=call_record(outcome.final), correct=verdict.correct,
        truth_reason=verdict.reason, saag=verdict.cascade.to_dict(), base=call_record(outcome.base.prediction),
        base_saag=base_saag,
        rounds=rounds, candidates=cands, selected=outcome.selected, reviewer_calls=outcome.reviewer_calls,
        agent_calls=outcome.agent_calls, gated=outcome.gated, seconds=outcome.seconds, untimed_replays=untimed,
        tokens=tokens,
        cached=outcome.base.cached, notes=list(outcome.notes), reviewer_unusable=outcome.reviewer_unusable)


def _failed_record(setup: _Setup, example: Example, condition: str, message: str) -> ExampleRecord:
    return ExampleRecord(**_common(setup, example, condition), correct=False, truth_reason="error", error=message)


# -- summary ---------------------------------------------------------------------------------------


def summarise(records: Sequence[ExampleRecord], setup: _Setup, *, seed: int = 0) -> EvaluationSummary:
    """``summary.json`` content from the records of both conditions (records sorted base-first per example)."""
    base = [r for r in records if r.condition == "base"]
    final = [r for r in records if r.condition != "base"]
    paired = summarise_pairs(setup.mechanism.spec, list(zip(base, final)), gated=setup.mechanism.gated, seed=seed)
    return EvaluationSummary(
        run_id=setup.run_id, mechanism=setup.mechanism.spec,
        experimental=setup.mechanism.experimental or setup.config.saag_informed,
        prompt=setup.config.prompt if setup.reviewer is not None else None, n_examples=len(final),
        errors=paired.errors, base=paired.base, reviewed=paired.reviewed, help_harm=paired.help_harm,
        latency=paired.latency, reviewer_calls_per_item=paired.reviewer_calls_per_item,
        agent_calls_per_item=paired.agent_calls_per_item, gated_share=paired.gated_share,
        costs=setup.ledger.to_dict(), on_unusable=setup.config.on_unusable,
        contaminated=list(setup.prompt_version.contaminated({e.split for e in setup.examples if e.split}))
        if setup.prompt_version is not None else [],
        reviewer_mismatch=setup.prompt_version.reviewer_mismatch(setup.config.saag_informed, setup.config.grounding)
        if setup.prompt_version is not None else None)
