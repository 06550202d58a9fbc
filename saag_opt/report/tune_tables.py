"""Terminal output of ``saag-opt tune``.

One line per finished trial while it runs, then the trials table, the feasible Pareto front and its
TEST re-evaluation against the base agent alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from saag_opt.report.format import ci_points, pct, ratio
from saag_opt.tune.results import format_params

if TYPE_CHECKING:
    from saag_opt.events import RunEvent
    from saag_opt.tune.results import TestResult, TrialRow, TuneSummary


def _value(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name.startswith("cost"):
        return f"${value:.4g}"
    if name in ("help", "harm", "accuracy", "net_change"):
        return pct(value)
    return f"{value:.3g}"


class TrialPrinter:
    """Prints each ``trial_finished`` event as one line (the ``on_event`` sink of ``run_tune``)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, event: RunEvent) -> None:
        """Print a finished trial; other events are not shown."""
        if event.kind == "trial_finished":
            self.console.print(escape(event.message), highlight=False)


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
        table.add_row(str(res.trial), escape(format_params(res.params)), str(s.n_examples), pct(s.base.accuracy),
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
    console.print(f"Run directory: {escape(run_dir)} (study {escape(study)}, storage {escape(summary.storage)})")


__all__ = ["TrialPrinter", "category_table", "print_tune_report", "test_table", "trials_table"]
