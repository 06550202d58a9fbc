"""Terminal tables (rich) for scores, the SAAG funnel and the dataset catalog.

Only this package and ``saag_opt.cli`` import rich. Builders return renderables so the CLI (or a
test) decides where they go; ``print_score_report`` is the one function that prints, and only to
the Console it is given, for either kind of score (``score.run``): single calls (funnel, metrics,
accuracy, abstentions) or a BFCL multi-turn result file (``conversation_score_tables``). Every
dynamic string is escaped: rejection messages quote raw file content, which may contain rich
markup such as ``[bold]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from saag_opt.report.format import num, pct

if TYPE_CHECKING:
    from saag_opt.data import DatasetInfo
    from saag_opt.saag import CascadeStats
    from saag_opt.score.calls import ScoreResult, ScoreSummary
    from saag_opt.score.conversations import EpisodeScoreResult
    from saag_opt.score.files import Rejection

__all__ = [
    "METRIC_LABELS", "STAGE_NAMES", "abstentions_text", "accuracy_table", "conversation_score_tables",
    "datasets_table", "funnel_table", "metrics_table", "print_score_report", "rejections_panel",
]

STAGE_NAMES: dict[int, str] = {1: "1 registry (name)", 2: "2 structure (params)", 3: "3 grounding (values)"}
METRIC_LABELS: dict[str, str] = {
    "fnem": "FNEM  function name exact match (share = 1)",
    "ncs": "NCS   nearest-name similarity",
    "rpr": "RPR   required-parameter recall",
    "pds": "PDS   parameter drift score",
    "spr": "SPR   spurious-parameter rate",
    "avem": "AVEM  argument value exact match",
    "qslo": "QSLO  query-span overlap (failed strings)",
    "vhr": "VHR   value hallucination rate",
}
"""The eight SAAG metrics in cascade order (stage 1: fnem, ncs; 2: rpr, pds, spr; 3: avem, qslo, vhr)."""


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def funnel_table(stats: CascadeStats) -> Table:
    """Calls that reached and passed each stage; % of all calls, and pass rate within the stage."""
    table = Table(title=f"SAAG stage funnel over {stats.n_calls} calls", title_justify="left")
    for column in ("stage", "reached", "passed", "passed, % of calls", "pass rate at stage"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage in (1, 2, 3):
        reached, passed = stats.reached[stage], stats.passed[stage]
        table.add_row(STAGE_NAMES[stage], str(reached), str(passed), _pct(passed, stats.n_calls),
                      _pct(passed, reached))
    return table


def metrics_table(stats: CascadeStats) -> Table:
    """The eight metric means, each labelled with the calls it is conditioned on."""
    table = Table(title="SAAG metrics (stage-conditional: each mean is over the calls that reached its stage)",
                  title_justify="left")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("over", overflow="fold")
    for key, label in METRIC_LABELS.items():
        metric = stats.metrics.get(key)
        if metric is None:
            continue
        table.add_row(label, num(metric.mean), escape(f"{metric.n} {metric.over}"))
    return table


def accuracy_table(summary: ScoreSummary) -> Table:
    """Ground-truth accuracy per category, overall, and BFCL's relevance-suite mean."""
    table = Table(title="Ground truth (BFCL rules)", title_justify="left")
    table.add_column("category")
    for column in ("n", "correct", "accuracy"):
        table.add_column(column, justify="right")
    for category, score in summary.categories.items():
        table.add_row(escape(category), str(score.n), str(score.correct), _pct(score.correct, score.n))
    correct = sum(score.correct for score in summary.categories.values())
    table.add_section()
    table.add_row("[bold]all[/]", str(summary.n_predictions), str(correct), _pct(correct, summary.n_predictions))
    suite = summary.relevance_suite
    if suite is not None:
        scope = "" if suite.complete else f" ({len(suite.groups)} of 4 groups: {', '.join(suite.groups)})"
        table.add_row(f"relevance-suite mean{scope}", "", "", f"{100 * suite.mean:.1f}%")
    return table


def abstentions_text(summary: ScoreSummary) -> Text:
    """One line of abstention counts (no-call answers and unreadable outputs)."""
    a = summary.abstentions
    return Text(f"abstained {a.abstained} (correctly {a.abstained_correctly}, "
                f"when a call was expected {a.abstained_when_call_expected}); "
                f"called when no call was expected {a.called_when_no_call_expected}; unparsable {a.unparsable}")


def rejections_panel(rejections: Sequence[Rejection], limit: int = 10) -> Panel:
    """The first ``limit`` rejected rows as ``file:line: message``, and how many more there are."""
    lines = [Text(str(rejection)) for rejection in rejections[:limit]]
    if len(rejections) > limit:
        lines.append(Text(f"... and {len(rejections) - limit} more", style="dim"))
    return Panel(Group(*lines), title=f"{len(rejections)} rejected row(s), not scored", title_align="left",
                 border_style="red")


def datasets_table(infos: Iterable[DatasetInfo]) -> Table:
    """``saag-opt datasets list``: name, size, offline availability, location, description."""
    table = Table(title="Datasets", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("examples", justify="right")
    table.add_column("available")
    table.add_column("where", overflow="fold")
    table.add_column("description", overflow="fold")
    for info in infos:
        table.add_row(escape(info.name), "-" if info.n_examples is None else str(info.n_examples),
                      "yes" if info.available else "[red]no[/]", escape(info.where), escape(info.description))
    return table


def conversation_score_tables(result: EpisodeScoreResult) -> list[Table]:
    """A BFCL multi-turn result file: valid entries per category (and BFCL's leaderboard number), why entries fail."""
    summary = result.summary
    table = Table(title="BFCL multi-turn result file: valid entries (BFCL's checkers)")
    for column in ("category", "n", "valid", "valid %"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, score in summary.categories.items():
        table.add_row(category, str(score.n), str(score.correct), pct(score.accuracy))
    table.add_section()
    table.add_row("all", str(summary.n), str(summary.valid), pct(summary.accuracy))
    table.add_row("multi_turn_checker alone (leaderboard)", "", "", pct(summary.leaderboard))
    if not summary.error_types:
        return [table]
    errors = Table(title="Why entries are invalid")
    errors.add_column("error type")
    errors.add_column("entries", justify="right")
    for name, count in summary.error_types.items():
        errors.add_row(name, str(count))
    return [table, errors]


def print_score_report(console: Console, result: ScoreResult | EpisodeScoreResult) -> None:
    """Everything ``saag-opt score`` shows, for the kind of file scored, then its rejections.

    Single calls: funnel, metrics, accuracy, abstentions. A BFCL multi-turn result file: valid
    entries, why entries fail, steps left undecoded, entries missing from the file.
    """
    from saag_opt.score.calls import ScoreResult  # noqa: PLC0415 - loaded with any score result; report stays light

    if not isinstance(result, ScoreResult):
        _print_conversation_score(console, result)
        return
    console.print(funnel_table(result.stats))
    console.print(metrics_table(result.stats))
    console.print(accuracy_table(result.summary))
    console.print(abstentions_text(result.summary))
    if result.rejections:
        console.print(rejections_panel(result.rejections))


def _print_conversation_score(console: Console, result: EpisodeScoreResult) -> None:
    for table in conversation_score_tables(result):
        console.print(table)
    summary = result.summary
    skipped = sum(len(r.skipped) for r in result.rows)
    if skipped:
        console.print(f"{skipped} step(s) or call(s) could not be decoded and were skipped, as BFCL skips them "
                      "(see the rows' 'skipped' in --json)")
    if summary.not_in_file:
        console.print(f"[yellow]{summary.not_in_file} entr{'y' if summary.not_in_file == 1 else 'ies'} of the "
                      "dataset have no row in the file[/] (not scored)")
    for rejection in result.rejections:
        console.print(f"[red]rejected[/] {escape(str(rejection))}")
