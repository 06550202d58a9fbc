"""``saag-opt evaluate``: the typer command function the main CLI mounts (``app.command()(evaluate)``).

Thin: flags -> ``EvaluateConfig`` -> ``run_evaluation`` -> ``report.evaluate_tables``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from saag_opt.errors import ConfigError, SaagOptError


def _config_error(exc: Exception) -> ConfigError:
    """A pydantic ValidationError as one line naming the field(s)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        parts = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'config'}: "
                 f"{str(e.get('msg', '')).removeprefix('Value error, ')}" for e in errors()]
        return ConfigError("; ".join(parts))
    return ConfigError(str(exc))


def evaluate(
    ctx: typer.Context,
    base: Annotated[str, typer.Option("--base", envvar="SAAG_OPT_BASE",
                                      help="Base agent model: gpt-4o, local, openai/<m>@URL.")] = "gpt-4o",
    reviewer: Annotated[Optional[str], typer.Option("--reviewer", envvar="SAAG_OPT_REVIEWER",
                                                    help="Reviewer model (needed by rN/sN/gN/gate+).")] = None,
    prompt: Annotated[str, typer.Option("--prompt", help="Reviewer prompt: reviewer@v2, an alias, or a path.")]
    = "reviewer@v2",
    mechanism: Annotated[str, typer.Option("--mechanism", "-m", help="none | binary | saag | rN | sN | gN | "
                                           "gate+rN (experimental).")] = "r2",
    saag_informed: Annotated[bool, typer.Option("--saag-informed", help="Experimental: show the reviewer the "
                                                "gold-free SAAG report.")] = False,
    dataset: Annotated[str, typer.Option("--dataset", "-d", envvar="SAAG_OPT_DATASET", help="Dataset spec.")]
    = "shipped:bfcl",
    split: Annotated[Optional[str], typer.Option("--split", help="train | val | test.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="First N examples.")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, max=64, show_default="4; 1 with a local model",
                                                    help="Concurrent examples.")] = None,
    max_repairs: Annotated[int, typer.Option("--max-repairs", min=0, help="Budget of binary/saag repair.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    fail_on_error: Annotated[Optional[float], typer.Option("--fail-on-error", min=0.0, max=1.0, metavar="RATE",
                                                           help="Fail if more than RATE of examples errored.")]
    = None,
    runs_dir: Annotated[Path, typer.Option("--runs-dir", envvar="SAAG_OPT_RUNS")] = Path("runs"),
    json_out: Annotated[Optional[Path], typer.Option("--json", dir_okay=False, help="Also write summary JSON here.")]
    = None,
) -> None:
    """Run the base agent with and without a reviewer mechanism; print accuracy, help/harm, latency and cost."""
    from rich.console import Console

    from saag_opt.evaluation.runner import EvaluateConfig, run_evaluation
    from saag_opt.report.evaluate_tables import EvaluateProgress, print_evaluate_report

    values: dict[str, Any] = dict(base=base, reviewer=reviewer, prompt=prompt, mechanism=mechanism,
                                  saag_informed=saag_informed, dataset=dataset, split=split, limit=limit,
                                  workers=workers, max_repairs=max_repairs, seed=seed, fail_on_error=fail_on_error,
                                  runs_dir=runs_dir)
    try:
        config = EvaluateConfig(**values)
    except ValueError as exc:
        raise _config_error(exc) from exc
    console = Console()
    with EvaluateProgress(Console(stderr=True)) as progress:
        result = run_evaluation(config, on_event=progress, args_passed=_passed(ctx, values))
    print_evaluate_report(console, result.summary, str(result.run_dir))
    if json_out is not None:
        json_out.write_text(result.summary.model_dump_json(indent=2) + "\n", encoding="utf-8")


def _passed(ctx: typer.Context, values: dict[str, Any]) -> dict[str, Any]:
    """Options set on the command line or through the environment (stored in run.json)."""
    # compared by name: typer vendors click (typer._click), so click.core.ParameterSource never matches
    explicit = {name for name in ctx.params
                if getattr(ctx.get_parameter_source(name), "name", None) in ("COMMANDLINE", "ENVIRONMENT")}
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items() if k in explicit}


def main(argv: list[str] | None = None) -> None:
    """Standalone entry point: a SaagOptError is one stderr line and exit 2."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(evaluate)
    try:
        app(args=argv, prog_name="saag-opt evaluate")
    except SaagOptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()


__all__ = ["evaluate", "main"]
