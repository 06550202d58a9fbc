"""The pieces every page part is made of: ``Part``, tables and cell formats.

Runs are read through ``runfiles.read_run`` (typed, the same models the terminal tables print);
``read_jsonl`` is left for ``score --json`` rows, whose older files predate their model's fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saag_opt.errors import RunError
from saag_opt.runfiles import RunHeader, read_run_jsonl


@dataclass
class Part:
    """One run's share of the page."""

    kind: str
    title: str
    anchor: str
    meta: list[tuple[str, str]] = field(default_factory=list)
    links: list[tuple[str, str, str]] = field(default_factory=list)
    """``(key, href, text)``: entries of the key/value list that link to a file (a tune study's storage)."""
    notes: list[str] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL run file ([] when absent).

    Raises:
        RunError: a line that is not a JSON object (file:line).
    """
    if not path.is_file():
        return []
    rows = []
    for line, row in read_run_jsonl(path):
        if not isinstance(row, dict):
            raise RunError(f"{path}:{line}: expected a JSON object")
        rows.append(row)
    return rows


def header_meta(header: RunHeader) -> list[tuple[str, str]]:
    """The run's identity for the page's key/value list: id, verb, status, times, models, dataset, git."""
    rows = [("run", header.run_id), ("command", header.verb), ("status", header.status),
            ("started", header.created), ("finished", header.finished or "-")]
    rows += [(f"{role} model", spec) for role, spec in header.models.items()]
    dataset = header.dataset
    if dataset:
        rows.append(("dataset", ", ".join(f"{k}={v}" for k, v in dataset.items() if v is not None and k != "ids_hash")))
    if header.git_revision:
        rows.append(("git revision", header.git_revision[:12]))
    return rows


def new_part(kind: str, title: str, index: int) -> Part:
    """An empty part whose anchors are unique on a page of several runs (``run<index>``)."""
    return Part(kind=kind, title=title, anchor=f"run{index}")


def table(caption: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
           numeric: Sequence[int] = ()) -> dict[str, Any]:
    """A real HTML table's data: caption, header, rows of cell texts, right-aligned ``numeric`` columns."""
    return {"caption": caption, "columns": list(columns), "rows": [[cell(c) for c in r] for r in rows],
            "numeric": set(numeric)}


def cell(value: Any) -> str:
    """One table cell's text (``-`` for missing, floats to three decimals)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def append(part: Part, section: dict[str, Any] | None) -> None:
    """Add a section that has data (builders return None when a run lacks it)."""
    if section is not None:
        part.sections.append(section)


def share(part: int, whole: int) -> str:
    """``part / whole`` in percent with one decimal; ``-`` when ``whole`` is 0."""
    return f"{100 * part / whole:.1f}" if whole else "-"


def num(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` decimals; ``-`` when missing."""
    return "-" if value is None else f"{float(value):.{digits}f}"


def sec(value: Any) -> str:
    """Seconds with two decimals; ``-`` when missing."""
    return "-" if value is None else f"{float(value):.2f}"


def times(value: Any) -> str:
    """A ratio as ``2.50x`` (latency overhead); ``-`` when missing."""
    return "-" if value is None else f"{float(value):.2f}x"


def p_value(value: Any) -> str:
    """A p-value with three significant digits; ``-`` when missing."""
    return "-" if value is None else f"{float(value):.3g}"


def rate_ci(ci: Any) -> str:
    """A rate's CI in percent (accuracy *changes* use ``format.ci_points``)."""
    if not ci or ci[0] is None or ci[1] is None:
        return "-"
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def usd(value: Any) -> str:
    """Dollars with five decimals (per-item costs are fractions of a cent); ``-`` when missing."""
    return "-" if value is None else f"{float(value):.5f}"


def param_text(value: Any) -> str:
    """A searched parameter's value as text (floats to three significant digits)."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
