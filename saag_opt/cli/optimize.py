"""``saag-opt optimize``: GEPA on the reviewer's instructions.

Thin: flags -> ``OptimizeConfig`` (``common.config_values``) -> ``run_optimize`` -> ``report.optimize_tables``.
The review set-up options are evaluate's: GEPA's rollouts and the test phase run the set-up evaluate
would measure with the same options.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.console import Console

from saag_opt.choices import AcceptName, BudgetName, ProposerName
from saag_opt.cli.common import (
    DATA,
    DEFAULT_BASE,
    DEFAULT_DATASET,
    DEFAULT_MECHANISM,
    DEFAULT_ON_UNUSABLE,
    DEFAULT_PROMPT,
    DEFAULT_RETRIES,
    DEFAULT_REVIEWER_TEMPERATURE,
    DEFAULT_RUNS_DIR,
    DEFAULT_SEED,
    RUN,
    SETUP,
    TEST_LIMIT_HELP,
    BaseOpt,
    ConfigFile,
    ConfigFileOpt,
    DatasetOpt,
    DryRunOpt,
    GroundingOpt,
    JsonOutOpt,
    MaxCostOpt,
    MechanismOpt,
    MlflowOpt,
    NoTestOpt,
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
    StoreOpt,
    WorkersOpt,
    config_values,
    explicit_params,
    log_to_mlflow,
    output_path,
    print_dry_run,
    write_output,
)


def optimize(
    ctx: typer.Context,
    config_file: ConfigFileOpt = None,
    base: BaseOpt = DEFAULT_BASE,
    reviewer: ReviewerOpt = "gpt-5-mini",
    reflection: Annotated[Optional[str], typer.Option(
        "--reflection", show_default="same as --reviewer", rich_help_panel=SETUP,
        help="Reflection LM that proposes new instructions.")] = None,
    prompt: PromptOpt = DEFAULT_PROMPT,
    mechanism: MechanismOpt = DEFAULT_MECHANISM,
    saag_informed: SaagInformedOpt = False,
    grounding: GroundingOpt = None,
    reviewer_temperature: ReviewerTemperatureOpt = DEFAULT_REVIEWER_TEMPERATURE,
    reasoning_effort: ReasoningEffortOpt = None,
    retries: RetriesOpt = DEFAULT_RETRIES,
    request_timeout: RequestTimeoutOpt = None,
    on_unusable: OnUnusableOpt = DEFAULT_ON_UNUSABLE,
    prompts_dir: StoreOpt = None,
    dataset: DatasetOpt = DEFAULT_DATASET,
    train_limit: Annotated[Optional[int], typer.Option(
        "--train-limit", min=1, show_default="all", rich_help_panel=DATA, help="Use at most N TRAIN examples.")]
    = None,
    val_limit: Annotated[Optional[int], typer.Option(
        "--val-limit", min=1, show_default="all", rich_help_panel=DATA, help="Use at most N VAL examples.")] = None,
    test_limit: Annotated[Optional[int], typer.Option(
        "--test-limit", min=1, show_default="all", rich_help_panel=DATA, help=TEST_LIMIT_HELP)] = None,
    workers: WorkersOpt = None,
    seed: SeedOpt = DEFAULT_SEED,
    budget: Annotated[Optional[BudgetName], typer.Option(
        "--budget", show_default="light", rich_help_panel=RUN, help="GEPA's auto budget.")] = None,
    max_metric_calls: Annotated[Optional[int], typer.Option(
        "--max-metric-calls", min=1, rich_help_panel=RUN,
        help="Cap on GEPA's rollouts, resumes included (instead of --budget).")] = None,
    max_cost: MaxCostOpt = None,
    minibatch: Annotated[int, typer.Option(
        "--minibatch", min=1, rich_help_panel=RUN,
        help="Train examples per GEPA reflection (each proposal is scored on them too).")] = 3,
    proposals: Annotated[int, typer.Option(
        "--proposals", min=1, max=8, rich_help_panel=RUN,
        help="Proposals per GEPA iteration, each from the same parent on its own minibatch.")] = 1,
    proposer: Annotated[ProposerName, typer.Option(
        "--proposer", rich_help_panel=RUN,
        help="What the reflection LM writes: add (one new rule), edit (one rule added, replaced or deleted) or rewrite "
             "(a whole instruction).")] = "add",
    accept: Annotated[AcceptName, typer.Option(
        "--accept", rich_help_panel=RUN,
        help="A proposal enters the pool if it beats its parent on the minibatch (strict) or ties it (equal).")]
    = "strict",
    no_test: NoTestOpt = False,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = DEFAULT_RUNS_DIR,
    json_out: JsonOutOpt = None,
    mlflow_uri: MlflowOpt = None,
) -> None:
    """Optimize the reviewer's instructions (from the seed --prompt) with GEPA on train, select on val, compare on test.

    The set-up options (models, mechanism, --saag-informed, --reviewer-temperature, --retries ...) are those
    of evaluate and hold in GEPA's rollouts and in the test phase alike. On a BFCL multi-turn dataset
    (bfcl:multi_turn_*) a rollout is one reviewed conversation scored by BFCL's checker, and the limits
    count entries.

    --proposer add (the default) keeps every rule of the seed; edit lets a small reflection model change
    one rule where a rewrite degenerates. --accept equal explores more (for weak local reviewers).
    Degenerate proposals are quarantined either way, and best leaves the seed only with 2 more val
    examples right and 5 points. --max-cost counts every role, reflection and the test phase.
    """
    json_out = output_path(json_out)

    from saag_opt.optimize.config import OptimizeConfig  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.optimize.preflight import preflight_optimize  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.optimize.run import run_optimize  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.optimize_tables import OptimizeProgress, print_optimize_report  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    fields = set(OptimizeConfig.option_fields()) - {"resume"}
    file = ConfigFile.read(config_file, fields, "optimize")
    given = {_FIELDS.get(name, name) for name in explicit_params(ctx)}
    values = file.under(config_values(ctx, OptimizeConfig) | {"evaluate_test": not no_test}, given)
    config = file.validated(OptimizeConfig, **values)
    if dry_run:
        print_dry_run(preflight_optimize(config))
        return
    log_to_mlflow(ctx, mlflow_uri)
    # A resume checks only what was typed against its record (a shell's SAAG_OPT_BASE is no request to change it).
    typed = explicit_params(ctx, ("COMMANDLINE",) if resume is not None else ("COMMANDLINE", "ENVIRONMENT"))
    passed = {_FIELDS.get(name, name) for name in typed} & fields | set(file.passed(given))
    with OptimizeProgress(Console(stderr=True)) as progress:
        result = run_optimize(config, on_event=progress, overrides=passed)
    summary = result.to_dict()
    print_optimize_report(Console(), summary)
    if json_out is not None:
        write_output(json_out, json.dumps(summary, indent=2, default=str) + "\n")


_FIELDS = {"no_test": "evaluate_test"}
"""Option -> config field, where the names differ."""

__all__ = ["optimize"]
