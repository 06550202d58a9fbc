"""Terminal output of ``saag-opt tune``.

While it runs: a live bar (trials done / budget, spend against ``--max-cost``, the current front)
on a terminal, and one line per finished trial, test evaluation or stop everywhere, the progress
repeated on each line where no bar can draw. Then the trials table, the feasible Pareto front and
its TEST re-evaluation against the base agent alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from saag_opt.report.format import ci_points, pct, ratio
from saag_opt.report.live import print_line, start_bar, stop_bar
from saag_opt.tune.results import format_params

if TYPE_CHECKING:
    from saag_opt.events import RunEvent
    from saag_opt.tune.results import TestResult, TrialRow, TuneSummary


_PERCENT = ("help", "harm", "accuracy", "net_change")
"""Metrics ``_value`` shows as percentages."""


def _value(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name.startswith("cost"):
        return f"${value:.4g}"
    if name in _PERCENT:
        return pct(value)
    return f"{value:.3g}"


FRONT_SHOWN = 3
"""Front points named on the bar and on each line (the rest are counted)."""


def progress_status(data: dict[str, Any]) -> str:
    """``$0.0123 of $0.50  front 2: #3 help 50% harm 0%; #5 help 40% harm 0%`` from a tune event's data."""
    spent, cap = data.get("spent"), data.get("max_cost")
    money = "" if spent is None else f"${spent:.4f}" + (f" of ${cap:g}" if cap is not None else "")
    front = list(data.get("front") or [])
    points = []
    for point in front[:FRONT_SHOWN]:
        values = point.get("values") or {}
        points.append(f"#{point['number']} " + " ".join(f"{n} {_value(n, v)}{'%' if n in _PERCENT else ''}"
                                                        for n, v in values.items()))
    more = f"; +{len(front) - FRONT_SHOWN} more" if len(front) > FRONT_SHOWN else ""
    return "  ".join(p for p in (money, f"front {len(front)}" + (": " + "; ".join(points) + more if points else ""))
                     if p)


class TuneProgress:
    """The ``on_event`` sink of ``run_tune`` in the CLI (use as a context manager).

    On a terminal a bar shows trials done / budget, spend and the front, and each finished trial is
    a line above it; elsewhere (a log, a pipe) each event is one line, the progress on it.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("tune"), BarColumn(), MofNCompleteColumn(), TextColumn("trials"),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console,
                                 transient=True)
        self.task: Any = None

    def __enter__(self) -> TuneProgress:
        start_bar(self.progress)  # on a terminal only
        return self

    def __exit__(self, *exc: object) -> None:
        stop_bar(self.progress)

    def __call__(self, event: RunEvent) -> None:
        """Update the bar and print the event's line."""
        data = event.data
        if "done" in data:
            status = progress_status(data)
            if self.task is None:
                self.task = self.progress.add_task("tune", total=data.get("budget"), completed=data["done"],
                                                   status=status)
            self.progress.update(self.task, total=data.get("budget"), completed=data["done"], status=status)
        if event.kind not in ("trial_finished", "stage", "stopped", "warning"):
            return
        line = event.message
        if not self.console.is_terminal and "done" in data:
            budget = data.get("budget")
            line += f"  [{data['done']}/{budget if budget is not None else '?'} trials  {progress_status(data)}]"
        print_line(self.console, line)


def trials_table(rows: list[TrialRow], objectives: list[str]) -> Table:
    """Every trial: configuration, objective values, feasibility, Pareto flag."""
    table = Table(title=f"Trials ({len(rows)})")
    for col in ("#", "state", "configuration", *objectives, "feasible", "pareto", "note"):
        table.add_column(col, justify="right" if col in objectives or col == "#" else "left")
    for row in rows:
        note = (f"repeat of {row.duplicate_of}" if row.duplicate_of is not None else
                f"retry of {row.retry_of}" if row.retry_of is not None else (row.error or "")[:60])
        values = row.values or {}
        table.add_row(str(row.number), row.state, escape(format_params(row.params)),
                      *(_value(o, values.get(o)) for o in objectives),
                      "-" if row.feasible is None else ("yes" if row.feasible else "[red]no[/]"),
                      "[bold green]*[/]" if row.pareto else "", escape(note))
    return table


def test_table(results: list[TestResult]) -> Table:
    """The Pareto set on the TEST split: accuracy vs base, help, harm, ratio, p, CI, cost, latency."""
    table = Table(title="Pareto front re-evaluated on TEST (never seen by a trial)")
    for col in ("trial", "configuration", "n", "base %", "reviewed %", "help %", "harm %", "ratio", "McNemar p",
                "95% CI", "$ / item", "overhead"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for res in results:
        if res.summary is None:
            table.add_row(str(res.trial), escape(format_params(res.params)), "", f"[red]{escape(res.error or '')}[/]")
            continue
        s, hh = res.summary, res.summary.help_harm
        lat = s.latency.overhead_x
        table.add_row(str(res.trial), escape(format_params(res.params)), str(s.n_items), pct(s.base.accuracy),
                      pct(s.reviewed.accuracy), pct(hh.helpfulness), pct(hh.harmfulness),
                      ratio(hh.ratio), f"{hh.p_value:.3g}", ci_points(hh.net_change_ci95),
                      f"{res.metrics.get('cost_per_item_usd', 0.0):.4g}", "-" if lat is None else f"{lat:.1f}x")
    return table


def category_table(results: list[TestResult]) -> Table | None:
    """Accuracy per category on test: the base agent, then each Pareto configuration."""
    done = [r for r in results if r.summary is not None]
    if not done:
        return None
    table = Table(title="TEST accuracy per category (%)")
    table.add_column("category")
    table.add_column("base", justify="right")
    for res in done:
        table.add_column(f"trial {res.trial}", justify="right")
    base = done[0].summary.base.categories  # type: ignore[union-attr]
    for cat, score in base.items():
        cells = [pct(r.summary.reviewed.categories[cat].accuracy) if cat in r.summary.reviewed.categories else "-"  # type: ignore[union-attr]
                 for r in done]
        table.add_row(escape(cat), pct(score.accuracy), *cells)
    return table


def print_tune_report(console: Console, rows: list[TrialRow], summary: TuneSummary | None, objectives: list[str],
                      run_dir: str, role: str, study: str) -> None:
    """Trials, the Pareto front and the test tables (coordinator), or a worker's note."""
    console.print(trials_table(rows, objectives))
    if summary is None:
        console.print(f"Joined study {escape(study)} as a worker; the process that created it reports the "
                      f"Pareto front. Trials: {escape(run_dir)}/trials.jsonl")
        return
    states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(summary.states.items()))
    console.print(f"{states}; {summary.distinct_configs} distinct configurations, {summary.duplicates} repeats "
                  f"answered from stored results, {summary.retries} retries of dead workers' trials.")
    if not summary.pareto:
        console.print("[yellow]No feasible trial: the Pareto front is empty (loosen [constraints]?).[/]")
    if summary.test:
        console.print(test_table(summary.test))
        per_category = category_table(summary.test)
        if per_category is not None:
            console.print(per_category)
    elif summary.test_skipped:
        console.print("Test re-evaluation skipped (--no-test).")
    if summary.stopped:
        console.print(f"[yellow]Stopped: {escape(summary.stopped)}[/] (spent ${summary.spent or 0.0:.4f}; "
                      f"--resume {escape(run_dir)})")
    console.print(f"Run directory: {escape(run_dir)} (study {escape(study)}, storage {escape(summary.storage)})")


__all__ = ["FRONT_SHOWN", "TuneProgress", "category_table", "print_tune_report", "progress_status", "test_table",
           "trials_table"]
