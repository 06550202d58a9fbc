"""The optuna study behind ``saag-opt tune``: samplers, the objective, memoised repeats, the budget.

One trial is one ``run_evaluation`` (the same runner as ``evaluate``) on the space's split; the base
agent's answers come from the shared base-prediction cache and LM replies from dspy's disk cache, so
only the reviewer side costs anything after the first trial. Objectives are named with
``study.set_metric_names`` and bounds go through ``trial.set_constraint`` (feasible when
measured - bound <= 0), the optuna 5 way.

Repeats: TPE suggests the same point again in small categorical spaces (optuna#2021), and local or
remote workers may suggest it concurrently. A trial whose configuration already completed is told
the stored values at zero LM cost with ``duplicate_of`` recorded; one whose configuration is being
run by an earlier, still running trial waits for it instead of running it twice.

Budget: ``--max-cost`` is a hard cap over the whole run (``tune.spend``): each trial books into a
child of the process's capped ledger. A trial the cap cuts short is failed (its numbers cover
part of the split), its spend recorded, and its configuration enqueued again, so a ``--resume``
with a higher cap runs it (finished LM calls replay from the cache, free).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from saag_opt.errors import ConfigError, CostCapReached, RunError, SaagOptError
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.results import PairedSummary
from saag_opt.lm.spend.accounting import CostLedger
from saag_opt.tune.space import METRICS, Range, Space, canonical_params
from saag_opt.tune.spend import tune_ledger
from saag_opt.tune.storage import (
    RETRY_ATTR,
    WORKER_ATTR,
    StorageSpec,
    recover_dead_workers,
    worker_id,
)

log = logging.getLogger(__name__)

SamplerName = Literal["tpe", "grid"]

KEY_ATTR = "config_key"
"""Trial user attribute: the canonical parameters (memo key)."""
DUPLICATE_ATTR = "duplicate_of"
"""Trial user attribute: the trial whose stored result answered this one."""
METRICS_ATTR = "metrics"
"""Trial user attribute: every metric measured (not only the objectives)."""
RUN_DIR_ATTR = "run_dir"
"""Trial user attribute: the evaluate run directory of the trial."""
ERROR_ATTR = "error"
"""Trial user attribute: why a trial failed (bad combination, error rate)."""
DOLLARS_ATTR = "dollars"
"""Trial user attribute: dollars the trial spent (0 for a repeat)."""
SPACE_ATTR = "space_digest"
"""Study user attribute: ``Space.digest()``; joining workers must match it."""

POLL_SECONDS = 0.5


@dataclass(frozen=True)
class TuneSettings:
    """How the study is searched (the same in every worker of a study)."""

    sampler: SamplerName = "tpe"
    """``tpe`` (seeded, multivariate, grouped) or ``grid`` (``BruteForceSampler``)."""
    trials: int | None = 30
    """Trials to finish (complete or failed); None = until the grid is exhausted."""
    seed: int = 0
    """Sampler seed (worker k of a multi-process study uses seed + k)."""
    heartbeat: int = 60
    """PostgreSQL heartbeat interval in seconds (grace period: twice that)."""
    max_cost: float | None = None
    """Hard cap in dollars over the run (every worker, the test phase; ``tune.spend``); no trial starts
    once the study's trials spent it."""


def make_sampler(settings: TuneSettings, seed_offset: int = 0) -> Any:
    """TPE for search, BruteForce for a grid (docs/design.md §12: never NSGA-II or GP here)."""
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module

    seed = settings.seed + seed_offset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if settings.sampler == "grid":
            return optuna.samplers.BruteForceSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)


def open_study(space: Space, storage: Any, name: str, settings: TuneSettings, *, create: bool,
               seed_offset: int = 0) -> tuple[Any, bool]:
    """Create the study (``create``) or join it; returns ``(study, created)``.

    Raises:
        ConfigError: ``create`` and the name exists, joining a study that does not exist, or a study
            that searches another space.
    """
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module

    sampler = make_sampler(settings, seed_offset)
    if create:
        try:
            study = optuna.create_study(storage=storage, study_name=name, sampler=sampler,
                                        directions=space.directions)
        except optuna.exceptions.DuplicatedStudyError:
            raise ConfigError(f"--study {name}: a study of that name already exists in the storage; "
                              "drop --new-study to join it as a worker") from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(space.metric_names)
        study.set_user_attr(SPACE_ATTR, space.digest())
        study.set_user_attr("space", space.model_dump(mode="json"))
        study.set_user_attr("sampler", settings.sampler)
        return study, True
    try:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except KeyError:
        raise ConfigError(f"--study {name}: no such study in the storage") from None
    theirs = study.user_attrs.get(SPACE_ATTR)
    deadline = time.monotonic() + 30
    while theirs is None and time.monotonic() < deadline:  # its creator names it right after creating it
        time.sleep(0.2)
        theirs = study.user_attrs.get(SPACE_ATTR)
    if theirs != space.digest():
        raise ConfigError(f"--study {name}: the study searches another space (digest {theirs}, this SPACE.toml "
                          f"{space.digest()}); join with the same SPACE.toml and the same --base/--reviewer pins")
    return study, False


def suggest(trial: Any, space: Space) -> dict[str, Any]:
    """The trial's parameters (enqueued retries get their stored values back)."""
    params: dict[str, Any] = {}
    for key, dim in space.search.items():
        if isinstance(dim, list):
            params[key] = trial.suggest_categorical(key, dim)
        else:
            params[key] = _suggest_range(trial, key, dim)
    return params


def _suggest_range(trial: Any, key: str, dim: Range) -> float | int:
    if dim.integer:
        return trial.suggest_int(key, int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log)
    return trial.suggest_float(key, dim.low, dim.high, step=dim.step, log=dim.log)


def trial_metrics(summary: PairedSummary) -> dict[str, float]:
    """Every metric of ``METRICS`` from an evaluate summary; undefined rates count as 0."""
    hh = summary.help_harm
    n = max(summary.n_items, 1)
    total = (summary.costs.get("roles") or {}).get("total") or {}
    overhead = summary.latency.overhead_x
    out = {
        "help": float(hh.helpfulness or 0.0),
        "harm": float(hh.harmfulness or 0.0),
        "accuracy": float(summary.reviewed.accuracy or 0.0),
        "net_change": float(hh.net_change or 0.0),
        "cost_per_item_usd": float(total.get("dollars") or 0.0) / n,
        "reviewer_calls_per_item": float(summary.reviewer_calls_per_item or 0.0),
        "seconds_per_item": float(summary.latency.final_mean_seconds or 0.0),
        "latency_overhead_x": float(overhead) if overhead is not None else 1.0,
    }
    return {name: out[name] for name in METRICS}


class EvaluateFn(Protocol):
    """``EvaluateConfig -> (run_dir, summary)``, booking into a child of ``ledger``; the runner, swappable in tests."""

    def __call__(self, config: Any, *, ledger: CostLedger | None = None) -> tuple[Path, PairedSummary]:
        """Evaluate ``config``; a ``ledger`` with a cap stops it there (``summary.stopped``)."""
        ...


def run_config(config: Any, *, ledger: CostLedger | None = None) -> tuple[Path, PairedSummary]:
    """The default trial runner: ``run_evaluation`` (the same as ``saag-opt evaluate``), on either kind of dataset."""
    result = run_evaluation(config, ledger=ledger)
    return result.run_dir, result.summary


def summary_dollars(summary: PairedSummary) -> float:
    """Dollars one evaluation spent (its own ledger's total)."""
    return float(((summary.costs.get("roles") or {}).get("total") or {}).get("dollars") or 0.0)


@dataclass
class Objective:
    """The callable optuna runs per trial (see the module docstring)."""

    space: Space
    trials_dir: Path
    evaluate: EvaluateFn = run_config
    storage_kind: str = "sqlite"
    worker: str = field(default_factory=worker_id)
    ledger: CostLedger | None = None
    """The process's ledger (and the run's cap); each trial books into a child of it."""

    def __call__(self, trial: Any) -> tuple[float, ...]:
        """Run (or answer from a stored result) one trial; returns the objective values."""
        trial.set_user_attr(WORKER_ATTR, self.worker)
        params = suggest(trial, self.space)
        key = canonical_params(params)
        trial.set_user_attr(KEY_ATTR, key)
        earlier = self._earlier_result(trial, key)
        if earlier is not None:
            return self._repeat(trial, earlier)
        try:
            config = self.space.config(params, runs_dir=self.trials_dir)
            run_dir, summary = self.evaluate(config, ledger=self.ledger)
        except (ConfigError, RunError) as exc:
            trial.set_user_attr(ERROR_ATTR, str(exc))
            raise
        except CostCapReached:
            self._requeue(trial, params, "cut by --max-cost before any example finished")
            raise
        except SaagOptError:  # it ends the study (not in run_trials' catch): the CLI's one line says why
            _silence_trial_failure_log()
            raise
        trial.set_user_attr(RUN_DIR_ATTR, str(run_dir))
        trial.set_user_attr(DOLLARS_ATTR, summary_dollars(summary))
        if summary.stopped:  # part of the split only: not a result to compare
            self._requeue(trial, params, f"cut by --max-cost after {summary.n_items} examples")
            raise CostCapReached(summary.stopped)
        metrics = trial_metrics(summary)
        trial.set_user_attr(METRICS_ATTR, metrics)
        for name, bound in self.space.constraints.items():
            trial.set_constraint(name, metrics[name] - bound)
        return tuple(metrics[name] for name in self.space.metric_names)

    def _requeue(self, trial: Any, params: dict[str, Any], why: str) -> None:
        """The cap stopped this trial: say so, and enqueue its configuration again for a resume.

        The caller raises ``CostCapReached``: optuna fails the trial and ``run_trials`` stops.
        """
        trial.set_user_attr(ERROR_ATTR, f"{why}; enqueued again for a resume")
        trial.study.enqueue_trial(params, user_attrs={RETRY_ATTR: trial.number})
        _silence_trial_failure_log()

    def _earlier_result(self, trial: Any, key: str) -> Any | None:
        """A COMPLETE trial with the same configuration; waits while an earlier one is RUNNING.

        An earlier RUNNING trial that has not stored its configuration yet (another worker between
        ``ask`` and ``KEY_ATTR``) is waited for too: it may be this one's, and running both would
        evaluate the configuration twice.
        """
        from optuna.trial import TrialState  # noqa: PLC0415 - heavy: optuna; the report imports this module

        while True:
            running = False
            for other in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
                other_key = other.user_attrs.get(KEY_ATTR)
                if other.number == trial.number or other_key not in (key, None):
                    continue
                if other.state == TrialState.COMPLETE and other_key == key and DUPLICATE_ATTR not in other.user_attrs:
                    return other
                if other.state == TrialState.RUNNING and other.number < trial.number:
                    running = True
            if not running:
                return None
            reap_stale(trial.study, self.storage_kind)  # the earlier trial's worker may be dead
            time.sleep(POLL_SECONDS)

    def _repeat(self, trial: Any, earlier: Any) -> tuple[float, ...]:
        """Answer from the stored result at zero LM cost."""
        trial.set_user_attr(DUPLICATE_ATTR, earlier.number)
        for name in (METRICS_ATTR, RUN_DIR_ATTR):
            if name in earlier.user_attrs:
                trial.set_user_attr(name, earlier.user_attrs[name])
        metrics = earlier.user_attrs.get(METRICS_ATTR) or {}
        for name, bound in self.space.constraints.items():
            trial.set_constraint(name, float(metrics.get(name, math.inf)) - bound)
        return tuple(earlier.values)


def trials_counted(study: Any) -> int:
    """Trials that count against ``--trials``: complete, failed or running.

    A failed trial that was retried counts once, through its retry.
    """
    from optuna.trial import TrialState  # noqa: PLC0415 - heavy: optuna; the report imports this module

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING))
    retried = sum(retry_of(t) is not None for t in trials)
    return len(trials) - retried


def spent(study: Any) -> float:
    """Dollars spent by every trial of the study so far."""
    return sum(float(t.user_attrs.get(DOLLARS_ATTR) or 0.0) for t in study.get_trials(deepcopy=False))


def budget_left(study: Any, space: Space, settings: TuneSettings, cap: Any = None) -> bool:
    """Whether any worker should start another trial (waiting retries run unless ``cap`` stopped the run)."""
    from optuna.trial import TrialState  # noqa: PLC0415 - heavy: optuna; the report imports this module

    if cap is not None and cap.reached:
        return False
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return True
    if settings.trials is not None and trials_counted(study) >= settings.trials:
        return False
    if settings.max_cost is not None and spent(study) >= settings.max_cost:
        return False
    if settings.sampler == "grid":
        points = space.grid_points() or []
        taken = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING))
        done = {canonical_params(t.params) for t in taken if set(t.params) == set(space.search)}
        return len(done) < len(points)
    return True


def reap_stale(study: Any, storage_kind: str) -> None:
    """Fail (and enqueue again) trials of dead workers: by heartbeat on RDB, by pid on this host otherwise."""
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module

    if storage_kind == "rdb":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        return
    for number in recover_dead_workers(study):
        log.warning("trial %d belonged to a dead worker: failed and enqueued again", number)


class _OneLineUserErrors(logging.Filter):
    """Drop the traceback optuna logs with a failed trial when the failure is a user error.

    Why: optuna's "Trial N failed ... because of the following error: ConfigError('...')" line
    already names it; the traceback under it reads like a crash (bugs keep theirs).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record; strip ``exc_info`` from those caused by a ``SaagOptError``."""
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, SaagOptError):
            record.exc_info, record.exc_text = None, None
        return True


_TRIAL_LOGGER = "optuna.study._optimize"
"""The optuna logger that reports failed trials (with the exception's traceback)."""


def _silence_trial_failure_log() -> None:
    """Keep optuna's two "Trial N failed ..." warnings from printing ahead of the error that stops the study.

    Why: they repeat the one line the CLI prints for it; ``run_trials`` restores the verbosity.
    """
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module

    optuna.logging.set_verbosity(optuna.logging.ERROR)


def _quiet_user_errors() -> None:
    trial_log = logging.getLogger(_TRIAL_LOGGER)
    if not any(isinstance(f, _OneLineUserErrors) for f in trial_log.filters):
        trial_log.addFilter(_OneLineUserErrors())


def run_trials(study: Any, space: Space, settings: TuneSettings, storage: StorageSpec, trials_dir: Path, *,
               evaluate: EvaluateFn = run_config, on_trial: Callable[[Any, Any], None] | None = None,
               ledger: CostLedger | None = None) -> None:
    """Run trials in this process until the budget is spent, then until no trial is left running.

    Draining matters for recovery: a dead worker's trial is failed and re-enqueued only once its
    heartbeat is stale (RDB) or its pid is gone (journal), possibly after every other trial ended;
    whoever is still around runs the retry. Remote journal workers cannot be checked, so a trial
    RUNNING on another host is waited for.

    ``ledger``: this process's ledger; by default the run's (``tune.spend``, in the parent of
    ``trials_dir``), capped by ``settings.max_cost``. When the cap stops the run this returns
    (the cut trial is failed and enqueued again), so every worker ends cleanly.

    Raises:
        ModelUnavailableError: a model stopped answering (the trial is marked failed first).
    """
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module
    from optuna.trial import TrialState  # noqa: PLC0415 - heavy: optuna; the report imports this module

    _quiet_user_errors()
    if ledger is None:
        ledger = tune_ledger(trials_dir.parent, settings.max_cost, storage=storage, study=study.study_name)
    cap = ledger.cap
    objective = Objective(space, trials_dir, evaluate, storage.kind, ledger=ledger)

    def stop_when_spent(study_: Any, trial: Any) -> None:
        if on_trial is not None:
            on_trial(study_, trial)
        if not budget_left(study_, space, settings, cap):
            study_.stop()

    verbosity = optuna.logging.get_verbosity()
    try:
        while True:
            reap_stale(study, storage.kind)
            if budget_left(study, space, settings, cap):
                # UpdateFinishedTrialError: a heartbeat declared this (slow, not dead) worker's trial stale and
                # retried it elsewhere; the retry stands, this worker goes on.
                try:
                    study.optimize(objective, n_trials=None, callbacks=[stop_when_spent], gc_after_trial=False,
                                   catch=(ConfigError, RunError, optuna.exceptions.UpdateFinishedTrialError),
                                   show_progress_bar=False)
                except CostCapReached:  # the trial is failed and enqueued again; every worker stops
                    if on_trial is not None:
                        on_trial(study, None)
                    return
            if cap is not None and cap.reached:
                return
            if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                continue
            if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                return
            time.sleep(POLL_SECONDS * 2)
    finally:  # an error that ended the study silenced optuna's trial log (_silence_trial_failure_log)
        optuna.logging.set_verbosity(verbosity)


def retry_of(trial: Any) -> int | None:
    """The dead worker's trial this one re-runs (journal recovery or the RDB heartbeat callback)."""
    value = trial.user_attrs.get(RETRY_ATTR, trial.system_attrs.get("failed_trial"))
    return int(value) if value is not None else None


__all__ = [
    "DOLLARS_ATTR",
    "DUPLICATE_ATTR",
    "ERROR_ATTR",
    "KEY_ATTR",
    "METRICS_ATTR",
    "RUN_DIR_ATTR",
    "SPACE_ATTR",
    "Objective",
    "SamplerName",
    "TuneSettings",
    "budget_left",
    "make_sampler",
    "open_study",
    "reap_stale",
    "retry_of",
    "run_config",
    "run_trials",
    "spent",
    "summary_dollars",
    "suggest",
    "trial_metrics",
    "trials_counted",
]
