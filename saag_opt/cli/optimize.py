"""``saag-opt optimize``: GEPA on the reviewer's instructions.

Thin: flags -> ``OptimizeConfig`` (``common.config_values``) -> ``run_optimize`` -> ``report.optimize_tables``.
The review set-up options are evaluate's: GEPA's rollouts and the test phase run the set-up evaluate
would measure with the same options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from saag_opt.choices import AcceptName, BudgetName, ProposerName
from saag_opt.cli.common import (
    DEFAULT_BASE,
    DEFAULT_DATASET,
    DEFAULT_MECHANISM,
    DEFAULT_ON_UNUSABLE,
    DEFAULT_PROMPT,
    DEFAULT_RETRIES,
    DEFAULT_REVIEWER_TEMPERATURE,
    DEFAULT_RUNS_DIR,
    BaseOpt,
    DatasetOpt,
    DryRunOpt,
    GroundingOpt,
    MechanismOpt,
    MlflowOpt,
    OnUnusableOpt,
    PromptOpt,
    ReasoningEffortOpt,
    RequestTimeoutOpt,
    RetriesOpt,
    ReviewerOpt,
    ReviewerTemperatureOpt,
    RunsDirOpt,
    SaagInformedOpt,
    StoreOpt,
    WorkersOpt,
    config_values,
    explicit_params,
    log_to_mlflow,
    output_path,
    print_dry_run,
    validated,
    write_output,
)


def optimize(
    ctx: typer.Context,
    base: BaseOpt = DEFAULT_BASE,
    reviewer: ReviewerOpt = "gpt-5-mini",
    reflection: Annotated[Optional[str], typer.Option("--reflection", show_default="same as --reviewer",
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
    budget: Annotated[Optional[BudgetName], typer.Option("--budget", help="GEPA auto budget (default light).")] = None,
    max_metric_calls: Annotated[Optional[int], typer.Option("--max-metric-calls", min=1,
                                                            help="Cumulative cap on rollouts.")] = None,
    max_cost: Annotated[Optional[float], typer.Option(
        "--max-cost", min=0.0, metavar="USD", show_default="no cap",
        help="Hard cap on the run's spend: every role, reflection and the test phase, summed over resumes. A call "
             "that could pass it is never sent; the run stops cleanly and --resume continues it.")] = None,
    dry_run: DryRunOpt = False,
    mlflow_uri: MlflowOpt = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", file_okay=False, exists=True,
                                                   help="Continue an optimize run directory.")] = None,
    workers: WorkersOpt = None,
    train_limit: Annotated[Optional[int], typer.Option("--train-limit", min=1)] = None,
    val_limit: Annotated[Optional[int], typer.Option("--val-limit", min=1)] = None,
    test_limit: Annotated[Optional[int], typer.Option("--test-limit", min=1)] = None,
    accept: Annotated[AcceptName, typer.Option(
        "--accept", help="strict: a new instruction must beat its parent on the minibatch (GEPA's default); "
        "equal: a tie is enough unless the candidate's verdicts collapse (explores more; use with weak local "
        "reviewers). Degenerate proposals are quarantined either way; best leaves the seed only with 2 more val "
        "examples right and 5 points.")]
    = "strict",
    seed: Annotated[int, typer.Option("--seed", help="GEPA's random seed (minibatches, candidate selection).")] = 0,
    minibatch: Annotated[int, typer.Option(
        "--minibatch", min=1, help="Train examples per GEPA reflection (each proposal is scored on them too).")] = 3,
    proposer: Annotated[ProposerName, typer.Option(
        "--proposer", help="edit: the reflection LM writes one rule edit (add, replace or delete a rule) as "
        "schema-constrained JSON, applied deterministically; add: one new rule, the others kept; rewrite: a whole "
        "new instruction (dspy's proposer). Small reflection models can write an edit where a rewrite "
        "degenerates; add keeps every rule the seed has (the default).")] = "add",
    no_test: Annotated[bool, typer.Option("--no-test", help="Skip the seed-vs-best TEST comparison.")] = False,
    runs_dir: RunsDirOpt = DEFAULT_RUNS_DIR,
    json_out: Annotated[Optional[Path], typer.Option("--json", dir_okay=False,
                                                     help="Also write the summary JSON here.")] = None,
) -> None:
    """Optimize the reviewer's instructions (from the seed --prompt) with GEPA on train, select on val, compare on test.

    The set-up options (models, mechanism, --saag-informed, --reviewer-temperature, --retries ...) are those
    of evaluate and hold in GEPA's rollouts and in the test phase alike. On a BFCL multi-turn dataset
    (bfcl:multi_turn_*) a rollout is one reviewed conversation scored by BFCL's checker, and the limits
    count entries.
    """
    json_out = output_path(json_out)

    from saag_opt.optimize.config import OptimizeConfig  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.optimize.preflight import preflight_optimize  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.optimize.run import run_optimize  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.optimize_tables import OptimizeProgress, print_optimize_report  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    config = validated(OptimizeConfig, **config_values(ctx, OptimizeConfig) | {"evaluate_test": not no_test})
    if dry_run:
        print_dry_run(preflight_optimize(config))
        return
    log_to_mlflow(ctx, mlflow_uri)
    # A resume checks only what was typed against its record (a shell's SAAG_OPT_BASE is no request to change it).
    typed = explicit_params(ctx, ("COMMANDLINE",) if resume is not None else ("COMMANDLINE", "ENVIRONMENT"))
    passed = (typed & set(OptimizeConfig.option_fields())) | ({"evaluate_test"} if no_test else set())
    with OptimizeProgress(Console(stderr=True)) as progress:
        result = run_optimize(config, on_event=progress, overrides=passed)
    summary = result.to_dict()
    print_optimize_report(Console(), summary)
    if json_out is not None:
        write_output(json_out, json.dumps(summary, indent=2, default=str) + "\n")


__all__ = ["optimize"]
