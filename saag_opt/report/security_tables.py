"""Terminal tables for ``saag-opt security`` (and the AgentDojo bench, which prints the same ones).

Per suite and attack: utility and attack success rate (ASR) without and with the guard, each with
its 95% Wilson interval, the guard's false alarms and the injected calls it stopped; then the
published defences' numbers (``security.records.PUBLISHED``). ``--dry-run`` prints every verb's
estimate table (``report.estimate_tables``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from saag_opt.report.format import run_footer
from saag_opt.report.live import print_line, start_bar, stop_bar
from saag_opt.security.records import ALL, BENIGN, PUBLISHED, ArmCell, Rate, SecuritySummary


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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def published_rows() -> list[list[str]]:
    """The published defences' numbers as cell texts (percent; ``-``: not transcribed)."""
    return [[p.paper, p.defence, p.model, p.attack, _pct(p.utility), _pct(p.utility_under_attack), _pct(p.asr)]
            for p in PUBLISHED]


ARM_DEFENCES = {"none": "no defence", "guard": "saag-opt runtime guard"}
"""How this run's arms read in the published table's ``defence`` column."""


def run_rows(summary: SecuritySummary) -> list[list[str]]:
    """This run's numbers in the published table's columns: per attack, each arm over every suite it ran.

    The rates are the ones of the tables above (``-`` where the run has none, e.g. no runs without attack).
    """
    suites = list(dict.fromkeys(r.suite for r in summary.rows if r.suite != ALL))
    scope = ALL if len(suites) > 1 else (suites[0] if suites else ALL)
    label = f"this run ({', '.join(suites)})"
    benign = summary.row(scope, BENIGN)
    attacks = list(dict.fromkeys(r.attack for r in summary.rows if r.suite == scope and r.attack not in (BENIGN, ALL)))
    rows = []
    for attack in attacks or [BENIGN]:
        row = summary.row(scope, attack) if attack != BENIGN else None
        for arm, defence in ARM_DEFENCES.items():
            clean = benign.arms.get(arm) if benign is not None else None
            cell = row.arms.get(arm) if row is not None else None
            if clean is None and cell is None:
                continue
            rows.append([label, defence, summary.agent, attack if row is not None else "-",
                         _pct(clean.utility.rate if clean else None), _pct(cell.utility.rate if cell else None),
                         _pct(cell.asr.rate if cell and cell.asr else None)])
    return rows


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
    console.print(_table("This run beside the published defences (theirs: their models and AgentDojo v1; context, "
                         "not like-for-like)", PUBLISHED_COLUMNS, run_rows(summary) + published_rows(), 4))
    for line in published_sources():
        console.print(f"  {line}", highlight=False)
    if summary.still_succeeding:
        console.print("attacks that still succeed with the guard (pairs): "
                      + ", ".join(f"{k}: {v}" for k, v in summary.still_succeeding.items()))
    if summary.unreachable:
        console.print(f"guarded pairs whose injection task has no ground-truth call (the scripted agent cannot "
                      f"meet them): {summary.unreachable}")
    if summary.excepted:
        console.print(f"guarded attack successes through the counted exception (the user's request hands the task "
                      f"over to tool text; part of the ASR above): {summary.excepted}")
    for line in run_footer("security", run_dir, stopped=stopped, covered="the runs finished so far"):
        console.print(line)


class SecurityProgress:
    """The runs and the spend (of the cap): a live bar on a terminal, else log lines.

    A line per suite and attack and every ``EVERY`` runs (a full run is ~11,000). Call it with each
    record and the dollars spent so far (``run_security``'s ``on_run``): agent and reviewer together.
    ``priced`` False (the scripted agent and ``Guard()``: no model) leaves the spend out.
    """

    EVERY = 200

    def __init__(self, console: Console, total: int, max_cost: float | None = None, *, priced: bool = True) -> None:
        self.console, self.count, self.max_cost, self.priced = console, 0, max_cost, priced
        self.group: tuple[str, str] | None = None
        self.progress = Progress(TextColumn("security"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                                 TimeElapsedColumn(), TextColumn("{task.fields[spend]}"), console=console,
                                 transient=True)
        self.task = self.progress.add_task("security", total=total, spend="")

    def __enter__(self) -> SecurityProgress:
        start_bar(self.progress)  # on a terminal only
        return self

    def __exit__(self, *exc: object) -> None:
        stop_bar(self.progress)

    def start(self, done: int) -> None:
        """The runs an earlier attempt finished (a resume): the bar starts there."""
        self.count = done
        self.progress.update(self.task, completed=done)

    def spend_text(self, spent: float) -> str:
        """``$0.0123`` or ``$0.0123 of $0.50``."""
        return f"${spent:.4f}" + (f" of ${self.max_cost:g}" if self.max_cost is not None else "")

    def __call__(self, record: Any, spent: float) -> None:
        """One run finished."""
        self.count += 1
        group = (record.suite, record.attack or "no attack")
        spend = f"; spent {self.spend_text(spent)}" if self.priced else ""
        if self.progress.live.is_started:
            self.progress.update(self.task, advance=1, spend=f"{group[0]}, {group[1]}{spend}")
        elif group != self.group or self.count % self.EVERY == 0:
            print_line(self.console, f"{self.count} runs; now {group[0]}, {group[1]}{spend}")
        self.group = group


__all__ = ["ARM_DEFENCES", "SecurityProgress", "ATTACK_COLUMNS", "BENIGN_COLUMNS", "PUBLISHED_COLUMNS",
           "print_security_report", "published_rows", "published_sources", "rate_text", "run_rows", "security_rows"]
