"""Terminal tables for ``saag-opt compare``.

Base vs A vs B accuracy, help/harm per version, the paired A-vs-B test, and latency/cost per
version. Rich lives here and in the CLI only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from saag_opt.report.format import (
    cached_reviews,
    ci_points,
    contamination_warning,
    delta,
    mismatch_warning,
    num,
    pct,
    points,
    run_footer,
)
from saag_opt.report.helpharm_rows import helpharm_table

if TYPE_CHECKING:
    from saag_opt.evaluation.comparison import CompareSummary, SideSummary


def legend(summary: CompareSummary) -> str:
    """``A = ...  B = ...`` with mechanism and source, for the line above the tables."""
    def one(side: SideSummary) -> str:
        where = side.source.get("ref") or side.source.get("prompt") or side.source.get("run_dir") or side.label
        return f"[bold]{side.key.upper()}[/] = {escape(side.label)} ({escape(side.mechanism)}; {escape(str(where))})"

    matched = f"{summary.matched} matched example(s)"
    if summary.mode == "runs":
        matched += f"; only in A: {summary.only_a}, only in B: {summary.only_b}"
    return f"{one(summary.a)}\n{one(summary.b)}\n{matched}"


def accuracy_table(summary: CompareSummary, *, title: str = "Accuracy: base vs A vs B", a: str = "A",
                   b: str = "B") -> Table:
    """Per-category accuracy (%): base alone, A, B and B - A, plus suite rows (``a``/``b`` name the columns)."""
    base, acc_a, acc_b = summary.base, summary.a.accuracy, summary.b.accuracy
    warnings = "".join(contamination_warning(f"{name} ({side.label}{_prompt_of(side)})", side.contaminated)
                       + mismatch_warning(f"{name} ({side.label})", side.reviewer_mismatch)
                       for side, name in ((summary.a, a), (summary.b, b)))
    table = Table(title=title + warnings)
    for col in ("category", "n", "base %", f"{a} %", f"{b} %", f"{b} - {a}"):
        table.add_column(col, justify="left" if col == "category" else "right")
    for cat in sorted(set(base.categories) | set(acc_a.categories) | set(acc_b.categories)):
        cells = [s.categories.get(cat) for s in (base, acc_a, acc_b)]
        acc = [c.accuracy if c else None for c in cells]
        n = next((c.n for c in cells if c is not None), 0)
        table.add_row(escape(cat), str(n), pct(acc[0]), pct(acc[1]), pct(acc[2]), delta(acc[1], acc[2]))
    suites = [s.relevance_suite.mean if s.relevance_suite else None for s in (base, acc_a, acc_b)]
    complete = bool(base.relevance_suite and base.relevance_suite.complete)
    table.add_section()
    table.add_row("relevance suite" + ("" if complete else " (partial)"), "", *map(pct, suites),
                  delta(suites[1], suites[2]))
    irr = [base.irrelevance, acc_a.irrelevance, acc_b.irrelevance]
    table.add_row("irrelevance", "", *map(pct, irr), delta(irr[1], irr[2]))
    overall = [base.accuracy, acc_a.accuracy, acc_b.accuracy]
    table.add_row("[bold]overall[/]", str(base.n), *map(pct, overall), delta(overall[1], overall[2]))
    return table


def _prompt_of(side: SideSummary) -> str:
    """A finished run's reviewer prompt (runs mode: the label is the run id); prompts mode labels name it."""
    prompt = side.source.get("prompt") if "run_dir" in side.source else None
    return f", prompt {prompt}" if prompt else ""


def versions_helpharm_table(summary: CompareSummary, *, title: str = "Help / harm vs base (paired, examples "
                            "without errors)", a: str = "A", b: str = "B") -> Table:
    """Each version against the base agent alone (paired, conditional rates)."""
    return helpharm_table(title, {a: summary.a.help_harm, b: summary.b.help_harm},
                          unusable=[summary.a.accuracy.reviewer_unusable, summary.b.accuracy.reviewer_unusable])


def paired_table(summary: CompareSummary, *, a: str = "A", b: str = "B") -> Table:
    """The A-vs-B 2x2 table, net change B - A, McNemar exact p and the bootstrap CI."""
    p = summary.paired
    table = Table(title=f"{b} vs {a} (paired, n = {p.n})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("both right", str(p.both_right))
    table.add_row(f"only {b} right ({a} wrong -> {b} right)", str(p.b_only_right))
    table.add_row(f"only {a} right ({a} right -> {b} wrong)", str(p.a_only_right))
    table.add_row("both wrong", str(p.both_wrong))
    table.add_section()
    table.add_row(f"net accuracy change {b} - {a}", points(p.net_change))
    table.add_row("bootstrap 95% CI", ci_points(p.net_change_ci95))
    table.add_row("McNemar exact p (discordant pairs)", f"{p.mcnemar_p:.4g}")
    return table


def cost_table(summary: CompareSummary) -> Table:
    """Latency (mean s per example, overhead vs base), reviewer calls, tokens and dollars per version."""
    table = Table(title="Latency and cost per version")
    table.add_column("measure")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    sides = (summary.a, summary.b)
    table.add_row("base s / item", *(num(s.latency.base_mean_seconds, ".2f") for s in sides))
    table.add_row("with review s / item", *(num(s.latency.final_mean_seconds, ".2f") for s in sides))
    table.add_row("latency overhead", *("-" if s.latency.overhead_x is None else f"{s.latency.overhead_x:.1f}x"
                                        for s in sides))
    if any(s.latency.untimed_replays for s in sides):
        table.add_row("latency incomplete: cached replies of unknown original time (counted ~0 s)",
                      *(str(s.latency.untimed_replays) for s in sides))
    table.add_row("reviewer calls / item", *(num(s.reviewer_calls_per_item, ".2f") for s in sides))
    table.add_row("reviews replayed from the LM cache (timed as first asked)", *(cached_reviews(s.costs) for s in sides))
    if any(s.gated_share is not None for s in sides):
        table.add_row("passed by the SAAG gate %", *(pct(s.gated_share) for s in sides))
    table.add_row("tokens (reviews + revisions)", *(str(s.tokens) for s in sides))
    table.add_row("dollars", *(num(s.dollars, ".4f") for s in sides))
    table.add_row("errors", *(str(s.errors) for s in sides))
    return table


def print_compare_report(console: Console, summary: CompareSummary, run_dir: str | None = None) -> None:
    """Everything ``saag-opt compare`` prints."""
    console.print(legend(summary))
    if any(s.gated_share is not None for s in (summary.a, summary.b)):
        console.print("[yellow]experimental:[/] a SAAG gate is in use; treat its numbers as exploratory.")
    console.print(accuracy_table(summary))
    console.print(versions_helpharm_table(summary))
    console.print(paired_table(summary))
    console.print(cost_table(summary))
    base_dollars = (summary.base_costs or {}).get("roles", {}).get("total", {}).get("dollars")
    if base_dollars is not None:
        console.print(f"shared base pass: ${base_dollars:.4f} (paid once for both versions)")
    for note in summary.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    for line in run_footer("compare", run_dir, stopped=summary.stopped,
                           covered=f"the tables cover the {summary.matched} example(s) both versions finished"):
        console.print(line)


__all__ = ["accuracy_table", "cost_table", "legend", "paired_table", "print_compare_report", "versions_helpharm_table"]
