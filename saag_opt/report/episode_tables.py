"""Terminal tables for ``saag-opt evaluate`` on a multi-turn dataset.

Validity base vs reviewed (BFCL's checkers), help/harm per entry and over abstention turns alone,
and what the review did inside the conversations (steps, withheld and revised calls, per turn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from saag_opt.report.format import delta, pct, run_footer
from saag_opt.report.helpharm_rows import helpharm_table

if TYPE_CHECKING:
    from saag_opt.evaluation.conversation_records import ConversationCounts, EpisodeSummary


def validity_table(summary: EpisodeSummary) -> Table:
    """Valid entries per category, base vs reviewed, and BFCL's leaderboard number (multi_turn_checker alone)."""
    table = Table(title=f"Valid conversations: base vs {summary.mechanism} ({summary.judged_by})")
    for column in ("category", "n", "base", summary.mechanism, "change"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, base in summary.base.categories.items():
        final = summary.reviewed.categories.get(category)
        table.add_row(category, str(base.n), pct(base.accuracy), pct(final.accuracy if final else None),
                      delta(base.accuracy, final.accuracy if final else None))
    table.add_section()
    table.add_row("all", str(summary.base.n), pct(summary.base.accuracy), pct(summary.reviewed.accuracy),
                  delta(summary.base.accuracy, summary.reviewed.accuracy))
    if summary.is_tau2:  # BFCL's leaderboard number means nothing for tau2
        return table
    board = summary.leaderboard
    table.add_row("multi_turn_checker alone", "", pct(board.get("base")), pct(board.get(summary.mechanism)),
                  delta(board.get("base"), board.get(summary.mechanism)))
    return table


def conversation_table(summary: EpisodeSummary) -> Table:
    """Steps, calls and abstention turns, base vs reviewed."""
    base, final = summary.conversation["base"], summary.conversation[summary.mechanism]
    table = Table(title="Inside the conversations")
    for column in ("measure", "base", summary.mechanism):
        table.add_column(column, justify="left" if column == "measure" else "right")

    def row(label: str, pick: str) -> None:
        table.add_row(label, _value(base, pick), _value(final, pick))

    for label, pick in (("turns run", "turns"), ("steps", "steps"), ("calls proposed", "proposed_calls"),
                        ("calls executed", "executed_calls"), ("steps withheld (calls never run)", "withheld_steps"),
                        ("calls withheld", "withheld_calls"), ("steps revised", "revised_steps"),
                        ("steps the reviewer saw", "reviewed_steps"), ("cut off at the step limit", "cut_off"),
                        ("steps repeating a call of their turn", "repeated_steps"),
                        ("abstention turns", "abstain_turns"), ("left without a call", "abstained")):
        row(label, pick)
    table.add_row("abstention rate", pct(base.abstention_rate), pct(final.abstention_rate))
    return table


def pass_hat_k_table(summary: EpisodeSummary) -> Table:
    """tau2 datasets: pass^1..k per condition (every trial of a task succeeds), as tau2 computes it."""
    ks = sorted({k for by_k in summary.pass_hat_k.values() for k in by_k})
    table = Table(title="pass^k per condition (tau2: all k trials of a task succeed, averaged over tasks)")
    table.add_column("condition")
    for k in ks:
        table.add_column(f"pass^{k}", justify="right")
    for condition, by_k in summary.pass_hat_k.items():
        table.add_row(condition, *(pct(by_k.get(k)) for k in ks))
    return table


def _value(counts: ConversationCounts, pick: str) -> str:
    value = getattr(counts, pick)
    return "-" if value is None else str(value)


def print_episode_report(console: Console, summary: EpisodeSummary, run_dir: str | None = None) -> None:
    """Everything ``saag-opt evaluate`` prints after a multi-turn run."""
    if summary.experimental:
        console.print("[yellow]experimental:[/] this mechanism is experimental; treat its numbers as exploratory.")
    console.print(validity_table(summary))
    columns = {"per entry": summary.help_harm}
    if summary.abstention_help_harm is not None:
        columns["abstention turns"] = summary.abstention_help_harm
    console.print(helpharm_table("Help / harm (paired, entries without errors)", columns,
                                 unusable=[summary.reviewed.reviewer_unusable] * len(columns)))
    if summary.pass_hat_k:
        console.print(pass_hat_k_table(summary))
    console.print(conversation_table(summary))
    if summary.errors:
        console.print(f"[red]{summary.errors} entr{'y' if summary.errors == 1 else 'ies'} failed[/] (recorded with "
                      "an error; see records.jsonl)")
    for line in run_footer("evaluate", run_dir, stopped=summary.stopped,
                           covered=f"the tables cover the {summary.n_episodes} finished entr"
                                   f"{'y' if summary.n_episodes == 1 else 'ies'}"):
        console.print(line)


__all__ = ["conversation_table", "pass_hat_k_table", "print_episode_report", "validity_table"]
