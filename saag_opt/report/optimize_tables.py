"""Terminal tables for ``saag-opt optimize``: seed vs best on TEST, candidates, and cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from saag_opt.compare.comparison import CompareSummary
from saag_opt.optimize.bars import interactive, library_bars_off
from saag_opt.optimize.candidates import help_harm_front
from saag_opt.optimize.summary import OptimizeSummary, TestComparison
from saag_opt.report.compare_tables import accuracy_table, paired_table, versions_helpharm_table
from saag_opt.report.format import first_change, flips, num, pct, run_footer
from saag_opt.report.live import start_bar, stop_bar


def _names(test: TestComparison) -> tuple[str, str]:
    """The TEST phase is a compare run (A = seed, B = best): the two column names."""
    return f"seed ({test.seed})", f"best ({test.best})"


def seed_vs_best_table(test: TestComparison, comparison: CompareSummary) -> Table:
    """Accuracy on TEST: one row per category (and overall), one column per condition.

    Transposed on purpose: BFCL has up to 13 categories, conditions are at most three, so this
    fits an 80-column terminal where a row per condition would not.
    """
    seed, best = _names(test)
    return accuracy_table(comparison, title="TEST accuracy %: base vs seed vs best", a=seed, b=best)


def help_harm_table(test: TestComparison, comparison: CompareSummary) -> Table:
    """Seed and best against the base agent alone on TEST (the same rows as evaluate and compare)."""
    seed, best = _names(test)
    return versions_helpharm_table(comparison, title="TEST: help / harm vs the base agent alone", a=seed, b=best)


def best_vs_seed_table(test: TestComparison, comparison: CompareSummary) -> Table:
    """Best against seed on the same TEST examples: the discordant pairs, McNemar p and the CI."""
    seed, best = _names(test)
    return paired_table(comparison, a=seed, b=best)


def candidates_table(summary: OptimizeSummary) -> Table:
    """GEPA pool, one row per candidate: version, parent, val accuracy, help and harm on val, the edit.

    ``front`` marks the help-vs-harm front (``candidates.help_harm_front``: no other candidate fixes as
    many wrong base calls while breaking as few right ones, one strictly); ``(best)`` the version
    aliased ``best``. A summary older than the counts shows the val accuracy alone.
    """
    table = Table(title="GEPA candidates on val: help = fixed / base wrong, harm = broken / base right",
                  caption="* after # = on the help-vs-harm front: no other candidate fixes as many and breaks as "
                          "few, one strictly. ±par = val examples gained and lost against the parent. edit = the "
                          "first rule-level change from the parent.",
                  box=box.SIMPLE_HEAD, padding=0)  # no frame, the front a mark: ten columns fit 80 characters
    for name in ("#", "version", "parent", "val", "±par", "fixed", "broken", "help %", "harm %"):
        table.add_column(name, justify="left" if name in ("version", "parent") else "right")
    table.add_column("edit", min_width=16)
    for idx, version, parent, val, flipped, fixed, broken, helped, harmed, front, edit in candidate_rows(summary):
        table.add_row(*(escape(cell) for cell in (idx + front, version, parent, val, flipped, fixed, broken, helped,
                                                  harmed, edit)))
    return table


def candidate_rows(summary: OptimizeSummary) -> list[list[str]]:
    """The cells of ``candidates_table``, one list per candidate in index order."""
    counted = {c.candidate: c for c in summary.candidates}
    front = help_harm_front(counted.values())
    scores = summary.val_scores
    rows = []
    for idx in sorted(set(summary.versions) | set(counted)):
        c = counted.get(idx)
        version = summary.versions.get(idx) or (c.version if c is not None else None) or "-"
        mark = " (best)" if version == summary.best_version else ""
        val = c.val_accuracy if c is not None else (scores[idx] if idx < len(scores) else None)
        if c is None:
            rows.append([str(idx), f"{version}{mark}", "-", num(val), "-", "-", "-", "-", "-", "", "-"])
            continue
        parent = "-" if c.parent is None else summary.versions.get(c.parent, f"#{c.parent}")
        rows.append([str(idx), f"{version}{mark}", parent, num(val), flips(c.gained, c.lost), str(c.fixed),
                     str(c.broken), pct(c.help), pct(c.harm), "*" if idx in front else "", first_change(c.edit)])
    return rows


def unusable_table(summary: OptimizeSummary) -> Table | None:
    """Reviewer replies still unreadable after a retry, per phase (None for a summary without the counts).

    Why a table of its own: in GEPA's rollouts such a reply reaches only the reflection feedback, so a
    weak reviewer would otherwise look harmless here; the TEST rows repeat the help/harm table's.
    """
    counts = summary.reviewer_unusable
    if counts is None:
        return None
    table = Table(title="Reviewer replies unusable (after a retry), per phase")
    for name in ("phase", "replies", "rollouts / examples affected", "rollouts / examples"):
        table.add_column(name, justify="left" if name == "phase" else "right")
    gepa = counts.gepa_rollouts
    table.add_row("GEPA rollouts (train + val)", str(gepa.reviewer_unusable), str(gepa.rollouts_with_unusable),
                  str(gepa.rollouts))
    test, on_test = summary.test, counts.test
    n = str(test.comparison.matched) if test is not None and test.comparison is not None else "-"
    for name in ("seed", "best"):
        label = f"TEST {name} ({getattr(test, name) if test is not None else '-'})"
        table.add_row(label, "-" if on_test is None else str(on_test.get(name, 0)), "-", "-" if on_test is None else n)
    return table


def cost_table(costs: Mapping[str, Any]) -> Table:
    """Spend per role: calls, cache hits, tokens, dollars, seconds."""
    table = Table(title="Cost by role, whole run (GEPA and the test phase; summed over resumes)")
    for name in ("role", "calls", "cache hits", "tokens", "$", "seconds"):
        table.add_column(name, justify="left" if name == "role" else "right")
    for role, acct in (costs.get("roles") or {}).items():
        tokens = int(acct.get("prompt_tokens", 0)) + int(acct.get("completion_tokens", 0))
        table.add_row(role, str(acct.get("calls", 0)), str(acct.get("cache_hits", 0)), str(tokens),
                      num(acct.get("dollars"), ".4f"), num(acct.get("seconds"), ".1f"))
    return table


SEED_STAYS = ("[bold]best is the seed[/] ({seed}): no candidate cleared the val margin, so TEST measures the seed "
              "against the base agent only; best and seed are the same prompt, and there is no best-vs-seed result.")
"""Said instead of a best-vs-seed table that would compare a prompt with itself."""


def print_optimize_report(console: Console, summary: OptimizeSummary | Mapping[str, Any]) -> None:
    """The whole end-of-run report from ``run_optimize``'s summary (or its ``to_dict()``, as ``--json`` writes it)."""
    if not isinstance(summary, OptimizeSummary):
        summary = OptimizeSummary.model_validate(summary)
    console.print(candidates_table(summary))
    test = summary.test
    if test is not None and test.comparison is not None:
        console.print(seed_vs_best_table(test, test.comparison))
        console.print(help_harm_table(test, test.comparison))
        if test.best == test.seed:
            console.print(SEED_STAYS.format(seed=escape(test.seed)))
        else:
            console.print(best_vs_seed_table(test, test.comparison))
        console.print(f"test comparison run: {test.compare_run}")
    if test is not None and test.stopped:
        console.print(f"[yellow]test comparison incomplete:[/] {escape(test.stopped)}")
    unusable = unusable_table(summary)
    if unusable is not None:
        console.print(unusable)
    console.print(cost_table(summary.costs))
    console.print(f"stopped by: {summary.stopped_by}; rollouts: {summary.metric_calls}; "
                  f"best prompt: reviewer@{summary.best_version} (alias 'best')")
    if summary.saag_informed:
        console.print(f"reviewer: SAAG-informed (experimental; it saw the gold-free SAAG report, grounding "
                      f"{escape(str(summary.grounding))}, in every rollout and on test)")
    stopped = "--max-cost reached" if summary.status == "stopped" else None
    for line in run_footer("optimize", summary.run_dir, stopped=stopped, covered="finished work is kept"):
        console.print(line)


class OptimizeProgress:
    """A rich bar fed by optimize events; other events print as lines.

    Rollouts used / budget, accepted candidates, best val score and live spend (``progress``
    events, from GEPA's callbacks).
    """

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("GEPA"), BarColumn(), MofNCompleteColumn(), TextColumn("rollouts"),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console,
                                 transient=True)
        self.task: Any = None
        self._quiet: Any = None

    def __enter__(self) -> OptimizeProgress:
        # gepa's bar always (this one shows the same count); dspy's minibatch bars in a log
        self._quiet = library_bars_off(gepa=True, dspy=not interactive())
        self._quiet.__enter__()
        start_bar(self.progress)  # on a terminal only
        return self

    def __exit__(self, *exc: object) -> None:
        stop_bar(self.progress)
        self._quiet.__exit__(None, None, None)

    def __call__(self, event: Any) -> None:
        """Optimize event handler."""
        if event.kind != "progress":
            self.progress.console.print(f"[dim]optimize:[/] {escape(event.message)}")
            return
        data = event.data
        best = "-" if data.get("best_val") is None else f"{data['best_val']:.3f}"
        status = f"accepted {data.get('accepted', 0)}  best val {best}  ${data.get('spent', 0.0):.4f}"
        if self.task is None:
            self.task = self.progress.add_task("optimize", total=data.get("budget"), status=status)
        self.progress.update(self.task, completed=min(data.get("rollouts", 0), data.get("budget") or 0),
                             status=status)


__all__ = ["OptimizeProgress", "best_vs_seed_table", "candidate_rows", "candidates_table", "cost_table", "help_harm_table",
           "print_optimize_report", "seed_vs_best_table", "unusable_table"]
