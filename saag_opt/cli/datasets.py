"""``saag-opt datasets list|fetch``: the known datasets, and the download the offline ones need."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from saag_opt.cli.common import OUTPUT

datasets_app = typer.Typer(help="List the known datasets and fetch the ones that need a download.",
                           no_args_is_help=True)


@datasets_app.command("list")
def datasets_list() -> None:
    """List every known dataset, its size and whether it is available offline."""
    from saag_opt.data import list_datasets  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.score_tables import datasets_table  # noqa: PLC0415 - start-up: --help loads no report table

    Console().print(datasets_table(list_datasets()))


class FetchTarget(str, Enum):
    """Datasets that need a download."""

    bfcl = "bfcl"


@datasets_app.command("fetch")
def datasets_fetch(
    name: Annotated[FetchTarget, typer.Argument(help="What to fetch.", show_default=False)],
    cache_dir: Annotated[Optional[Path], typer.Option(
        "--cache-dir", file_okay=False, envvar="SAAG_OPT_CACHE", show_default="the user cache dir",
        rich_help_panel=OUTPUT, help="Where to keep the download.")] = None,
) -> None:
    """Download a dataset for offline use (bfcl: the pinned bfcl-eval wheel, without dependencies)."""
    from saag_opt.data import fetch_bfcl  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    where = fetch_bfcl(cache_dir)
    typer.echo(f"{name.value}: {where}")


__all__ = ["datasets_app"]
