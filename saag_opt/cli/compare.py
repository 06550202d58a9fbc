"""``saag-opt compare A B [C ...]``: prompt versions or finished runs, side by side, every pair tested.

Thin: arguments -> ``CompareConfig`` (its evaluation through ``common.config_values``) -> ``run_compare``
-> ``report.compare_tables``. Prompt references are evaluated now, each once (base calls shared
through the cache); run directories are compared offline by example id.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console

from saag_opt.cli.common import (
    DEFAULT_BASE,
    DEFAULT_DATASET,
    DEFAULT_MAX_REPAIRS,
    DEFAULT_MECHANISM,
    DEFAULT_ON_UNUSABLE,
    DEFAULT_RETRIES,
    DEFAULT_REVIEWER_TEMPERATURE,
    DEFAULT_RUNS_DIR,
    DEFAULT_SEED,
    DEFAULT_SPLIT,
    BaseOpt,
    BatchOpt,
    ConfigFile,
    ConfigFileOpt,
    DatasetOpt,
    DryRunOpt,
    GroundingOpt,
    JsonOutOpt,
    LimitOpt,
    MaxCostOpt,
    MaxRepairsOpt,
    MechanismOpt,
    MlflowOpt,
    OnUnusableOpt,
    ReasoningEffortOpt,
    RequestTimeoutOpt,
    ResumeOpt,
    RetriesOpt,
    ReviewerOpt,
    ReviewerTemperatureOpt,
    RunsDirOpt,
    SaagInformedOpt,
    SeedOpt,
    SplitOpt,
    StoreOpt,
    WorkersOpt,
    config_values,
    explicit_params,
    log_to_mlflow,
    output_path,
    passed_values,
    print_dry_run,
    split_filter,
    validated,
    warn_workers_under_batch,
    write_output,
)
from saag_opt.errors import ConfigError


def compare(
    ctx: typer.Context,
    refs: Annotated[Optional[list[str]], typer.Argument(
        metavar="VERSION", show_default=False,
        help="A B [C ...]: prompt references (reviewer@v1, an alias, a path) or run directories (DIR or DIR#CONDITION).")]
    = None,
    config_file: ConfigFileOpt = None,
    base: BaseOpt = DEFAULT_BASE,
    reviewer: ReviewerOpt = None,
    mechanism: MechanismOpt = DEFAULT_MECHANISM,
    saag_informed: SaagInformedOpt = False,
    grounding: GroundingOpt = None,
    reviewer_temperature: ReviewerTemperatureOpt = DEFAULT_REVIEWER_TEMPERATURE,
    reasoning_effort: ReasoningEffortOpt = None,
    max_repairs: MaxRepairsOpt = DEFAULT_MAX_REPAIRS,
    retries: RetriesOpt = DEFAULT_RETRIES,
    request_timeout: RequestTimeoutOpt = None,
    on_unusable: OnUnusableOpt = DEFAULT_ON_UNUSABLE,
    prompts_dir: StoreOpt = None,
    dataset: DatasetOpt = DEFAULT_DATASET,
    split: SplitOpt = DEFAULT_SPLIT,
    limit: LimitOpt = None,
    workers: WorkersOpt = None,
    seed: SeedOpt = DEFAULT_SEED,
    max_cost: MaxCostOpt = None,
    batch: BatchOpt = False,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = DEFAULT_RUNS_DIR,
    json_out: JsonOutOpt = None,
    mlflow_uri: MlflowOpt = None,
) -> None:
    """Compare reviewer prompt versions (evaluated now) or finished runs (no LM calls), side by side.

    Give two or more: every pair gets McNemar's exact test, its p Holm-adjusted over the pairs.
    The model and set-up options apply to prompt versions only.
    [bold]--resume RUN_DIR[/] (no versions needed) continues a stopped or interrupted comparison of prompt versions.
    """
    json_out = output_path(json_out)

    from saag_opt.compare import run as comparing  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.compare.comparison import MAX_VERSIONS, side_keys  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.evaluate.config import EvaluateConfig  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.compare_tables import print_compare_report  # noqa: PLC0415 - start-up: --help loads no report table
    from saag_opt.report.evaluate_tables import EvaluateProgress  # noqa: PLC0415 - start-up: --help loads no report table

    file = ConfigFile.read(config_file, EvaluateConfig.option_fields(), "compare")
    given = explicit_params(ctx)
    values = file.under(config_values(ctx, EvaluateConfig), given)
    values["split"] = split_filter(values["split"])
    versions = list(refs or [])
    if len(versions) > MAX_VERSIONS:
        raise ConfigError(f"compare takes at most {MAX_VERSIONS} versions, got {len(versions)}")
    passed = passed_values(ctx, values, command_line_only=resume is not None) | file.passed(given) | {
        f"ref_{key}": ref for key, ref in zip(side_keys(MAX_VERSIONS), versions)}  # what was typed, per version
    if resume is not None:  # the run's recorded options and prompts; what was typed may only repeat them
        config = validated(comparing.resume_compare_config, resume, passed)
    elif len(versions) < 2:
        raise ConfigError("compare needs A and B (two prompt references or two run directories), or --resume RUN_DIR")
    else:  # model options matter only when prompts are evaluated now; runs need none of them
        settings = file.validated(EvaluateConfig, **values) if comparing.detect_mode(*versions)[0] == "prompts" else None
        config = comparing.CompareConfig(versions=versions, evaluation=settings, runs_dir=values["runs_dir"],
                                         seed=values["seed"])
    warn_workers_under_batch(config.evaluation is not None and config.evaluation.batch, passed)
    if dry_run:
        print_dry_run(comparing.preflight_compare(config))
        return
    log_to_mlflow(ctx, mlflow_uri)
    with EvaluateProgress(Console(stderr=True)) as progress:
        from saag_opt.report.live import with_lines  # noqa: PLC0415 - start-up: --help loads no report table
        result = comparing.run_compare(config, on_event=with_lines(progress, progress.progress.console, "compare"),
                                       args_passed=passed, resume=resume)
    console = Console()
    print_compare_report(console, result.summary, str(result.run_dir))
    if json_out is not None:
        write_output(json_out, result.summary.model_dump_json(indent=2) + "\n")
        console.print(f"wrote the comparison to {json_out}")


__all__ = ["compare"]
