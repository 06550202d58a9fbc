"""``saag-opt evaluate``: base agent with and without a reviewer mechanism.

Thin: flags -> ``EvaluateConfig`` -> ``run_evaluation`` -> ``report.evaluate_tables``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from saag_opt.cli.common import (
    DatasetOpt,
    DryRunOpt,
    GroundingOpt,
    LimitOpt,
    MaxCostOpt,
    OnUnusable,
    OnUnusableOpt,
    RequestTimeoutOpt,
    ResumeOpt,
    RunsDirOpt,
    SplitOpt,
    StoreOpt,
    WorkersOpt,
    output_path,
    passed_values,
    split_filter,
    write_output,
)
from saag_opt.errors import ConfigError


def evaluate(
    ctx: typer.Context,
    base: Annotated[str, typer.Option("--base", envvar="SAAG_OPT_BASE",
                                      help="Base agent model: gpt-4o, local, openai/<m>@URL.")] = "gpt-4o",
    reviewer: Annotated[Optional[str], typer.Option("--reviewer", envvar="SAAG_OPT_REVIEWER",
                                                    help="Reviewer model (needed by mechanisms that call a "
                                                         "reviewer, e.g. r2).")] = None,
    prompt: Annotated[str, typer.Option("--prompt", help="Reviewer prompt: reviewer@v2, an alias, or a path.")]
    = "reviewer@v2",
    mechanism: Annotated[str, typer.Option("--mechanism", "-m", help="Review mechanism, e.g. none, binary, saag, r2, s5, "
                                           "g5, gate+r2 (experimental); an unknown name lists them all.")] = "r2",
    saag_informed: Annotated[bool, typer.Option("--saag-informed", help="Experimental: show the reviewer the "
                                                "gold-free SAAG report.")] = False,
    grounding: GroundingOpt = None,
    dataset: DatasetOpt = "shipped:bfcl",
    split: SplitOpt = "test",
    limit: LimitOpt = None,
    workers: WorkersOpt = None,
    max_repairs: Annotated[int, typer.Option("--max-repairs", min=0, help="Budget of binary/saag repair.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    fail_on_error: Annotated[Optional[float], typer.Option("--fail-on-error", min=0.0, max=1.0, metavar="RATE",
                                                           help="Fail if more than RATE of examples errored.")]
    = None,
    max_cost: MaxCostOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    on_unusable: OnUnusableOpt = OnUnusable.approve,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = Path("runs"),
    prompts_dir: StoreOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", dir_okay=False, help="Also write summary JSON here.")]
    = None,
) -> None:
    """Run the base agent with and without a reviewer mechanism; print accuracy, help/harm, latency and cost.

    [bold]--resume RUN_DIR[/] continues a stopped or interrupted run in its own directory, with its recorded options.
    """
    json_out = output_path(json_out)
    from rich.console import Console

    from saag_opt.evaluation.runner import EvaluateConfig, run_evaluation
    from saag_opt.report.evaluate_tables import EvaluateProgress, print_evaluate_report

    values: dict[str, Any] = dict(base=base, reviewer=reviewer, prompt=prompt, mechanism=mechanism,
                                  saag_informed=saag_informed, dataset=dataset, split=split_filter(split),
                                  limit=limit, workers=workers, max_repairs=max_repairs, seed=seed,
                                  fail_on_error=fail_on_error, runs_dir=runs_dir, prompts_dir=prompts_dir,
                                  max_cost=max_cost, on_unusable=on_unusable.value,
                                  request_timeout=request_timeout)
    if grounding is not None:
        values["grounding"] = grounding.value
    try:
        if resume is not None:  # the run's recorded options; what was typed may only repeat them
            from saag_opt.evaluation.runner import resume_config

            passed = passed_values(ctx, values, command_line_only=True)
            config = resume_config(resume, passed)
        else:
            passed = passed_values(ctx, values)
            config = EvaluateConfig(**values)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError.from_validation(exc) from exc
    console = Console()
    if dry_run:
        from saag_opt.evaluation.runner import preflight
        from saag_opt.report.estimate_tables import print_estimate

        print_estimate(console, preflight(config).to_dict())
        return
    with EvaluateProgress(Console(stderr=True)) as progress:
        from saag_opt.report.live import with_lines  # a line per event where the bar cannot draw (log, pipe)
        result = run_evaluation(config, on_event=with_lines(progress, progress.progress.console), args_passed=passed,
                                resume=resume)
    print_evaluate_report(console, result.summary, str(result.run_dir))
    if json_out is not None:
        write_output(json_out, result.summary.model_dump_json(indent=2) + "\n")


__all__ = ["evaluate"]
