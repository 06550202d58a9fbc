"""The ``saag-opt`` command line: thin typer commands that parse flags, call one library function and
hand the result to ``saag_opt.report``.

Layout, so later commands slot in without touching the others:

* ``app`` is the root; top-level verbs (``score``, later ``evaluate``, ``optimize``, ``compare``) are
  ``@app.command()`` functions; noun groups (``datasets``, later ``prompts``) are sub-apps added with
  ``app.add_typer``.
* Options shared between commands are ``Annotated`` aliases defined once below (``DatasetOpt``,
  ``JsonOutOpt``); environment variables use the ``SAAG_OPT_`` prefix.
* Heavy modules are imported inside the command bodies so ``saag-opt --help`` stays fast.
* ``main()`` turns any ``SaagOptError`` into one ``error: ...`` line on stderr and exit code 2; any
  other exception keeps its traceback, because that is a bug, not a user mistake.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from saag_opt import __version__
from saag_opt.errors import SaagOptError

__all__ = ["app", "datasets_app", "main"]

EXIT_USER_ERROR = 2
"""Exit code for a SaagOptError and for ``score`` with rejected rows."""

app = typer.Typer(
    name="saag-opt",
    help="Measure and improve the reviewer of a tool-calling LLM agent (SAAG cascade, help/harm, GEPA).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
datasets_app = typer.Typer(help="List the known datasets and fetch the ones that need a download.",
                           no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")

from saag_opt.cli_prompts import prompts_app  # noqa: E402  (its module stays import-light)

app.add_typer(prompts_app, name="prompts")

from saag_opt.cli_evaluate import evaluate  # noqa: E402
from saag_opt.cli_optimize import optimize  # noqa: E402

app.command(name="evaluate")(evaluate)
app.command(name="optimize")(optimize)

DatasetOpt = Annotated[str, typer.Option(
    "--dataset", "-d", envvar="SAAG_OPT_DATASET", show_default=False,
    help="Dataset spec: [bold]shipped:bfcl[/], [bold]bfcl:simple_python[/], [bold]bfcl:non_live[/], or a path "
         "to a BFCL-format .jsonl file. See [bold]saag-opt datasets list[/].")]
JsonOutOpt = Annotated[Optional[Path], typer.Option(
    "--json", metavar="OUT", show_default=False, dir_okay=False,
    help="Write machine-readable results to OUT (JSONL, one row per item) and the summary beside it: "
         "OUT's .jsonl/.json suffix is replaced by .summary.json (scores.jsonl -> scores.summary.json); "
         "any other name gets .summary.json appended.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"saag-opt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    """Measure and improve the reviewer of a tool-calling LLM agent."""


@app.command(help=(
    "Score saved predictions offline: SAAG cascade diagnostics and BFCL ground truth.\n\n"
    "Prints the stage funnel, the stage-conditional metrics and accuracy per category. Bad rows are listed "
    "as file:line messages and skipped; the exit code is then 2 (0 when every row was scored)."))
def score(
    predictions: Annotated[Path, typer.Argument(
        show_default=False, dir_okay=False,
        help="Predictions JSONL, one row per prediction: {id, example_id?, calls: [{name, arguments}]} or "
             "{id, example_id?, text: raw model output}. example_id defaults to id.")],
    dataset: DatasetOpt,
    json_out: JsonOutOpt = None,
) -> None:
    """Score a predictions file against a dataset; exit 2 if any row was rejected."""
    from rich.console import Console

    from saag_opt.data import load_dataset
    from saag_opt.evaluation.score import score_predictions, write_score_json
    from saag_opt.report.tables import print_score_report

    result = score_predictions(predictions, load_dataset(dataset))
    console = Console()
    print_score_report(console, result)
    if json_out is not None:
        rows_path, summary = write_score_json(result, json_out)
        console.print(f"wrote {len(result.rows)} rows to {rows_path} and the summary to {summary}")
    if result.rejections:
        raise typer.Exit(EXIT_USER_ERROR)


@datasets_app.command("list")
def datasets_list() -> None:
    """List every known dataset, its size and whether it is available offline."""
    from rich.console import Console

    from saag_opt.data import list_datasets
    from saag_opt.report.tables import datasets_table

    Console().print(datasets_table(list_datasets()))


class FetchTarget(str, Enum):
    """Datasets that need a download."""

    bfcl = "bfcl"


@datasets_app.command("fetch")
def datasets_fetch(
    name: Annotated[FetchTarget, typer.Argument(help="What to fetch.", show_default=False)],
    cache_dir: Annotated[Optional[Path], typer.Option(
        "--cache-dir", file_okay=False, envvar="SAAG_OPT_CACHE",
        help="Where to keep the download (default: the user cache dir).")] = None,
) -> None:
    """Download a dataset for offline use (bfcl: the pinned bfcl-eval wheel, without dependencies)."""
    from saag_opt.data import fetch_bfcl

    where = fetch_bfcl(cache_dir)
    typer.echo(f"{name.value}: {where}")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one stderr line and exit code 2."""
    # The bundled price map: offline runs must not wait on a network refresh (dspy and litellm read it).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        app(args=argv, prog_name="saag-opt")
    except SaagOptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
