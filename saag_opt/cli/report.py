"""``saag-opt report``: one self-contained HTML page for one or more finished runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from saag_opt.cli.common import OUT_HELP, OUTPUT, output_path

REPORT_HELP = (
    "Write one self-contained HTML report (inline SVG charts, no network) for run directories or "
    "`score --json` outputs.\n\nEvery run already writes report.html into its own directory when it finishes; "
    "use this to redraw one, or to put several runs on one page.")
"""Help text of ``saag-opt report``."""


def report(
    runs: Annotated[list[Path], typer.Argument(
        show_default=False, metavar="RUN_DIR...",
        help="Run directories (runs/<ts>-evaluate, -compare, -optimize, -tune) or a score --json output file.")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", dir_okay=False, show_default="RUN_DIR/report.html for one run, report.html for several",
        rich_help_panel=OUTPUT, help=OUT_HELP)] = None,
) -> None:
    """Render the runs into one HTML file and print its path and size."""
    from saag_opt.report.html import REPORT_NAME, render_report, write_html  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    if out is not None and str(out) == "-":
        typer.echo(render_report(runs), nl=False)
        return
    out = output_path(out, "--out")
    if out is None:
        out = runs[0] / REPORT_NAME if len(runs) == 1 and runs[0].is_dir() else Path(REPORT_NAME)
    path = write_html(render_report(runs), out)
    typer.echo(f"wrote {path} ({path.stat().st_size:,} bytes)")


def write_run_report(run_dir: Path) -> None:
    """``runfiles.on_run_finished`` hook: every finished run gets ``report.html`` (lazy: jinja2 loads on first use)."""
    from saag_opt.report.html import write_report  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    write_report(run_dir)


__all__ = ["REPORT_HELP", "report", "write_run_report"]
