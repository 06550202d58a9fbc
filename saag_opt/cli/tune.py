"""``saag-opt tune``: optuna over reviewer configurations (SPACE.toml), one process to many machines.

Thin: flags -> ``TuneConfig`` -> ``run_tune`` -> ``report.tune_tables``.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from saag_opt.cli.common import (
    DATA,
    DEFAULT_RUNS_DIR,
    DEFAULT_SEED,
    RUN,
    SETUP,
    TEST_LIMIT_HELP,
    BasePinOpt,
    DatasetPinOpt,
    DryRunOpt,
    JsonOutOpt,
    LimitOpt,
    MaxCostOpt,
    MlflowOpt,
    NoTestOpt,
    ReviewerOpt,
    RunsDirOpt,
    SeedOpt,
    log_to_mlflow,
    output_path,
    passed_values,
    print_dry_run,
    write_output,
)
from saag_opt.errors import ConfigError

TUNE_HELP = """Search reviewer configurations (mechanism, prompt, reviewer model, temperature, ...) with optuna.

Each trial is one evaluation on the space's split (default val), with the base agent's answers shared
through the caches; objectives default to help (max) and harm (min); \\[constraints] bound measured
metrics. The feasible Pareto front is re-evaluated on TEST. --base, --reviewer, --dataset and --limit
replace the space's values. --max-cost caps the whole run (every worker's trials and the test phase);
--dry-run prints the expected spend. --processes N runs N local worker processes (journal storage);
--storage postgresql://... --study NAME on other machines joins the same study as a worker. See
experiments/spaces/ for examples."""

TUNE_RESUME_HELP = "Coordinate that tune run's study again (give the same --space); its finished trials are kept."
"""tune's ``--resume``: the space and the pins are given again, the study and its storage come from the run."""


class Sampler(str, Enum):
    tpe = "tpe"
    grid = "grid"


def tune(
    ctx: typer.Context,
    space: Annotated[Path, typer.Option(
        "--space", exists=True, dir_okay=False, rich_help_panel=SETUP,
        help="The SPACE.toml: \\[fixed], \\[search], \\[objectives], \\[constraints].")],
    base: BasePinOpt = None,
    reviewer: ReviewerOpt = None,
    dataset: DatasetPinOpt = None,
    limit: LimitOpt = None,
    test_limit: Annotated[int | None, typer.Option(
        "--test-limit", min=1, show_default="--limit", rich_help_panel=DATA, help=TEST_LIMIT_HELP)] = None,
    sampler: Annotated[Sampler, typer.Option(
        "--sampler", rich_help_panel=RUN, help="tpe (seeded, multivariate) or grid (every point once, then stops).")]
    = Sampler.tpe,
    trials: Annotated[int | None, typer.Option(
        "--trials", min=1, show_default="30 for tpe, the whole grid", rich_help_panel=RUN,
        help="Trials to finish (all workers together).")] = None,
    workers: Annotated[int, typer.Option(
        "--processes", min=1, max=64, rich_help_panel=RUN,
        help="Local worker processes on one study (they share one embedded model server).")] = 1,
    storage: Annotated[str | None, typer.Option(
        "--storage", envvar="SAAG_OPT_TUNE_STORAGE", show_default="sqlite in the run dir; a journal file with "
        "--processes > 1", rich_help_panel=RUN, help="sqlite:///PATH | journal:PATH | postgresql://...")] = None,
    study: Annotated[str | None, typer.Option(
        "--study", rich_help_panel=RUN, help="Study name; an existing one is joined as a worker.")] = None,
    heartbeat: Annotated[int, typer.Option(
        "--heartbeat", min=1, rich_help_panel=RUN,
        help="PostgreSQL heartbeat seconds (a dead worker's trial is retried after twice this).")] = 60,
    seed: SeedOpt = DEFAULT_SEED,
    max_cost: MaxCostOpt = None,
    no_test: NoTestOpt = False,
    dry_run: DryRunOpt = False,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="RUN_DIR", file_okay=False, exists=True, rich_help_panel=RUN, help=TUNE_RESUME_HELP)]
    = None,
    runs_dir: RunsDirOpt = DEFAULT_RUNS_DIR,
    json_out: JsonOutOpt = None,
    mlflow_uri: MlflowOpt = None,
) -> None:
    """Search reviewer configurations with optuna; print the trials and the Pareto front on TEST."""
    json_out = output_path(json_out)
    from saag_opt.tune.run import TuneConfig  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    overrides = {k: v for k, v in dict(base=base, reviewer=reviewer, dataset=dataset, limit=limit).items()
                 if v is not None}
    values: dict[str, Any] = dict(space=space, overrides=overrides, sampler=sampler.value, trials=trials,
                                  workers=workers, storage=storage, study=study, resume=resume, max_cost=max_cost,
                                  seed=seed, heartbeat=heartbeat, test_limit=test_limit, no_test=no_test,
                                  runs_dir=runs_dir)
    try:
        config = TuneConfig(**values)
    except ValueError as exc:
        raise ConfigError.from_validation(exc) from exc
    if dry_run:
        _dry_run(config)
    else:
        log_to_mlflow(ctx, mlflow_uri)
        _run(config, passed_values(ctx, {k: v for k, v in values.items() if k != "storage"}), json_out)


def _dry_run(config: Any) -> None:
    """``--dry-run``: every verb's estimate table; no run directory, no model."""
    from saag_opt.tune.preflight import preflight_tune  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    print_dry_run(preflight_tune(config))


def _run(config: Any, passed: dict[str, Any], json_out: Path | None) -> None:
    """The run behind its live bar (lines in a log), then the report."""
    import optuna  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    from saag_opt.report.tune_tables import TuneProgress, print_tune_report  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.tune.run import run_tune  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with TuneProgress(Console(stderr=True)) as progress:
        outcome = run_tune(config, on_event=progress, args_passed=passed)
    print_tune_report(Console(), outcome.rows, outcome.summary, outcome.space.metric_names, str(outcome.run_dir),
                      outcome.role, outcome.study)
    if json_out is not None and outcome.summary is not None:
        write_output(json_out, outcome.summary.model_dump_json(indent=2) + "\n")


__all__ = ["TUNE_HELP", "TUNE_RESUME_HELP", "tune"]
