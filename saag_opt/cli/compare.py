"""``saag-opt compare``: two prompt versions or two finished runs, side by side.

Thin: arguments -> ``CompareConfig`` -> ``run_compare`` -> ``report.compare_tables``. Two prompt
references are evaluated now (base calls shared through the cache); two run directories are
compared offline by example id.
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


def compare(
    ctx: typer.Context,
    ref_a: Annotated[Optional[str], typer.Argument(metavar="A", show_default=False,
                                                   help="Prompt reference (reviewer@v1, an alias, a path) or a run "
                                                        "directory (optionally DIR#CONDITION).")] = None,
    ref_b: Annotated[Optional[str], typer.Argument(metavar="B", show_default=False, help="Same kind as A.")] = None,
    base: Annotated[str, typer.Option("--base", envvar="SAAG_OPT_BASE",
                                      help="Base agent model (prompt refs only).")] = "gpt-4o",
    reviewer: Annotated[Optional[str], typer.Option("--reviewer", envvar="SAAG_OPT_REVIEWER",
                                                    help="Reviewer model (prompt refs only).")] = None,
    mechanism: Annotated[str, typer.Option(
        "--mechanism", "-m", help="Review mechanism, e.g. r2, s5, g5, gate+r2 (an unknown name lists them all).")] = "r2",
    grounding: GroundingOpt = None,
    dataset: DatasetOpt = "shipped:bfcl",
    split: SplitOpt = "test",
    limit: LimitOpt = None,
    workers: WorkersOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    max_cost: MaxCostOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    on_unusable: OnUnusableOpt = OnUnusable.approve,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = Path("runs"),
    prompts_dir: StoreOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", metavar="OUT", dir_okay=False,
                                                     help="Also write the full comparison JSON here.")] = None,
) -> None:
    """Compare two reviewer prompt versions (evaluated now) or two finished runs (no LM calls), side by side.

    [bold]--resume RUN_DIR[/] (no A, B needed) continues a stopped or interrupted comparison of two prompt versions.
    """
    json_out = output_path(json_out)
    from rich.console import Console

    from saag_opt.evaluation.compare import CompareConfig, detect_mode, run_compare
    from saag_opt.evaluation.runner import EvaluateConfig
    from saag_opt.report.compare_tables import print_compare_report
    from saag_opt.report.evaluate_tables import EvaluateProgress

    values: dict[str, Any] = dict(base=base, reviewer=reviewer, mechanism=mechanism, dataset=dataset,
                                  split=split_filter(split), limit=limit, workers=workers, seed=seed,
                                  runs_dir=runs_dir, prompts_dir=prompts_dir, max_cost=max_cost,
                                  on_unusable=on_unusable.value, request_timeout=request_timeout)
    if grounding is not None:
        values["grounding"] = grounding.value
    refs = {k: v for k, v in (("ref_a", ref_a), ("ref_b", ref_b)) if v is not None}
    try:
        if resume is not None:  # the run's recorded options and prompts; what was typed may only repeat them
            from saag_opt.evaluation.compare import resume_compare_config

            passed = passed_values(ctx, values | refs, command_line_only=True)
            config = resume_compare_config(resume, passed)
        elif ref_a is None or ref_b is None:
            raise ConfigError("compare needs A and B (two prompt references or two run directories), "
                              "or --resume RUN_DIR")
        else:  # model options matter only when prompts are evaluated now; two runs need none of them
            passed = passed_values(ctx, values | refs)
            settings = EvaluateConfig(**values) if detect_mode(ref_a, ref_b)[0] == "prompts" else None
            config = CompareConfig(a=ref_a, b=ref_b, evaluation=settings, runs_dir=runs_dir, seed=seed)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError.from_validation(exc) from exc
    console = Console()
    if dry_run:
        from saag_opt.evaluation.compare import preflight_compare
        from saag_opt.report.estimate_tables import print_estimate

        print_estimate(console, preflight_compare(config).to_dict())
        return
    with EvaluateProgress(Console(stderr=True)) as progress:
        from saag_opt.report.live import with_lines  # a line per event where the bar cannot draw (log, pipe)
        result = run_compare(config, on_event=with_lines(progress, progress.progress.console, "compare"),
                             args_passed=passed, resume=resume)
    print_compare_report(console, result.summary, str(result.run_dir))
    if json_out is not None:
        write_output(json_out, result.summary.model_dump_json(indent=2) + "\n")
        console.print(f"wrote the comparison to {json_out}")


__all__ = ["compare"]
