"""What a tune run leaves behind.

``trials.jsonl``, the feasible Pareto set, its TEST re-evaluation, ``summary.json``.

Trials only ever saw train/val. The Pareto-optimal feasible configurations are evaluated again on
the test split, which no trial saw, and those numbers (accuracy per category, help, harm, ratio,
McNemar p and bootstrap CI against the base agent alone, cost, latency) are the ones to report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from saag_opt.atomic import atomic_write_jsonl
from saag_opt.errors import SaagOptError
from saag_opt.evaluation.conversation_records import EpisodeSummary
from saag_opt.evaluation.results import EvaluationSummary
from saag_opt.lm.spend.accounting import CostLedger
from saag_opt.runfiles import register_summary
from saag_opt.tune.space import Space, canonical_params
from saag_opt.tune.storage import WORKER_ATTR
from saag_opt.tune.study import (
    DUPLICATE_ATTR,
    ERROR_ATTR,
    KEY_ATTR,
    METRICS_ATTR,
    RUN_DIR_ATTR,
    EvaluateFn,
    retry_of,
    run_config,
    trial_metrics,
)


class TrialRow(BaseModel):
    """One line of ``trials.jsonl``."""

    number: int
    """Optuna trial number."""
    state: str
    """COMPLETE | FAIL | RUNNING | WAITING | PRUNED."""
    params: dict[str, Any]
    """The configuration (EvaluateConfig fields)."""
    values: dict[str, float] | None = None
    """Objective name -> value (complete trials)."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """Every metric measured."""
    constraints: dict[str, float] = Field(default_factory=dict)
    """Constraint name -> measured - bound (feasible when <= 0)."""
    feasible: bool | None = None
    """All constraints met (None for unfinished trials)."""
    pareto: bool = False
    """On the feasible Pareto front (the original of a repeated configuration)."""
    duplicate_of: int | None = None
    """Answered from this trial's stored result at zero LM cost."""
    retry_of: int | None = None
    """Re-runs this trial of a dead worker."""
    run_dir: str | None = None
    """The evaluate run directory (on the worker's machine)."""
    worker: str | None = None
    """``pid@host`` of the worker."""
    started: str | None = None
    """ISO start time."""
    finished: str | None = None
    """ISO end time."""
    seconds: float | None = None
    """Wall time."""
    error: str | None = None
    """Why it failed, when known."""

    def describe(self) -> str:
        """One plain line: ``trial 3  COMPLETE  mechanism=r2 ...  help=0.4 harm=0.05  12.3 s [notes]``."""
        values = " ".join(f"{k}={v:.3g}" for k, v in (self.values or {}).items())
        notes = []
        if self.duplicate_of is not None:
            notes.append(f"repeat of {self.duplicate_of}, 0 LM calls")
        if self.retry_of is not None:
            notes.append(f"retry of {self.retry_of}")
        if self.feasible is False:
            notes.append("infeasible")
        if self.error:
            notes.append(self.error)
        seconds = f"{self.seconds:.1f} s" if self.seconds is not None else ""
        extra = f" [{'; '.join(notes)}]" if notes else ""
        return f"trial {self.number:<3} {self.state:<8} {format_params(self.params)}  {values}  {seconds}{extra}"


def format_params(params: dict[str, Any]) -> str:
    """``mechanism=r2 prompt=reviewer@v2 reviewer_temperature=0.5``."""
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def trial_rows(study: Any, space: Space) -> list[TrialRow]:
    """Every trial of the study as a row, Pareto flags set."""
    front = {t.number for t in pareto_trials(study)}
    return [trial_row(t, space, pareto=t.number in front) for t in study.get_trials(deepcopy=False)]


def trial_row(t: Any, space: Space, *, pareto: bool = False) -> TrialRow:
    """One ``FrozenTrial`` as a ``trials.jsonl`` row."""
    constraints = {name: float(v) for name, v in t.constraints.items()}
    complete = t.state.name == "COMPLETE"
    return TrialRow(
        number=t.number, state=t.state.name, params=dict(t.params),
        values=dict(zip(space.metric_names, t.values)) if t.values is not None else None,
        metrics=t.user_attrs.get(METRICS_ATTR) or {}, constraints=constraints,
        feasible=all(v <= 0 for v in constraints.values()) if complete else None,
        pareto=pareto, duplicate_of=t.user_attrs.get(DUPLICATE_ATTR), retry_of=retry_of(t),
        run_dir=t.user_attrs.get(RUN_DIR_ATTR), worker=t.user_attrs.get(WORKER_ATTR),
        started=t.datetime_start.isoformat() if t.datetime_start else None,
        finished=t.datetime_complete.isoformat() if t.datetime_complete else None,
        seconds=t.duration.total_seconds() if t.duration else None, error=t.user_attrs.get(ERROR_ATTR))


def pareto_trials(study: Any) -> list[Any]:
    """Feasible Pareto-optimal trials, one per configuration (the original, not a repeat).

    ``study.best_trials`` already drops infeasible trials (measured; docs/design.md §12).
    """
    best = sorted(study.best_trials, key=lambda t: t.number)
    seen: set[str] = set()
    out = []
    for trial in best:
        key = trial.user_attrs.get(KEY_ATTR) or canonical_params(trial.params)
        if key in seen:
            continue
        seen.add(key)
        out.append(trial)
    return out


def write_trials(path: Path, rows: list[TrialRow]) -> None:
    """Write ``trials.jsonl`` atomically."""
    atomic_write_jsonl(path, (row.model_dump(mode="json") for row in rows))


class TestResult(BaseModel):
    """One Pareto configuration re-evaluated on the test split."""

    __test__ = False  # not a pytest class

    trial: int
    """The trial it came from."""
    params: dict[str, Any]
    """The configuration."""
    val: dict[str, float]
    """Metrics measured on the trial split."""
    run_dir: str | None = None
    """The test evaluate run directory."""
    summary: EvaluationSummary | EpisodeSummary | None = None
    """Its full summary (accuracy per category, help/harm with McNemar p and CI, cost, latency; on conversations
    the conversation counts too)."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """The tune metrics on test."""
    error: str | None = None
    """Why the re-evaluation failed."""


def evaluate_on_test(space: Space, trials: list[Any], test_dir: Path, *, limit: int | None,
                     evaluate: EvaluateFn = run_config, ledger: CostLedger | None = None,
                     on_start: Callable[[int, Any], None] | None = None) -> list[TestResult]:
    """Re-run each Pareto configuration on the test split (base answers shared through the cache).

    ``ledger``: the run's (its cap covers this phase too). Once the cap stops one evaluation, its
    result and every later one carry the reason instead of numbers (part of the split is no
    result); a resume with a higher cap runs them again, finished LM calls replaying free.
    ``on_start(index, trial)`` is told before each evaluation.
    """
    out = []
    stopped: str | None = None
    for index, trial in enumerate(trials):
        overrides: dict[str, Any] = {"split": "test", "runs_dir": test_dir}
        if limit is not None:
            overrides["limit"] = limit
        val = trial.user_attrs.get(METRICS_ATTR) or {}
        result = TestResult(trial=trial.number, params=dict(trial.params), val=val)
        if stopped is not None:  # the reason is the summary's ``stopped``
            out.append(result.model_copy(update={"error": "not run: --max-cost reached"}))
            continue
        if on_start is not None:
            on_start(index, trial)
        try:
            run_dir, summary = evaluate(space.config(dict(trial.params), **overrides), ledger=ledger)
        except SaagOptError as exc:
            out.append(result.model_copy(update={"error": str(exc)}))
            continue
        if summary.stopped:
            stopped = summary.stopped
            out.append(result.model_copy(update={"run_dir": str(run_dir), "error": f"cut by --max-cost after "
                                                 f"{summary.n_items} examples"}))
            continue
        out.append(result.model_copy(update={"run_dir": str(run_dir), "summary": summary,
                                             "metrics": trial_metrics(summary)}))
    return out


class TuneSummary(BaseModel):
    """``summary.json`` of a tune run."""

    study: str
    """Study name."""
    storage: str
    """Storage URL (password redacted)."""
    sampler: str
    """tpe | grid."""
    seed: int
    """Sampler seed."""
    space: dict[str, Any]
    """The validated space."""
    objectives: dict[str, str]
    """Metric -> direction."""
    constraints: dict[str, float]
    """Metric -> bound."""
    states: dict[str, int]
    """Trial state -> count."""
    distinct_configs: int
    """Configurations actually evaluated (repeats excluded)."""
    duplicates: int
    """Trials answered from a stored result."""
    retries: int
    """Trials that re-ran a dead worker's trial."""
    pareto: list[int]
    """Trial numbers on the feasible Pareto front."""
    test: list[TestResult] = Field(default_factory=list)
    """The test re-evaluation of the Pareto set."""
    test_skipped: bool = False
    """``--no-test`` was given."""
    max_cost: float | None = None
    """The run's dollar cap (trials in every worker and the test phase), if any."""
    spent: float | None = None
    """Dollars the run spent under that cap, every attempt counted (None without a cap)."""
    stopped: str | None = None
    """Why ``--max-cost`` stopped the run (resume with a higher one to go on); None when it was not."""


def summarise_tune(rows: list[TrialRow], space: Space, *, study: str, storage: str, sampler: str, seed: int,
                   test: list[TestResult], test_skipped: bool, max_cost: float | None = None,
                   spent: float | None = None, stopped: str | None = None) -> TuneSummary:
    """``summary.json`` content."""
    states: dict[str, int] = {}
    for row in rows:
        states[row.state] = states.get(row.state, 0) + 1
    complete = [r for r in rows if r.state == "COMPLETE"]
    return TuneSummary(
        study=study, storage=storage, sampler=sampler, seed=seed, space=space.model_dump(mode="json"),
        objectives=dict(space.objectives), constraints=dict(space.constraints), states=states,
        distinct_configs=len({canonical_params(r.params) for r in complete if r.duplicate_of is None}),
        duplicates=sum(r.duplicate_of is not None for r in complete),
        retries=sum(r.retry_of is not None for r in rows),
        pareto=[r.number for r in rows if r.pareto], test=test, test_skipped=test_skipped, max_cost=max_cost,
        spent=spent, stopped=stopped)


register_summary("tune", TuneSummary, records=TrialRow, records_file="trials.jsonl")

__all__ = ["TestResult", "TrialRow", "TuneSummary", "evaluate_on_test", "format_params", "pareto_trials", "summarise_tune",
           "trial_row", "trial_rows", "write_trials"]
