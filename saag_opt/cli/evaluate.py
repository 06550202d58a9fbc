"""``saag-opt evaluate``: base agent with and without a reviewer mechanism.

Thin: flags -> ``EvaluateConfig`` (``common.config_values``) -> ``run_evaluation`` -> ``report.evaluate_tables``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from saag_opt.cli.common import (
    BaseOpt,
    DatasetOpt,
    DryRunOpt,
    GroundingOpt,
    LimitOpt,
    MaxCostOpt,
    MaxRepairsOpt,
    MechanismOpt,
    MlflowOpt,
    OnUnusableOpt,
    PromptOpt,
    ReasoningEffortOpt,
    RequestTimeoutOpt,
    ResumeOpt,
    RetriesOpt,
    ReviewerOpt,
    ReviewerTemperatureOpt,
    RunsDirOpt,
    SaagInformedOpt,
    SplitOpt,
    StoreOpt,
    TrialsOpt,
    UserModelOpt,
    WorkersOpt,
    config_values,
    log_to_mlflow,
    output_path,
    passed_values,
    print_dry_run,
    split_filter,
    validated,
    write_output,
)


def evaluate(
    ctx: typer.Context,
    base: BaseOpt = "gpt-4o",
    reviewer: ReviewerOpt = None,
    prompt: PromptOpt = "reviewer@v2",
    mechanism: MechanismOpt = "r2",
    saag_informed: SaagInformedOpt = False,
    grounding: GroundingOpt = None,
    reviewer_temperature: ReviewerTemperatureOpt = 0.0,
    reasoning_effort: ReasoningEffortOpt = None,
    max_repairs: MaxRepairsOpt = 5,
    retries: RetriesOpt = 4,
    request_timeout: RequestTimeoutOpt = None,
    on_unusable: OnUnusableOpt = "approve",
    prompts_dir: StoreOpt = None,
    dataset: DatasetOpt = "shipped:bfcl",
    split: SplitOpt = "test",
    limit: LimitOpt = None,
    workers: WorkersOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    fail_on_error: Annotated[Optional[float], typer.Option("--fail-on-error", min=0.0, max=1.0, metavar="RATE",
                                                           help="Fail if more than RATE of examples errored.")]
    = None,
    max_cost: MaxCostOpt = None,
    user_model: UserModelOpt = None,
    trials: TrialsOpt = 1,
    dry_run: DryRunOpt = False,
    mlflow_uri: MlflowOpt = None,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = Path("runs"),
    json_out: Annotated[Optional[Path], typer.Option("--json", dir_okay=False, help="Also write summary JSON here.")]
    = None,
) -> None:
    """Run the base agent with and without a reviewer mechanism; print accuracy, help/harm, latency and cost.

    [bold]--resume RUN_DIR[/] continues a stopped or interrupted run in its own directory, with its recorded options.
    """
    json_out = output_path(json_out)

    from saag_opt.evaluation.config import EvaluateConfig, resume_config  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.evaluation.runner import preflight, run_evaluation  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.evaluate_tables import EvaluateProgress, print_evaluate_report  # noqa: PLC0415 - start-up: --help loads no report table

    values = config_values(ctx, EvaluateConfig) | {"split": split_filter(split)}
    # A resume checks only what was typed against its record (a shell's SAAG_OPT_BASE is no request to change it).
    passed = passed_values(ctx, values, command_line_only=resume is not None)
    log_to_mlflow(ctx, mlflow_uri, dry_run)
    if _multi_turn(dataset, resume):  # conversations: evaluation/episode_run.py (docs/design.md §18)
        _evaluate_multi_turn(passed, values, resume, dry_run, json_out)
        return
    config = validated(resume_config, resume, passed) if resume is not None else validated(EvaluateConfig, **values)
    if dry_run:
        print_dry_run(preflight(config))
        return
    with EvaluateProgress(Console(stderr=True)) as progress:
        from saag_opt.report.live import with_lines  # noqa: PLC0415 - start-up: --help loads no report table
        result = run_evaluation(config, on_event=with_lines(progress, progress.progress.console), args_passed=passed,
                                resume=resume)
    print_evaluate_report(Console(), result.summary, str(result.run_dir))
    if json_out is not None:
        write_output(json_out, result.summary.model_dump_json(indent=2) + "\n")


def _multi_turn(dataset: str, resume: Path | None) -> bool:
    from saag_opt.data.catalog import is_multi_turn_dataset  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.evaluation.episode_run import is_multi_turn_run  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    return is_multi_turn_run(resume) if resume is not None else is_multi_turn_dataset(dataset)


def _evaluate_multi_turn(passed: dict[str, Any], values: dict[str, Any], resume: Path | None, dry_run: bool,
                         json_out: Path | None) -> None:
    from saag_opt.evaluation.config import EvaluateConfig  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.evaluation.episode_run import multi_turn_resume_config, preflight_multi_turn, run_multi_turn  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.episode_tables import print_episode_report  # noqa: PLC0415 - start-up: --help loads no report table
    from saag_opt.report.evaluate_tables import EvaluateProgress  # noqa: PLC0415 - start-up: --help loads no report table
    from saag_opt.report.live import with_lines  # noqa: PLC0415 - start-up: --help loads no report table

    config = (validated(multi_turn_resume_config, resume, passed) if resume is not None
              else validated(EvaluateConfig, **values))
    if dry_run:
        print_dry_run(preflight_multi_turn(config))
        return
    with EvaluateProgress(Console(stderr=True)) as progress:
        result = run_multi_turn(config, on_event=with_lines(progress, progress.progress.console), args_passed=passed,
                                resume=resume)
    print_episode_report(Console(), result.summary, str(result.run_dir))
    if json_out is not None:
        write_output(json_out, result.summary.model_dump_json(indent=2) + "\n")


__all__ = ["evaluate"]
