"""``saag-opt optimize``: GEPA on the reviewer's instructions.

Thin: flags -> ``OptimizeConfig`` -> ``run_optimize`` -> ``report.optimize_tables``.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from saag_opt.cli.common import (
    DatasetOpt,
    DryRunOpt,
    GroundingOpt,
    OnUnusable,
    OnUnusableOpt,
    RequestTimeoutOpt,
    RunsDirOpt,
    StoreOpt,
    WorkersOpt,
    explicit_params,
    output_path,
    write_output,
)
from saag_opt.errors import ConfigError


class Accept(str, Enum):
    """GEPA acceptance criteria."""

    strict = "strict"
    equal = "equal"


class Budget(str, Enum):
    """GEPA auto budgets."""

    light = "light"
    medium = "medium"
    heavy = "heavy"


def optimize(
    ctx: typer.Context,
    base: Annotated[str, typer.Option("--base", envvar="SAAG_OPT_BASE", help="Base agent model (frozen).")] = "gpt-4o",
    reviewer: Annotated[str, typer.Option("--reviewer", envvar="SAAG_OPT_REVIEWER",
                                          help="Reviewer model; its instructions are optimized.")] = "gpt-5-mini",
    reflection: Annotated[Optional[str], typer.Option("--reflection", show_default="same as --reviewer",
                                                      help="Reflection LM that proposes new instructions.")] = None,
    prompt: Annotated[str, typer.Option("--prompt", help="Seed prompt reference.")] = "reviewer@v2",
    mechanism: Annotated[str, typer.Option(
        "--mechanism", help="A mechanism that calls the reviewer, e.g. r2, s5, g5, gate+r2.")] = "r2",
    saag_informed: Annotated[bool, typer.Option(
        "--saag-informed", help="Experimental: the reviewer also sees the gold-free SAAG report of the call it reviews "
        "(as evaluate --saag-informed), in GEPA's rollouts and on test; the saved versions record it.")] = False,
    grounding: GroundingOpt = None,
    dataset: DatasetOpt = "shipped:bfcl",
    budget: Annotated[Optional[Budget], typer.Option("--budget", help="GEPA auto budget (default light).")] = None,
    max_metric_calls: Annotated[Optional[int], typer.Option("--max-metric-calls", min=1,
                                                            help="Cumulative cap on rollouts.")] = None,
    max_cost: Annotated[Optional[float], typer.Option(
        "--max-cost", min=0.0, metavar="USD", show_default="no cap",
        help="Hard cap on the run's spend: every role, reflection and the test phase, summed over resumes. A call "
             "that could pass it is never sent; the run stops cleanly and --resume continues it.")] = None,
    on_unusable: OnUnusableOpt = OnUnusable.approve,
    request_timeout: RequestTimeoutOpt = None,
    dry_run: DryRunOpt = False,
    resume: Annotated[Optional[Path], typer.Option("--resume", file_okay=False, exists=True,
                                                   help="Continue an optimize run directory.")] = None,
    workers: WorkersOpt = None,
    train_limit: Annotated[Optional[int], typer.Option("--train-limit", min=1)] = None,
    val_limit: Annotated[Optional[int], typer.Option("--val-limit", min=1)] = None,
    test_limit: Annotated[Optional[int], typer.Option("--test-limit", min=1)] = None,
    accept: Annotated[Accept, typer.Option(
        "--accept", help="strict: a new instruction must beat its parent on the minibatch (GEPA's default); "
        "equal: a tie is enough unless the candidate's verdicts collapse (explores more; use with weak local "
        "reviewers). Degenerate proposals are quarantined either way; best leaves the seed only with 2 more val "
        "examples right and 5 points.")]
    = Accept.strict,
    no_test: Annotated[bool, typer.Option("--no-test", help="Skip the seed-vs-best TEST comparison.")] = False,
    runs_dir: RunsDirOpt = Path("runs"),
    prompts_dir: StoreOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", dir_okay=False,
                                                     help="Also write the summary JSON here.")] = None,
) -> None:
    """Optimize the reviewer's instructions with GEPA (train split) and select on val; compare on test."""
    json_out = output_path(json_out)
    from rich.console import Console

    from saag_opt.optimize import OptimizeConfig, run_optimize
    from saag_opt.report.optimize_tables import OptimizeProgress, print_optimize_report

    values: dict[str, Any] = dict(
        base=base, reviewer=reviewer, reflection=reflection, prompt=prompt, mechanism=mechanism,
        saag_informed=saag_informed, dataset=dataset,
        budget=budget.value if budget else None, accept=accept.value, max_metric_calls=max_metric_calls,
        max_cost=max_cost, on_unusable=on_unusable.value, request_timeout=request_timeout,
        workers=workers, train_limit=train_limit, val_limit=val_limit, test_limit=test_limit,
        evaluate_test=not no_test, runs_dir=str(runs_dir), prompts_dir=str(prompts_dir) if prompts_dir else None,
        resume=str(resume) if resume else None)
    if grounding is not None:
        values["grounding"] = grounding.value
    try:
        config = OptimizeConfig(**values)
    except ValueError as exc:
        raise ConfigError.from_validation(exc) from exc
    console = Console(stderr=True)
    if dry_run:
        from saag_opt.optimize.preflight import preflight_optimize
        from saag_opt.report.estimate_tables import print_estimate

        print_estimate(Console(), preflight_optimize(config).to_dict())
        return
    # A resume checks only what was typed against its record (a shell's SAAG_OPT_BASE is no request to change it).
    sources = ("COMMANDLINE",) if resume is not None else ("COMMANDLINE", "ENVIRONMENT")
    passed = ({name for name in explicit_params(ctx, sources) if name in OptimizeConfig.model_fields}
              | ({"evaluate_test"} if no_test else set()))
    with OptimizeProgress(console) as progress:
        result = run_optimize(config, on_event=progress, overrides=passed)
    summary = result.to_dict()
    print_optimize_report(Console(), summary)
    if json_out is not None:
        import json

        write_output(json_out, json.dumps(summary, indent=2, default=str) + "\n")


__all__ = ["Budget", "optimize"]
