"""The ``--dry-run`` table: expected LM calls, tokens and dollars per role, before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def estimate_table(estimate: Mapping[str, Any]) -> Table:
    """One row per role and a total row, from ``Estimate.to_dict()``."""
    table = Table(title=f"Pre-flight estimate: {escape(str(estimate['command']))} "
                        f"({estimate['examples']} examples; nothing was run)")
    for name in ("role", "model", "calls", "prompt tokens", "completion tokens", "$"):
        table.add_column(name, justify="left" if name in ("role", "model") else "right")
    roles = dict(estimate.get("roles") or {})
    total = roles.pop("total", None)
    for role, row in roles.items():
        table.add_row(escape(role), escape(str(row.get("model") or "")), str(row["calls"]), str(row["prompt_tokens"]),
                      str(row["completion_tokens"]), f"{row['dollars']:.4f}")
    if total is not None:
        table.add_section()
        table.add_row("[bold]total[/]", "", str(total["calls"]), str(total["prompt_tokens"]),
                      str(total["completion_tokens"]), f"{total['dollars']:.4f}")
    return table


def print_estimate(console: Console, estimate: Mapping[str, Any]) -> None:
    """The table, its assumptions, and how to bound the real spend."""
    console.print(estimate_table(estimate))
    for note in estimate.get("assumptions") or ():
        console.print(f"[dim]assumes {escape(str(note))}[/]")
    console.print("an estimate, not a bound: --max-cost USD caps the real spend (no call that could pass it is sent)")


__all__ = ["estimate_table", "print_estimate"]
