"""``saag-opt evaluate``: base agent with and without a reviewer mechanism.

Thin: flags -> ``EvaluateConfig`` (``common.config_values``) -> ``evaluate.run.run_evaluation`` (``saag_opt.evaluate``)
-> ``report.evaluate_tables``, whichever kind of dataset the run was on.
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
    DEFAULT_PROMPT,
    DEFAULT_RETRIES,
    DEFAULT_REVIEWER_TEMPERATURE,
    DEFAULT_RUNS_DIR,
    DEFAULT_SEED,
    DEFAULT_SPLIT,
    RUN,
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
    MaxStepsOpt,
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
    SeedOpt,
    SkipOpt,
    SplitOpt,
    StoreOpt,
    Tau2TrialsOpt,
    UserModelOpt,
    UserReminderOpt,
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


def evaluate(
    ctx: typer.Context,
    config_file: ConfigFileOpt = None,
    base: BaseOpt = DEFAULT_BASE,
    reviewer: ReviewerOpt = None,
    prompt: PromptOpt = DEFAULT_PROMPT,
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
    user_model: UserModelOpt = None,
    user_reminder: UserReminderOpt = "auto",
    dataset: DatasetOpt = DEFAULT_DATASET,
    split: SplitOpt = DEFAULT_SPLIT,
    limit: LimitOpt = None,
    skip: SkipOpt = 0,
    trials: Tau2TrialsOpt = 1,
    max_steps: MaxStepsOpt = None,
    workers: WorkersOpt = None,
    seed: SeedOpt = DEFAULT_SEED,
    fail_on_error: Annotated[Optional[float], typer.Option(
        "--fail-on-error", min=0.0, max=1.0, metavar="RATE", rich_help_panel=RUN,
        help="Mark the run failed if more than RATE of its examples errored.")] = None,
    max_cost: MaxCostOpt = None,
    batch: BatchOpt = False,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = DEFAULT_RUNS_DIR,
    json_out: JsonOutOpt = None,
    mlflow_uri: MlflowOpt = None,
) -> None:
    """Run the base agent with and without a reviewer mechanism; print accuracy, help/harm, latency and cost.

    [bold]--resume RUN_DIR[/] continues a stopped or interrupted run in its own directory, with its recorded options.

    --grounding decides when binary/saag repair and gate+ intervene and what --saag-informed shows.
    --batch keeps every example in flight, each waiting on its batch; a stopped run resumes its batches
    in flight. A request slower than --request-timeout is retried with backoff, then its example is
    recorded as an error: lower it for a server that may hang. --mlflow logs the config as params,
    accuracy, help/harm, cost and latency as metrics, and report.html and summary.json as artifacts.
    """
    json_out = output_path(json_out)

    from saag_opt.evaluate.config import EvaluateConfig, resume_config  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.evaluate.run import preflight_evaluate, run_evaluation  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.evaluate_tables import EvaluateProgress, print_evaluate_report  # noqa: PLC0415 - start-up: --help loads no report table
    from saag_opt.report.live import with_lines  # noqa: PLC0415 - start-up: --help loads no report table

    file = ConfigFile.read(config_file, EvaluateConfig.option_fields(), "evaluate")
    given = explicit_params(ctx)
    values = file.under(config_values(ctx, EvaluateConfig), given)
    values["split"] = split_filter(values["split"])
    # A resume checks only what was typed against its record (a shell's SAAG_OPT_BASE is no request to change it).
    passed = passed_values(ctx, values, command_line_only=resume is not None) | file.passed(given)
    log_to_mlflow(ctx, mlflow_uri, dry_run)
    config = (validated(resume_config, resume, passed) if resume is not None
              else file.validated(EvaluateConfig, **values))
    warn_workers_under_batch(config.batch, passed)
    if dry_run:
        print_dry_run(preflight_evaluate(config))
        return
    with EvaluateProgress(Console(stderr=True)) as progress:
        result = run_evaluation(config, on_event=with_lines(progress, progress.progress.console),
                                args_passed=passed, resume=resume)
    print_evaluate_report(Console(), result.summary, str(result.run_dir))
    if json_out is not None:
        write_output(json_out, result.summary.model_dump_json(indent=2) + "\n")


__all__ = ["evaluate"]
