"""What the HTML report shows, as plain data: one ``Part`` per run, each a list of sections.

``build_part(path)`` reads a run directory (evaluate, compare, optimize, tune, security) or a ``score --json``
output and returns the sections that run has data for; ``templates/report.html.j2`` draws them.
Nothing here writes HTML or touches an LM. Numbers come from the run's own files (summary.json
for the headline statistics, records.jsonl for per-example views), so the report and the terminal
tables never disagree; the few numbers computed here (per-call SAAG distributions, bootstrap CIs
of the help and harm rates, GEPA's val-instance frontier, the candidates' help-vs-harm front) say in the
page how they were computed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from saag_opt.errors import RunError
from saag_opt.report.pages.base import Part
from saag_opt.report.pages.browser import OUTCOMES, outcome, stage_of
from saag_opt.report.pages.conversation_runs import episode_part
from saag_opt.report.pages.optimize import optimize_part
from saag_opt.report.pages.runs import compare_part, evaluate_part
from saag_opt.report.pages.score import score_files, score_part
from saag_opt.report.pages.sections import METRICS
from saag_opt.report.pages.security import security_part
from saag_opt.report.pages.tune import tune_part
from saag_opt.runfiles import Run, read_run

BUILDERS: dict[str, Callable[[Run, int], Part]] = {"evaluate": evaluate_part, "compare": compare_part,
                                                   "optimize": optimize_part, "tune": tune_part,
                                                   "evaluate-multiturn": episode_part, "security": security_part}
"""Run verb -> part builder (each reads the run as its verb's models: ``runfiles.read_run``)."""


def build_part(path: str | Path, index: int = 0) -> Part:
    """The report part of one run directory or ``score --json`` output.

    Raises:
        RunError: not a run directory / score output, a run no page draws, or its files cannot be read.
    """
    path = Path(path)
    if path.is_file() or not (path / "run.json").exists():
        score = score_files(path)
        if score is None:
            raise RunError(f"{path}: not a run directory (no run.json) nor a `score --json` output")
        return score_part(*score, index=index)
    run = read_run(path)
    header = run.header
    builder = BUILDERS.get(header.verb)
    if builder is None:
        raise RunError(f"{path}: no report page draws {header.verb!r} runs (pages: {', '.join(sorted(BUILDERS))})")
    part = builder(run, index)
    if header.status != "success":
        message = f"run status is {header.status!r}: the numbers below may be partial"
        if header.error is not None:
            message += f" ({header.error.message})"
        part.notes.insert(0, message)
    return part


__all__ = ["BUILDERS", "METRICS", "OUTCOMES", "Part", "build_part", "outcome", "stage_of"]
