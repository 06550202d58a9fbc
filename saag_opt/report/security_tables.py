"""Terminal tables for ``saag-opt security`` (and the AgentDojo bench, which prints the same ones).

Per suite and attack: utility and attack success rate (ASR) without and with the guard, each with
its 95% Wilson interval, the guard's false alarms and the injected calls it stopped; then the
published defences' numbers (``evaluation.security.PUBLISHED``) and ``--dry-run``'s plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from saag_opt.evaluation.security import BENIGN, PUBLISHED, ArmCell, Rate, SecuritySummary
from saag_opt.report.format import run_footer


def rate_text(rate: Rate | None) -> str:
    """``62.8 [61.5, 64.0]``: the rate and its interval in percent; ``-`` when there is none."""
    if rate is None or rate.rate is None or rate.ci_low is None or rate.ci_high is None:
        return "-"
    return f"{100 * rate.rate:.1f} [{100 * rate.ci_low:.1f}, {100 * rate.ci_high:.1f}]"


def _cells(cell: ArmCell | None, attacked: bool) -> list[str]:
    if cell is None:
        return ["-", "-"] if attacked else ["-"]
    return [rate_text(cell.utility), rate_text(cell.asr)] if attacked else [rate_text(cell.utility)]


def security_rows(summary: SecuritySummary, *, attacked: bool) -> list[list[str]]:
    """The rows of the benign (``attacked`` False) or the under-attack table, as cell texts."""
    rows = []
    for row in summary.rows:
        if (row.attack == BENIGN) == attacked:
            continue
        none, guard = row.arms.get("none"), row.arms.get("guard")
        n = next(iter(row.arms.values())).utility.n if row.arms else 0
        cells = [row.suite] + ([row.attack] if attacked else []) + [str(n)]
        cells += _cells(none, attacked) + _cells(guard, attacked)
        cells += [str(guard.false_alarms) if guard else "-"] + ([str(guard.stopped) if guard else "-"] if attacked else [])
        rows.append(cells)
    return rows


BENIGN_COLUMNS = ("suite", "n", "utility, no guard", "utility, guard", "false alarms")
ATTACK_COLUMNS = ("suite", "attack", "pairs", "utility, no guard", "ASR, no guard", "utility, guard", "ASR, guard",
                  "false alarms", "stopped")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> Table:
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < left else "right")
    for row in rows:
        table.add_row(*row)
    return table


def published_rows() -> list[list[str]]:
    """The published defences' numbers as cell texts (percent; ``-``: not transcribed)."""
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.2f}"

    return [[p.paper, p.defence, p.model, p.attack, pct(p.utility), pct(p.utility_under_attack), pct(p.asr)]
            for p in PUBLISHED]


PUBLISHED_COLUMNS = ("paper", "defence", "model", "attack", "utility", "utility under attack", "ASR")


def published_sources() -> list[str]:
    """``paper: full citation`` once per paper."""
    return [f"{paper}: {source}" for paper, source in dict.fromkeys((p.paper, p.source) for p in PUBLISHED)]


def print_security_report(console: Console, summary: SecuritySummary, run_dir: str | None = None, *,
                          stopped: str | None = None) -> None:
    """The run's tables, the published numbers beside them, and where the run is."""
    console.print(f"{summary.benchmark}; agent: {summary.agent}; guard: {summary.guard}; scored by AgentDojo. "
                  "Rates in percent with 95% Wilson intervals; ASR = attack success rate.")
    benign = security_rows(summary, attacked=False)
    if benign:
        console.print(_table("Utility without attack (user tasks; false alarms = blocked ground-truth calls)",
                             BENIGN_COLUMNS, benign, 1))
    attacked = security_rows(summary, attacked=True)
    if attacked:
        console.print(_table("Under attack (pairs): utility and ASR; stopped = blocked injected calls",
                             ATTACK_COLUMNS, attacked, 2))
    console.print(_table("Published defences (their models and AgentDojo v1; context, not like-for-like)",
                         PUBLISHED_COLUMNS, published_rows(), 4))
    for line in published_sources():
        console.print(f"  {line}", highlight=False)
    if summary.still_succeeding:
        console.print("attacks that still succeed with the guard (pairs): "
                      + ", ".join(f"{k}: {v}" for k, v in summary.still_succeeding.items()))
    if summary.unreachable:
        console.print(f"guarded pairs whose injection task has no ground-truth call (the scripted agent cannot "
                      f"meet them): {summary.unreachable}")
    for line in run_footer("security", run_dir, stopped=stopped, covered="the runs finished so far"):
        console.print(line)


def print_security_plan(console: Console, rows: Sequence[Any], agent: str) -> None:
    """``--dry-run``: the runs per suite and attack and the agent turns a ground-truth run of them takes."""
    table = Table(title=f"security --dry-run: agent {agent} (nothing is run)")
    for column in ("suite", "attack", "runs", "agent turns (ground truth + answer)"):
        table.add_column(column, justify="left" if column in ("suite", "attack") else "right")
    for row in rows:
        table.add_row(row.suite, row.attack, str(row.runs), str(row.agent_turns))
    table.add_section()
    table.add_row("all", "", str(sum(r.runs for r in rows)), str(sum(r.agent_turns for r in rows)))
    console.print(table)


__all__ = ["ATTACK_COLUMNS", "BENIGN_COLUMNS", "PUBLISHED_COLUMNS", "print_security_plan", "print_security_report",
           "published_rows", "published_sources", "rate_text", "security_rows"]
