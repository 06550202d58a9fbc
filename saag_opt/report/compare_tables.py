"""Terminal tables for ``saag-opt compare``.

Base vs each version's accuracy, help/harm per version, the paired tests (for two versions the
A-vs-B table, for more one row per pair with its Holm-adjusted p), and latency/cost per version.
Rich lives here and in the CLI only.
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
    stars,
)
from saag_opt.report.helpharm_rows import helpharm_table

if TYPE_CHECKING:
    from saag_opt.compare.comparison import CompareSummary, SideSummary


def names(summary: CompareSummary, a: str = "A", b: str = "B") -> list[str]:
    """Column names of the versions: ``a``, ``b`` for the first two (optimize says seed, best), then C, D ..."""
    return [a, b, *(s.key.upper() for s in summary.sides[2:])]


def legend(summary: CompareSummary) -> str:
    """``A = ...  B = ...`` with mechanism and source, for the line above the tables."""
    def one(side: SideSummary) -> str:
        where = side.source.get("ref") or side.source.get("prompt") or side.source.get("run_dir") or side.label
        return f"[bold]{side.key.upper()}[/] = {escape(side.label)} ({escape(side.mechanism)}; {escape(str(where))})"

    matched = f"{summary.matched} matched example(s)"
    if summary.mode == "runs":
        matched += "; " + ", ".join(f"only in {s.key.upper()}: {summary.only[s.key]}" for s in summary.sides)
    return "\n".join([*map(one, summary.sides), matched])


def accuracy_table(summary: CompareSummary, *, title: str | None = None, a: str = "A", b: str = "B") -> Table:
    """Per-category accuracy (%): base alone and one column per version, plus suite rows.

    Two versions also get the B - A column (more versions: the pairs table has every difference);
    ``a``/``b`` name the first two columns.
    """
    cols = names(summary, a, b)
    two = len(cols) == 2
    conditions = [summary.base, *(s.accuracy for s in summary.sides)]
    warnings = "".join(contamination_warning(f"{name} ({side.label}{_prompt_of(side)})", side.contaminated)
                       + mismatch_warning(f"{name} ({side.label})", side.reviewer_mismatch)
                       for side, name in zip(summary.sides, cols))
    table = Table(title=(title or "Accuracy: base vs " + " vs ".join(cols)) + warnings)
    for col in ("category", "n", "base %", *(f"{name} %" for name in cols), *([f"{b} - {a}"] if two else [])):
        table.add_column(col, justify="left" if col == "category" else "right")

    def row(label: str, n: str, values: list[float | None]) -> None:
        table.add_row(label, n, *map(pct, values), *([delta(values[1], values[2])] if two else []))

    for cat in sorted(set().union(*(c.categories for c in conditions))):
        cells = [c.categories.get(cat) for c in conditions]
        row(escape(cat), str(next((c.n for c in cells if c is not None), 0)), [c.accuracy if c else None for c in cells])
    complete = bool(summary.base.relevance_suite and summary.base.relevance_suite.complete)
    table.add_section()
    row("relevance suite" + ("" if complete else " (partial)"), "",
        [c.relevance_suite.mean if c.relevance_suite else None for c in conditions])
    row("irrelevance", "", [c.irrelevance for c in conditions])
    row("[bold]overall[/]", str(summary.base.n), [c.accuracy for c in conditions])
    return table


def _prompt_of(side: SideSummary) -> str:
    """A finished run's reviewer prompt (runs mode: the label is the run id); prompts mode labels name it."""
    prompt = side.source.get("prompt") if "run_dir" in side.source else None
    return f", prompt {prompt}" if prompt else ""


def versions_helpharm_table(summary: CompareSummary, *, title: str = "Help / harm vs base (paired, examples "
                            "without errors)", a: str = "A", b: str = "B") -> Table:
    """Each version against the base agent alone (paired, conditional rates)."""
    return helpharm_table(title, {name: s.help_harm for name, s in zip(names(summary, a, b), summary.sides)},
                          unusable=[s.accuracy.reviewer_unusable for s in summary.sides])


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


def pairs_table(summary: CompareSummary) -> Table:
    """Every pair of versions: gains, losses, net change and CI, McNemar p and its Holm-adjusted p (marked).

    Compact on purpose (points without units, the marks beside the Holm p): it fits 80 columns.
    """
    table = Table(title=f"Every pair (paired; McNemar exact p, Holm-adjusted over {len(summary.pairs)} pairs)",
                  caption="gains: only the later version right; losses: only the earlier one; "
                          "* Holm p < 0.05, ** < 0.01, *** < 0.001")
    for col in ("pair", "n", "gains", "losses", "net pts", "95% CI pts", "p", "Holm p"):
        table.add_column(col, justify="left" if col == "pair" else "right")
    for p in summary.pairs:
        net = "-" if p.net_change is None else f"{100 * p.net_change:+.1f}"
        ci = "-" if not p.net_change_ci95 else "[{:+.1f}, {:+.1f}]".format(*(100 * x for x in p.net_change_ci95))
        table.add_row(f"{p.target.upper()} vs {p.ref.upper()}", str(p.n), str(p.b_only_right), str(p.a_only_right),
                      net, ci, f"{p.mcnemar_p:.3g}", f"{p.holm_p:.3g} {stars(p.holm_p)}".rstrip())
    return table


def cost_table(summary: CompareSummary) -> Table:
    """Latency (mean s per example, overhead vs base), reviewer calls, tokens and dollars per version."""
    table = Table(title="Latency and cost per version")
    table.add_column("measure")
    sides = summary.sides
    for side in sides:
        table.add_column(side.key.upper(), justify="right")
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
    if any(s.gated_share is not None for s in summary.sides):
        console.print("[yellow]experimental:[/] a SAAG gate is in use; treat its numbers as exploratory.")
    console.print(accuracy_table(summary))
    console.print(versions_helpharm_table(summary))
    console.print(paired_table(summary) if len(summary.sides) == 2 else pairs_table(summary))
    console.print(cost_table(summary))
    every = "both versions" if len(summary.sides) == 2 else f"all {len(summary.sides)} versions"
    base_dollars = (summary.base_costs or {}).get("roles", {}).get("total", {}).get("dollars")
    if base_dollars is not None:
        console.print(f"shared base pass: ${base_dollars:.4f} (paid once for {every})")
    for note in summary.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    for line in run_footer("compare", run_dir, stopped=summary.stopped,
                           covered=f"the tables cover the {summary.matched} example(s) {every} finished"):
        console.print(line)


__all__ = ["accuracy_table", "cost_table", "legend", "names", "paired_table", "pairs_table", "print_compare_report",
           "versions_helpharm_table"]
