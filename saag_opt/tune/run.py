"""``run_tune``: a tune run from start to ``summary.json``.

Roles. The process that *creates* the study (a new ``--study`` name, or none given) coordinates:
it runs trials (in-process, or through ``--processes N`` local processes), waits for every other
worker's running trials, writes ``trials.jsonl``, re-evaluates the feasible Pareto set on test and
writes ``summary.json``. A process given the name of a study that already exists in ``--storage``
*joins* it as a worker: it runs trials until the budget is spent and writes only a ``trials.jsonl``
snapshot. ``--resume RUN_DIR`` makes a process the coordinator of that run's study again.

``--max-cost`` is one hard cap over the run: the warm-up, the trials of every local worker and
the test re-evaluation all reserve under it (``tune.spend``). When it stops the run, the finished
trials and test results are kept, ``run.json`` says ``stopped``, and ``--resume RUN_DIR`` with a
higher ``--max-cost`` goes on (the cut trial was enqueued again).

``runs/<ts>-tune/``: ``run.json`` (status, config with the storage password redacted),
``study.db`` / ``study.journal`` (the default storages), ``spend.json`` (the cap's account, with
``--max-cost``), ``trials/`` (one evaluate run dir per trial), ``test/`` (the Pareto set on
test), ``workers/`` (local worker logs), ``trials.jsonl``, ``summary.json``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from saag_opt.artifacts import resolve_ref
from saag_opt.atomic import atomic_write_json
from saag_opt.data.workload import workload
from saag_opt.errors import ConfigError, CostCapReached, SaagOptError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.events import EventSink, emit
from saag_opt.lm.spend.accounting import CostLedger
from saag_opt.lm.spend.ledgerfile import earlier_roles
from saag_opt.runfiles import (
    RunHeader,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    write_header,
)
from saag_opt.tune.results import (
    TrialRow,
    TuneSummary,
    evaluate_on_test,
    pareto_trials,
    summarise_tune,
    trial_row,
    trial_rows,
    write_trials,
)
from saag_opt.tune.space import Range, Space, load_space
from saag_opt.tune.spend import tune_ledger
from saag_opt.tune.storage import StorageSpec, open_storage, parse_storage
from saag_opt.tune.study import (
    EvaluateFn,
    SamplerName,
    TuneSettings,
    open_study,
    run_config,
    run_trials,
    spent,
    trials_counted,
)
from saag_opt.tune.workers import Supervisor, WorkerJob, shared_model_env

DEFAULT_TPE_TRIALS = 30

Role = Literal["coordinator", "worker"]


class TuneConfig(BaseModel):
    """Everything ``saag-opt tune`` needs; stored in ``run.json`` (storage password redacted)."""

    model_config = ConfigDict(extra="forbid")

    space: Path
    """The SPACE.toml."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Command-line pins (base, reviewer, dataset, limit) that replace the space's values."""
    sampler: SamplerName = "tpe"
    """tpe | grid."""
    trials: int | None = Field(default=None, ge=1)
    """Trials to finish; default 30 for tpe, the whole grid for grid."""
    workers: int = Field(default=1, ge=1, le=64)
    """Local worker processes."""
    storage: str | None = None
    """sqlite:///PATH | journal:PATH | postgresql://...; default a file in the run dir."""
    study: str | None = None
    """Study name; an existing one is joined as a worker."""
    resume: Path | None = None
    """A tune run dir to coordinate again."""
    max_cost: float | None = Field(default=None, gt=0)
    """Hard dollar cap over the run: trials in every local worker and the test re-evaluation."""
    seed: int = 0
    """Sampler seed."""
    heartbeat: int = Field(default=60, ge=1)
    """PostgreSQL heartbeat seconds."""
    test_limit: int | None = Field(default=None, ge=1)
    """Test examples for the Pareto re-evaluation; default the space's limit."""
    no_test: bool = False
    """Skip the test re-evaluation."""
    runs_dir: Path = Path("runs")
    """Where ``<ts>-tune/`` goes."""

    def settings(self) -> TuneSettings:
        """The search settings every worker of the study shares (default trial count filled in)."""
        trials = self.trials if self.trials is not None else (DEFAULT_TPE_TRIALS if self.sampler == "tpe" else None)
        return TuneSettings(sampler=self.sampler, trials=trials, seed=self.seed, heartbeat=self.heartbeat,
                            max_cost=self.max_cost)


@dataclass
class TuneOutcome:
    """What ``run_tune`` returns."""

    run_dir: Path
    role: Role
    study: str
    space: Space
    rows: list[TrialRow]
    summary: TuneSummary | None = None


@dataclass
class _Watcher:
    """Reports each trial once, when it finishes (in this process or any other worker).

    Each ``trial_finished`` carries the run's progress: ``done``/``budget`` trials, ``spent`` (the
    cap's account with ``--max-cost``, else the trials' own), ``max_cost`` and the current
    feasible ``front`` (trial number and objective values per point).
    """

    study: Any
    space: Space
    sink: EventSink | None
    settings: TuneSettings
    ledger: CostLedger
    seen: set[int] = field(default_factory=set)

    def poll(self) -> None:
        """Emit ``trial_finished`` for every trial that finished since the last poll."""
        if self.sink is None:
            return
        for t in self.study.get_trials(deepcopy=False):
            if t.state.is_finished() and t.number not in self.seen:
                self.seen.add(t.number)
                row = trial_row(t, self.space)
                emit(self.sink, "trial_finished", row.describe(), row=row.model_dump(mode="json"), **self.progress())

    def progress(self) -> dict[str, Any]:
        """Trials done and budgeted, spend and cap, and the current front."""
        cap = self.ledger.cap
        budget = self.settings.trials
        if budget is None and self.settings.sampler == "grid":
            budget = len(self.space.grid_points() or [])
        front = [{"number": t.number, "values": dict(zip(self.space.metric_names, t.values))}
                 for t in pareto_trials(self.study)]
        return {"done": trials_counted(self.study), "budget": budget, "max_cost": self.settings.max_cost,
                "spent": cap.spent if cap is not None else spent(self.study), "front": front}


def run_tune(config: TuneConfig, *, on_event: EventSink | None = None, evaluate: EvaluateFn = run_config,
             args_passed: dict[str, Any] | None = None) -> TuneOutcome:
    """Search reviewer configurations with optuna, then re-evaluate the feasible Pareto front on test.

    A new study name (or none) makes this process the coordinator; the name of a study that exists
    in ``config.storage`` joins it as a worker; ``config.resume`` coordinates that run's study again.
    ``evaluate`` runs one trial (tests replace it).

    Raises:
        ConfigError: bad space, storage, study name or option combination.
        ModelUnavailableError: a model or the database cannot be reached.
        RunError: the run directory cannot be written, or a local worker failed.
    """
    space = load_space(config.space, config.overrides)
    check_inputs(space)
    run_dir, storage, study_name = _locate(config)
    settings = config.settings()
    if config.workers > 1 and not storage.parallel:
        raise ConfigError("--processes: sqlite is for one process; use --storage journal:PATH (local workers) "
                          "or postgresql://... (many machines)")
    header = _header(config, run_dir, storage, study_name, space, args_passed)
    write_header(run_dir, header)
    with guarded_run(run_dir, header):
        optuna_storage = open_storage(storage, heartbeat=settings.heartbeat)
        study, role = _open(space, optuna_storage, study_name, settings, config)
        header = header.model_copy(update={"role": role})
        write_header(run_dir, header)
        earlier = _earlier_spend(run_dir, study) if config.resume is not None else 0.0
        # a worker joining from another machine books into the study's account without resetting it
        ledger = tune_ledger(run_dir, settings.max_cost, restart=role == "coordinator", spent=earlier,
                             storage=storage, study=study_name)
        watcher = _Watcher(study, space, on_event, settings, ledger)
        emit(on_event, "run_started", f"tune {study_name} ({role}): {run_dir}", run_dir=str(run_dir), role=role,
             **watcher.progress())
        _search(config, space, study, settings, storage, study_name, run_dir, evaluate, ledger, watcher)
        rows = trial_rows(study, space)
        write_trials(run_dir / "trials.jsonl", rows)
        summary = None
        if role == "coordinator":
            summary = _finish(config, space, study, rows, storage, study_name, run_dir, evaluate, ledger, on_event)
        cap = ledger.cap
        stopped = CostCapReached(cap.message()) if cap is not None and cap.reached else None
    finish_header(run_dir, header, stopped)
    if stopped is not None:
        emit(on_event, "stopped", str(stopped), run_dir=str(run_dir), max_cost=settings.max_cost)
    emit(on_event, "run_finished", f"tune {study_name} {'stopped' if stopped else 'finished'}: {run_dir}",
         run_dir=str(run_dir))
    return TuneOutcome(run_dir, role, study_name, space, rows, summary)


def _search(config: TuneConfig, space: Space, study: Any, settings: TuneSettings, storage: StorageSpec,
            study_name: str, run_dir: Path, evaluate: EvaluateFn, ledger: CostLedger, watcher: _Watcher) -> None:
    """Run the trials: in this process, or through ``--processes N`` local processes (then drain what they left)."""
    trials_dir = run_dir / "trials"
    cap = ledger.cap
    if config.workers > 1:
        env = shared_model_env(space)
        warm_base_answers(space, run_dir / "base", env, evaluate, ledger=ledger)
        job = WorkerJob(str(config.space), config.overrides, storage.text, study_name, str(trials_dir),
                        settings.__dict__, 0)
        Supervisor(job, config.workers, run_dir / "workers", env=env).run(
            study, space, settings, storage, on_poll=watcher.poll)
    if config.workers == 1 or cap is None or not cap.reached:  # the supervisor ran no trial itself
        run_trials(study, space, settings, storage, trials_dir, evaluate=evaluate,
                   on_trial=lambda *_: watcher.poll(), ledger=ledger)
    watcher.poll()


def _earlier_spend(run_dir: Path, study: Any) -> float:
    """What earlier attempts of a resumed run spent, for a cap file they did not keep (no --max-cost then)."""
    total = CostLedger()
    for costs in [*run_dir.glob("base/*/costs.json"), *run_dir.glob("test/*/costs.json")]:
        total.restore(earlier_roles(costs.parent))
    return spent(study) + total.total_dollars()


def check_inputs(space: Space) -> None:
    """Read what trials would read (the dataset, every prompt reference) before any trial runs.

    Why: a missing dataset or a misspelled prompt among the choices otherwise surfaces only in the
    trial that draws it, after other trials were paid for, and ends the study there.

    Raises:
        ConfigError, DatasetError, ArtifactError: naming the space key and the bad value.
    """
    fields = EvaluateConfig.option_fields()

    def choices(name: str) -> tuple[str, list[Any]]:
        dim = space.search.get(name)
        if dim is not None and not isinstance(dim, Range):
            return f"search.{name}", list(dim)
        return f"fixed.{name}", [space.fixed.get(name, fields[name].default)]

    dataset = str(space.fixed.get("dataset", fields["dataset"].default))  # never searched (space.py)
    split = space.fixed.get("split")
    if not workload(dataset).load(split=split, limit=space.fixed.get("limit")):  # conversations: trials are entries
        raise ConfigError(f"{space.source}: fixed.dataset: {dataset!r} has no {split} examples")
    where, prompts = choices("prompt")
    store = space.fixed.get("prompts_dir")
    for prompt in prompts:
        try:
            resolve_ref(str(prompt), store)
        except SaagOptError as exc:
            raise ConfigError(f"{space.source}: {where}: {exc}") from None


def warm_base_answers(space: Space, runs_dir: Path, env: dict[str, str], evaluate: EvaluateFn = run_config, *,
                      ledger: CostLedger | None = None) -> None:
    """Ask the base agent once, before workers start, so they all find its answers in the cache.

    Why: N workers starting together would each ask the base agent the same questions (N times the
    base model's bill). A ``mechanism = "none"`` evaluation of the trial split fills the shared
    base-prediction cache; it is skipped when the base model itself is searched.
    """
    if "base" in space.search:
        return
    first = {k: (d[0] if isinstance(d, list) else d.low) for k, d in space.search.items()}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the shared embedded server, if any
    try:
        evaluate(space.config(first, mechanism="none", runs_dir=runs_dir), ledger=ledger)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _locate(config: TuneConfig) -> tuple[Path, StorageSpec, str]:
    """Run dir, storage and study name: from ``--resume``, or a new run dir with defaults."""
    if config.resume is not None:
        header = read_header(config.resume)
        if header.verb != "tune":
            raise ConfigError(f"--resume {config.resume}: a {header.verb} run, not a tune run")
        stored = header.config.get("storage")
        text = config.storage or stored
        if not text or "***" in text:
            raise ConfigError(f"--resume {config.resume}: pass --storage again (the stored URL has no password)")
        return config.resume, parse_storage(text), config.study or str(header.config.get("study"))
    run_dir = create_run_dir(config.runs_dir, "tune")
    if config.storage is not None:
        storage = parse_storage(config.storage)
    elif config.workers > 1:
        storage = StorageSpec("journal", str((run_dir / "study.journal").resolve()))
    else:
        storage = StorageSpec("sqlite", f"sqlite:///{(run_dir / 'study.db').resolve()}")
    return run_dir, storage, config.study or run_dir.name


def _open(space: Space, storage: Any, name: str, settings: TuneSettings, config: TuneConfig) -> tuple[Any, Role]:
    """Create the study (coordinator) or join an existing one (worker); a resume coordinates again."""
    if config.resume is not None:
        study, _ = open_study(space, storage, name, settings, create=False)
        return study, "coordinator"
    try:
        study, _ = open_study(space, storage, name, settings, create=True)
        return study, "coordinator"
    except ConfigError as exc:
        if "already exists" not in str(exc) or config.study is None:
            raise
    study, _ = open_study(space, storage, name, settings, create=False, seed_offset=_join_offset())
    return study, "worker"


def _join_offset() -> int:
    """A joining worker's sampler seed offset: distinct per process, so workers do not mirror each other."""
    return 1000 + os.getpid() % 100_000


def _finish(config: TuneConfig, space: Space, study: Any, rows: list[TrialRow], storage: StorageSpec,
            study_name: str, run_dir: Path, evaluate: EvaluateFn, ledger: CostLedger,
            on_event: EventSink | None) -> TuneSummary:
    """The test re-evaluation of the front (under the run's cap) and ``summary.json``."""
    cap = ledger.cap
    test = []
    if not config.no_test and cap is not None and cap.reached:
        emit(on_event, "stopped", "test re-evaluation not run: --max-cost was reached during the trials; resume "
             "with a higher --max-cost to run it", max_cost=cap.max_cost)
    elif not config.no_test:
        front = pareto_trials(study)
        limit = config.test_limit if config.test_limit is not None else space.fixed.get("limit")

        def started(index: int, trial: Any) -> None:
            emit(on_event, "stage", f"TEST {index + 1}/{len(front)}: trial {trial.number}", stage="test",
                 index=index, total=len(front), trial=trial.number)

        test = evaluate_on_test(space, front, run_dir / "test", limit=limit, evaluate=evaluate, ledger=ledger,
                                on_start=started)
    summary = summarise_tune(rows, space, study=study_name, storage=storage.redacted, sampler=config.sampler,
                             seed=config.seed, test=test, test_skipped=config.no_test, max_cost=config.max_cost,
                             spent=cap.spent if cap is not None else None,
                             stopped=cap.message() if cap is not None and cap.reached else None)
    atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
    return summary


def _header(config: TuneConfig, run_dir: Path, storage: StorageSpec, study: str, space: Space,
            args_passed: dict[str, Any] | None) -> RunHeader:
    stored = config.model_dump(mode="json") | {"storage": storage.redacted, "study": study}
    models = {k: str(space.fixed[k]) for k in ("base", "reviewer") if k in space.fixed}
    header = new_header(run_dir, "tune", config=stored, args_passed=args_passed or {}, models=models,
                        plugins={"sampler": {"name": config.sampler, "seed": config.seed}},
                        dataset={k: space.fixed.get(k) for k in ("dataset", "split", "limit")})
    header.packages["optuna"] = metadata.version("optuna")
    return header


__all__ = ["DEFAULT_TPE_TRIALS", "TuneConfig", "TuneOutcome", "check_inputs", "run_tune", "warm_base_answers"]
