"""Terminal tables for ``saag-opt evaluate``, a run of single calls or of conversations.

``print_evaluate_report`` prints either, by the summary the run wrote. Single calls: accuracy base
vs reviewed, help/harm, latency and cost. Conversations (``print_episode_report``): validity base vs
reviewed (BFCL's checkers or tau2's evaluator), help/harm per entry and over abstention turns,
tau2's pass^k, and what the review did inside the conversations. Plus the live progress bar driven
by the runner's events. Rich lives here and in the CLI only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from saag_opt.report.format import cached_reviews, contamination_warning, delta, mismatch_warning, pct, run_footer
from saag_opt.report.helpharm_rows import helpharm_table
from saag_opt.report.live import start_bar, stop_bar

if TYPE_CHECKING:
    from saag_opt.evaluation.conversation_records import ConversationCounts, EpisodeSummary
    from saag_opt.evaluation.results import EvaluationSummary
    from saag_opt.events import RunEvent

CONVERSATION_COUNTS: tuple[tuple[str, str], ...] = (
    ("turns run", "turns"), ("steps", "steps"), ("calls proposed", "proposed_calls"),
    ("calls executed", "executed_calls"), ("steps withheld (calls never run)", "withheld_steps"),
    ("calls withheld", "withheld_calls"), ("steps revised", "revised_steps"),
    ("steps the reviewer saw", "reviewed_steps"), ("cut off at the step limit", "cut_off"),
    ("steps repeating a call of their turn", "repeated_steps"),
    ("abstention turns", "abstain_turns"), ("left without a call", "abstained"))
"""The rows of "Inside the conversations" (label, ``ConversationCounts`` field), here and on the HTML page."""


def accuracy_table(summary: EvaluationSummary) -> Table:
    """Per-category accuracy (%) of the base agent and with the reviewer, plus suite rows."""
    base, final = summary.base, summary.reviewed
    table = Table(title=f"Accuracy: base vs {escape(summary.mechanism)}"
                  + contamination_warning(summary.prompt, summary.contaminated)
                  + mismatch_warning(summary.prompt, summary.reviewer_mismatch))
    for col in ("category", "n", "base %", "reviewed %", "delta"):
        table.add_column(col, justify="left" if col == "category" else "right")
    for cat, score in base.categories.items():
        other = final.categories.get(cat)
        table.add_row(escape(cat), str(score.n), pct(score.accuracy), pct(other.accuracy if other else None),
                      delta(score.accuracy, other.accuracy if other else None))
    suite_b = base.relevance_suite.mean if base.relevance_suite else None
    suite_f = final.relevance_suite.mean if final.relevance_suite else None
    complete = bool(base.relevance_suite and base.relevance_suite.complete)
    table.add_section()
    table.add_row("relevance suite" + ("" if complete else " (partial)"), "", pct(suite_b), pct(suite_f),
                  delta(suite_b, suite_f))
    table.add_row("irrelevance", "", pct(base.irrelevance), pct(final.irrelevance),
                  delta(base.irrelevance, final.irrelevance))
    table.add_row("[bold]overall[/]", str(base.n), pct(base.accuracy), pct(final.accuracy),
                  delta(base.accuracy, final.accuracy))
    return table


def overhead_table(summary: EvaluationSummary) -> Table:
    """Latency overhead, reviewer calls per item and cost per role."""
    table = Table(title="Latency and cost")
    table.add_column("measure")
    table.add_column("value", justify="right")
    lat = summary.latency
    table.add_row("base s / item", "-" if lat.base_mean_seconds is None else f"{lat.base_mean_seconds:.2f}")
    table.add_row("with review s / item", "-" if lat.final_mean_seconds is None else f"{lat.final_mean_seconds:.2f}")
    table.add_row("latency overhead", "-" if lat.overhead_x is None else f"{lat.overhead_x:.1f}x")
    if lat.untimed_replays:
        table.add_row("latency incomplete: cached replies of unknown original time (counted ~0 s)",
                      str(lat.untimed_replays))
    table.add_row("reviewer calls / item", "-" if summary.reviewer_calls_per_item is None
                  else f"{summary.reviewer_calls_per_item:.2f}")
    table.add_row("reviews replayed from the LM cache (timed as first asked)", cached_reviews(summary.costs))
    if summary.gated_share is not None:
        table.add_row("passed by the SAAG gate", f"{100 * summary.gated_share:.1f} %")
    table.add_section()
    for role, account in (summary.costs.get("roles") or {}).items():
        tokens = account.get("prompt_tokens", 0) + account.get("completion_tokens", 0)
        table.add_row(f"{escape(role)}: calls / tokens / $",
                      f"{account.get('calls', 0)} / {tokens} / {account.get('dollars', 0.0):.4f}")
    return table


def print_evaluate_report(console: Console, summary: EvaluationSummary | EpisodeSummary,
                          run_dir: str | None = None) -> None:
    """Everything ``saag-opt evaluate`` prints after a run, of single calls or (``print_episode_report``) conversations."""
    from saag_opt.evaluation.conversation_records import EpisodeSummary  # noqa: PLC0415 - loaded with the summary

    if isinstance(summary, EpisodeSummary):
        print_episode_report(console, summary, run_dir)
        return
    if summary.experimental:
        console.print("[yellow]experimental:[/] this configuration uses a SAAG gate or the SAAG-informed "
                      "reviewer; treat its numbers as exploratory.")
    console.print(accuracy_table(summary))
    console.print(helpharm_table("Help / harm (paired, examples without errors)", {"value": summary.help_harm},
                                 unusable=[summary.reviewed.reviewer_unusable]))
    console.print(overhead_table(summary))
    _failed(console, summary.errors, "example(s)")
    unusable = summary.reviewed.reviewer_unusable
    if unusable:
        counted = "rejections" if summary.on_unusable == "reject" else "approvals"
        console.print(f"[yellow]{unusable} reviewer repl{'y' if unusable == 1 else 'ies'} could not be read[/] "
                      f"(even when asked twice) and counted as {counted} (--on-unusable): the help and harm above "
                      "are not what a working reviewer would do")
    _footer(console, run_dir, summary.stopped, f"{summary.n_examples} finished example(s)")


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
    for label, pick in CONVERSATION_COUNTS:
        table.add_row(label, _count(base, pick), _count(final, pick))
    table.add_row("abstention rate", pct(base.abstention_rate), pct(final.abstention_rate))
    return table


def _count(counts: ConversationCounts, pick: str) -> str:
    value = getattr(counts, pick)
    return "-" if value is None else str(value)


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


def print_episode_report(console: Console, summary: EpisodeSummary, run_dir: str | None = None) -> None:
    """Everything ``saag-opt evaluate`` prints after a run of conversations."""
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
    _failed(console, summary.errors, _entries(summary.errors))
    _footer(console, run_dir, summary.stopped, f"{summary.n_episodes} finished {_entries(summary.n_episodes)}")


def _entries(n: int) -> str:
    return "entry" if n == 1 else "entries"


def _failed(console: Console, errors: int, items: str) -> None:
    """The items that failed with an error (kept in records.jsonl, scored wrong), when any did."""
    if errors:
        console.print(f"[red]{errors} {items} failed[/] (recorded with an error; see records.jsonl)")


def _footer(console: Console, run_dir: str | None, stopped: str | None, finished: str) -> None:
    """Where the run is, and why the tables cover only part of it when it stopped early."""
    for line in run_footer("evaluate", run_dir, stopped=stopped, covered=f"the tables cover the {finished}"):
        console.print(line)


def _cost_line(costs: dict[str, Any]) -> str:
    total = costs.get("total") or {}
    tokens = total.get("prompt_tokens", 0) + total.get("completion_tokens", 0)
    return f"calls {total.get('calls', 0)}  tokens {tokens}  ${total.get('dollars', 0.0):.4f}"


class EvaluateProgress:
    """A rich progress bar with live calls/tokens/$ fed by runner events (use as a context manager)."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.fields[costs]}"), console=console, transient=True)
        self.task: Any = None
        self.costs = ""

    def __enter__(self) -> EvaluateProgress:
        start_bar(self.progress)  # on a terminal only
        return self

    def __exit__(self, *exc: object) -> None:
        stop_bar(self.progress)

    def __call__(self, event: RunEvent) -> None:
        """Runner event handler."""
        if event.kind in ("run_started", "resumed") and "total" in event.data:
            self.task = self.progress.add_task("evaluate", total=event.data["total"],
                                               completed=event.data.get("done", 0), costs="")
        elif event.kind == "example_finished" and self.task is not None:
            self.costs = _cost_line({"total": _sum_roles(event.data["costs"])})
            self.progress.update(self.task, completed=event.data["done"], costs=self.costs)
        elif event.kind == "step" and self.task is not None:  # a conversation's steps between finished entries
            self.progress.update(self.task, costs=f"{self.costs}  {event.message}".strip())
        elif event.kind == "batch" and self.progress.live.is_started:  # --batch: each status change above the bar
            self.progress.console.print(event.message, markup=False, highlight=False)


def _sum_roles(snapshot: dict[str, Any]) -> dict[str, Any]:
    roles = snapshot.get("roles", snapshot)
    total: dict[str, Any] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "dollars": 0.0}
    for name, account in roles.items():
        if name == "total" or not isinstance(account, dict):
            continue
        for key in total:
            total[key] += account.get(key) or 0
    return total


__all__ = ["CONVERSATION_COUNTS", "EvaluateProgress", "accuracy_table", "conversation_table", "overhead_table",
           "pass_hat_k_table", "print_episode_report", "print_evaluate_report", "validity_table"]
