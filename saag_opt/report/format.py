"""Cell formatting shared by every table: one spelling for missing values, rates and ratios.

Also the lines every report ends with (``run_footer``) and the command that continues a run
(``resume_command``), so evaluate, compare, optimize and the CLI's error lines say it the same way.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from rich.markup import escape

from saag_opt.runfiles import read_header


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


def stars(p: float | None) -> str:
    """Significance marks of a (Holm-adjusted) p: ``***`` < 0.001, ``**`` < 0.01, ``*`` < 0.05, else ``""``."""
    if p is None:
        return ""
    return next((mark for bound, mark in ((0.001, "***"), (0.01, "**"), (0.05, "*")) if p < bound), "")


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


def first_change(lines: list[str], limit: int = 60) -> str:
    """A candidate's edit in one cell: its first change on one line, clipped, then how many more."""
    if not lines:
        return "-"
    text = " ".join(lines[0].split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")


def flips(gained: int | None, lost: int | None) -> str:
    """``+gained -lost`` (examples won and lost against a reference); ``-`` when not counted."""
    return "-" if gained is None or lost is None else f"+{gained} -{lost}"


def num(value: Any, fmt: str = ".3f") -> str:
    """A plain number; ``inf`` and ``-`` as above."""
    if value is None:
        return "-"
    return "inf" if is_inf(value) else format(float(value), fmt)


def mismatch_warning(prompt: str | None, why: str | None) -> str:
    """A title line when the reviewer run is not the one a GEPA prompt was tuned for (``reviewer_mismatch``)."""
    if not why:
        return ""
    return f"\n[bold yellow]WARNING: {escape(prompt or 'the prompt')} was {escape(why)}[/]"


def contamination_warning(prompt: str | None, splits: list[str]) -> str:
    """A second title line when a reviewer prompt was trained or selected on an evaluated split."""
    if not splits:
        return ""
    return (f"\n[bold red]WARNING: {escape(prompt or 'the prompt')} was trained or selected on "
            f"{escape(', '.join(splits))}: not a held-out result[/]")


COMMAND_OF_VERB = {"evaluate-multiturn": "evaluate"}
"""Run kinds (run.json's ``verb``) that another command writes: a multi-turn evaluate is ``saag-opt evaluate``.

The key is ``evaluation.conversation_records.VERB``, spelled out because importing it would load the evaluation models
(~90 modules) wherever a resume hint is printed; tests/report/test_progress_lines.py pins the two together."""


def resume_command(run_dir: str | os.PathLike[str], verb: str | None = None) -> str:
    """``saag-opt VERB --resume RUN_DIR``: the command that continues a stopped or interrupted run.

    ``verb``: the run's command, read from its ``run.json`` when not given (a tune run also needs
    its space file again).

    Raises:
        RunError: ``verb`` not given and ``run.json`` missing or unreadable.
    """
    verb = verb or read_header(Path(run_dir)).verb
    space = " --space SPACE.toml" if verb == "tune" else ""
    return f"saag-opt {COMMAND_OF_VERB.get(verb, verb)}{space} --resume {run_dir}"


def run_footer(verb: str, run_dir: str | os.PathLike[str] | None, *, stopped: str | None = None,
               covered: str = "") -> list[str]:
    """The lines a report ends with: why the run stopped early and how to continue it, then where it is.

    ``covered`` says what the tables above cover when the run stopped early.
    """
    lines = []
    if stopped:
        lines.append(f"[yellow]stopped early:[/] {escape(stopped)}" + (f" ({covered})" if covered else ""))
        if run_dir is not None:
            lines.append(f"continue it: {escape(resume_command(run_dir, verb))} --max-cost <higher>")
    if run_dir is not None:
        lines.append(f"run directory: {escape(str(run_dir))}")
    return lines
