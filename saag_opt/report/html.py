"""The self-contained HTML report: one file, inline SVG charts, embedded JSON, plain JavaScript.

``render_report(paths)`` turns run directories (or ``score --json`` outputs) into one HTML string;
``write_report(run_dir)`` writes ``<run_dir>/report.html`` atomically, which is what every run does
when it finishes (the CLI registers it with ``runfiles.on_run_finished``). The page loads nothing
from the network: styles, script and data are inline, charts are SVG drawn by jinja2 macros from
``saag_opt.report.charts`` geometry, and the data is JSON inside ``<script type="application/json">``
(escaped by jinja2's ``tojson``, so ``</script>`` in a query cannot end the block). Tables are real
tables, so the page reads without JavaScript and prints.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import jinja2

from saag_opt import __version__
from saag_opt.atomic import atomic_write_text
from saag_opt.errors import RunError
from saag_opt.report.pages import Part, build_part

REPORT_NAME = "report.html"
"""File name of the report inside a run directory."""


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("saag_opt.report", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    # ``tojson`` escapes < > & ' (so no "</script>" can end the data block); compact and UTF-8 keep
    # a 1,000-example run under 1 MB.
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "ensure_ascii": False}
    return env


def render_parts(parts: Sequence[Part], *, title: str | None = None) -> str:
    """The HTML page for already-built parts."""
    template = _environment().get_template("report.html.j2")
    return template.render(parts=parts, title=title or (parts[0].title if len(parts) == 1 else
                                                       f"saag-opt report: {len(parts)} runs"),
                           generated=datetime.now(timezone.utc).isoformat(timespec="seconds"), version=__version__,
                           data={"runs": [p.data for p in parts]})


def render_report(paths: Sequence[str | os.PathLike[str]]) -> str:
    """One page for one or more run directories / score outputs.

    Raises:
        RunError: a path is not a run directory or score output, or its files cannot be read.
    """
    if not paths:
        raise RunError("give at least one run directory")
    return render_parts([build_part(Path(p), i) for i, p in enumerate(paths)])


def write_html(html: str, out: str | os.PathLike[str]) -> Path:
    """Write ``html`` to ``out`` atomically, like every other run file (``atomic.atomic_write_text``).

    Raises:
        RunError: the file cannot be written.
    """
    out = Path(out)
    try:
        atomic_write_text(out, html)
    except OSError as exc:
        raise RunError(f"{out}: cannot write the report: {exc.strerror or exc}") from exc
    return out


def write_report(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Render one run and write ``<run_dir>/report.html`` (or ``out``); returns the path.

    Raises:
        RunError: unreadable run files, or the report cannot be written.
    """
    run_dir = Path(run_dir)
    target = Path(out) if out is not None else (run_dir if run_dir.is_dir() else run_dir.parent) / (
        REPORT_NAME if run_dir.is_dir() else _score_report_name(run_dir))
    return write_html(render_report([run_dir]), target)


def _score_report_name(path: Path) -> str:
    """``scores.jsonl`` -> ``scores.report.html`` (beside a ``score --json`` output)."""
    name = path.name.removesuffix(".summary.json")
    for suffix in (".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return f"{name}.report.html"


__all__ = ["REPORT_NAME", "render_parts", "render_report", "write_html", "write_report"]
