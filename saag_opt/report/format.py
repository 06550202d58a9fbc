"""Cell formatting shared by every table: one spelling for missing values, rates and ratios."""

from __future__ import annotations

import math
from typing import Any


def pct(value: float | None) -> str:
    """A rate in [0, 1] as a percentage with one decimal; ``-`` when missing."""
    return "-" if value is None else f"{100 * float(value):.1f}"


def delta(before: float | None, after: float | None) -> str:
    """Change in percentage points, green when up, red when down; ``-`` when either is missing."""
    if before is None or after is None:
        return "-"
    diff = 100 * (after - before)
    return f"[green]+{diff:.1f}[/]" if diff > 0 else (f"[red]{diff:.1f}[/]" if diff < 0 else "0.0")


def points(change: float | None) -> str:
    """An accuracy change as signed percentage points (``+2.5 pts``); ``-`` when missing."""
    return "-" if change is None else f"{100 * change:+.1f} pts"


def ci_points(ci: Any) -> str:
    """A (low, high) interval of accuracy changes as ``[-1.0, +4.0] pts``; ``-`` when missing."""
    return "-" if not ci else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] pts"


def is_inf(value: Any) -> bool:
    """Infinite, whether a float or the JSON spelling ``"inf"`` (help/harm ratio when harm = 0)."""
    return value == "inf" or (isinstance(value, float) and math.isinf(value))


def ratio(value: Any) -> str:
    """A benefit-to-risk ratio as ``2.70:1``; ``inf`` when harm is 0, ``-`` when undefined."""
    if value is None:
        return "-"
    return "inf" if is_inf(value) else f"{float(value):.2f}:1"


def cached_reviews(costs: Any) -> str:
    """``cached / all`` reviewer calls of a run's cost snapshot, or ``-``.

    Why it is shown: a reply answered from the LM cache costs nothing and is timed at its original
    call (``lm.latency``); the row tells the reader how much of a run was replayed rather than asked.
    """
    account = ((costs or {}).get("roles") or {}).get("reviewer") if isinstance(costs, dict) else None
    if not account:
        return "-"
    hits = int(account.get("cache_hits", 0))
    return f"{hits} / {int(account.get('calls', 0))}"


def num(value: Any, fmt: str = ".3f") -> str:
    """A plain number; ``inf`` and ``-`` as above."""
    if value is None:
        return "-"
    return "inf" if is_inf(value) else format(float(value), fmt)


def mismatch_warning(prompt: str | None, why: str | None) -> str:
    """A title line when the reviewer run is not the one a GEPA prompt was tuned for (``reviewer_mismatch``)."""
    if not why:
        return ""
    from rich.markup import escape

    return f"\n[bold yellow]WARNING: {escape(prompt or 'the prompt')} was {escape(why)}[/]"


def contamination_warning(prompt: str | None, splits: list[str]) -> str:
    """A second title line when a reviewer prompt was trained or selected on an evaluated split."""
    if not splits:
        return ""
    from rich.markup import escape

    return (f"\n[bold red]WARNING: {escape(prompt or 'the prompt')} was trained or selected on "
            f"{escape(', '.join(splits))}: not a held-out result[/]")
