"""The ``--dry-run`` table of every verb: expected LM calls, tokens and dollars per role, before anything runs.

It renders ``evaluation.estimate.Estimate.to_dict()``: a row per role and a total row; an estimate
with ``parts`` (security: one per suite and attack) first shows each part's rows, then the roles
added up. A role whose model has no known price shows ``unknown``, never $0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

COLUMNS = ("role", "model", "calls", "prompt tokens", "completion tokens", "$")


def estimate_table(estimate: Mapping[str, Any]) -> Table:
    """One row per role and a total row (per part first, when the estimate has parts)."""
    unit = str(estimate.get("unit") or "examples")
    table = Table(title=f"Pre-flight estimate: {escape(str(estimate['command']))} "
                        f"({estimate['examples']} {escape(unit)}; nothing was run)")
    parts: Mapping[str, Any] = estimate.get("parts") or {}
    for name in (("part", unit) if parts else ()) + COLUMNS:
        table.add_column(name, justify="left" if name in ("part", "role", "model") else "right")
    for label, part in parts.items():
        rows = _role_rows(part) or [["", "", "0", "0", "0", _dollars(0.0)]]
        for index, row in enumerate(rows):
            table.add_row(*([escape(label), str(part["examples"])] if index == 0 else ["", ""]), *row)
    if parts:
        table.add_section()
    lead = ["all", str(estimate["examples"])] if parts else []
    for index, row in enumerate(_role_rows(estimate)):
        table.add_row(*(lead if index == 0 else ["", ""] if parts else []), *row)
    total = (estimate.get("roles") or {}).get("total")
    if total is not None:
        table.add_section()
        table.add_row(*(["", ""] if parts else []), "[bold]total[/]", "", *_numbers(total))
    return table


def _role_rows(estimate: Mapping[str, Any]) -> list[list[str]]:
    return [[escape(role), escape(str(row.get("model") or "")), *_numbers(row)]
            for role, row in (estimate.get("roles") or {}).items() if role != "total"]


def _numbers(row: Mapping[str, Any]) -> list[str]:
    return [str(row["calls"]), str(row["prompt_tokens"]), str(row["completion_tokens"]), _dollars(row.get("dollars"))]


def _dollars(value: float | None) -> str:
    """Four decimals; ``unknown`` for a model without a known price."""
    return "unknown" if value is None else f"{value:.4f}"


def print_estimate(console: Console, estimate: Mapping[str, Any]) -> None:
    """The table, its assumptions, and how to bound the real spend."""
    console.print(estimate_table(estimate))
    for note in estimate.get("assumptions") or ():
        console.print(f"[dim]assumes {escape(str(note))}[/]")
    console.print("an estimate, not a bound: --max-cost USD caps the real spend (no call that could pass it is sent)")


__all__ = ["estimate_table", "print_estimate"]
