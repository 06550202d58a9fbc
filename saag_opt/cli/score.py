"""``saag-opt score``: a predictions file diagnosed offline, no LM involved."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from saag_opt.choices import GroundingName
from saag_opt.cli.common import (
    EXIT_USER_ERROR,
    GROUNDING_HELP,
    SETUP,
    DatasetOpt,
    JsonOutOpt,
    output_path,
)

SCORE_HELP = (
    "Score saved predictions offline: SAAG cascade diagnostics and BFCL ground truth.\n\n"
    "Prints the stage funnel, the stage-conditional metrics and accuracy per category. Bad rows are listed "
    "as file:line messages and skipped; the exit code is then 2 (0 when every row was scored). A bfcl:multi_turn_* "
    "dataset scores a BFCL multi-turn result file with BFCL's own checkers instead.\n\n"
    "--json FILE writes one row per item (JSONL) and the summary beside it: FILE's .jsonl/.json suffix is replaced "
    "by .summary.json (scores.jsonl -> scores.summary.json), any other name gets .summary.json appended; an HTML "
    "report goes beside them (scores.report.html). The default --grounding keeps the paper's numbers; the rows "
    "name the mode.")
"""Help text of ``saag-opt score``."""


def score(
    predictions: Annotated[Path, typer.Argument(
        show_default=False, dir_okay=False,
        help="Predictions JSONL, one row per prediction: {id, example_id?, calls: [{name, arguments}]} or "
             "{id, example_id?, text: raw model output}. example_id defaults to id. With a bfcl:multi_turn_* "
             "dataset: a BFCL multi-turn result file, {id, result: per turn, per step, the model's calls}.")],
    dataset: DatasetOpt,
    json_out: JsonOutOpt = None,
    grounding: Annotated[GroundingName, typer.Option("--grounding", rich_help_panel=SETUP, help=GROUNDING_HELP)]
    = "paper",
) -> None:
    """Score a predictions file against a dataset; exit 2 if any row was rejected."""
    json_out = output_path(json_out)

    from saag_opt.data.workload import workload  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.report.score_tables import print_score_report  # noqa: PLC0415 - start-up: --help loads no report table
    from saag_opt.score.calls import ScoreResult  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.score.files import write_score_json  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)
    from saag_opt.score.run import score as scoring  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    result = scoring(predictions, workload(dataset), grounding=grounding)  # the scorer of the dataset's kind
    console = Console()
    print_score_report(console, result)
    if json_out is not None:
        rows_path, summary = write_score_json(result, json_out)
        wrote = f"wrote {len(result.rows)} rows to {rows_path}"
        if isinstance(result, ScoreResult):  # the HTML report draws single-call scores (report/pages/score.py)
            from saag_opt.report.html import write_report  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

            console.print(f"{wrote}, the summary to {summary} and the report to {write_report(rows_path)}")
        else:
            console.print(f"{wrote} and the summary to {summary}")
    if result.rejections:
        raise typer.Exit(EXIT_USER_ERROR)


__all__ = ["SCORE_HELP", "score"]
