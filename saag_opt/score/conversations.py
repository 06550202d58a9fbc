"""Conversations as score work: a BFCL multi-turn result file, every entry judged by BFCL's own checkers, offline.

The file is BFCL's own result shape (what ``bfcl generate`` writes to
``result/<model>/BFCL_v4_multi_turn_<category>_result.json``), JSON Lines or a JSON array::

    {"id": "multi_turn_base_0", "result": [[["cd(folder='document')", "mkdir(dir_name='temp')"], []], ...]}

``result`` holds, per turn, per step, what the model produced at that step: decoded call strings,
a FC model's ``[{name: arguments}]`` or a prompting model's raw text (``data.bfcl_environment.
result_transcript`` decodes them as BFCL does). Other keys (``inference_log``, token counts) are
ignored. Each entry is judged by the ``bfcl`` environment's ``check``: ``multi_turn_checker`` and
``multi_turn_irrelevance_checker``, with BFCL's force-terminated rule; ``valid`` is both, and the
leaderboard number (``multi_turn_checker`` alone) is reported beside it.

Bad rows are data, not crashes: each becomes a ``Rejection`` (``path:line: message``, ``score.files``),
as in single-call ``score``. Pure but for reading the file and running BFCL's backends; no LM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from saag_opt.data.bfcl_environment import BfclEnvironment, result_transcript
from saag_opt.episodes import Episode
from saag_opt.errors import DatasetError
from saag_opt.evaluation.categories import CategoryScore
from saag_opt.evaluation.conversation_records import JudgementRecord, judgement_record
from saag_opt.score.files import Rejection, judge_rows


class ResultRow(BaseModel):
    """One entry of a BFCL multi-turn result file (input)."""

    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True)

    id: str = Field(min_length=1)
    """The BFCL entry id (``multi_turn_base_0``)."""
    result: Any
    """Per turn, per step, the model's output (module docstring)."""


class EpisodeScoreRow(BaseModel):
    """One row of the ``--json`` output: one per scored entry."""

    id: str
    """The entry id."""
    category: str
    """Its BFCL category."""
    valid: bool
    """Both of BFCL's checkers pass."""
    turns: int
    """Turns in the result (the gold's count, unless force-terminated)."""
    calls: int
    """Calls handed to the checker."""
    judgement: JudgementRecord
    """The verdict: error type, message, failing turn, each checker's answer, state differences."""
    skipped: list[str] = Field(default_factory=list)
    """Steps and calls that could not be decoded (BFCL skips them too)."""


class EpisodeScoreSummary(BaseModel):
    """The summary beside the rows."""

    n: int
    """Entries scored."""
    valid: int
    """Entries both checkers pass."""
    accuracy: float | None
    """valid / n."""
    leaderboard: float | None
    """Share valid by ``multi_turn_checker`` alone (BFCL's own leaderboard number)."""
    categories: dict[str, CategoryScore] = Field(default_factory=dict)
    """Per category (``correct`` = valid)."""
    error_types: dict[str, int] = Field(default_factory=dict)
    """Invalid entries per BFCL error type."""
    rejected: int = 0
    """Rows that could not be scored."""
    not_in_file: int = 0
    """Entries of the dataset the file has no row for (BFCL would fail the run; here they are only counted)."""


@dataclass(frozen=True)
class EpisodeScoreResult:
    """What ``score_multi_turn`` returns."""

    rows: tuple[EpisodeScoreRow, ...]
    rejections: tuple[Rejection, ...]
    summary: EpisodeScoreSummary

    def json_rows(self) -> list[dict[str, Any]]:
        """The ``--json`` rows: one ``EpisodeScoreRow`` per scored entry."""
        return [row.model_dump(mode="json") for row in self.rows]


def score_multi_turn(path: str | Path, episodes: Sequence[Episode]) -> EpisodeScoreResult:
    """Judge every entry of the BFCL result file ``path`` against ``episodes`` with BFCL's checkers.

    Raises:
        DatasetError: the file does not exist or cannot be read at all.
    """
    by_id = {e.id: e for e in episodes}
    first: dict[str, int] = {}
    environment = BfclEnvironment()
    try:
        rows, rejections = judge_rows(path, "result file not found",
                                      lambda value, line: _score_line(value, by_id, first, line, environment))
    finally:
        environment.close()
    return EpisodeScoreResult(tuple(rows), tuple(rejections), _summary(rows, len(rejections), len(by_id) - len(first)))


def _score_line(value: Any, by_id: Mapping[str, Episode], first: dict[str, int], line: int,
                environment: BfclEnvironment) -> EpisodeScoreRow | str:
    if isinstance(value, DatasetError):
        return str(value).split(f":{line}: ", 1)[-1]
    if not isinstance(value, dict):
        return f"row must be a JSON object, got {type(value).__name__}"
    try:
        row = ResultRow.model_validate(value)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors())
    if row.id in first:
        return f"duplicate id {row.id!r} (first on line {first[row.id]})"
    episode = by_id.get(row.id)
    if episode is None:
        return f"unknown entry id {row.id!r}: not in the dataset (give the matching bfcl:multi_turn_* dataset)"
    try:
        transcript, skipped = result_transcript(episode, row.result)
    except ValueError as exc:
        return f"{row.id}: {exc} (BFCL: multi_turn:inference_error)"
    first[row.id] = line
    environment.reset(episode)
    judgement = environment.check(transcript)
    return EpisodeScoreRow(id=row.id, category=episode.category, valid=judgement.valid, turns=len(transcript),
                           calls=sum(len(step) for turn in transcript for step in turn),
                           judgement=judgement_record(judgement), skipped=skipped)


def _summary(rows: Sequence[EpisodeScoreRow], rejected: int, missing: int) -> EpisodeScoreSummary:
    categories: dict[str, CategoryScore] = {}
    for category in sorted({r.category for r in rows}):
        here = [r for r in rows if r.category == category]
        valid = sum(r.valid for r in here)
        categories[category] = CategoryScore(n=len(here), correct=valid, accuracy=valid / len(here))
    errors: dict[str, int] = {}
    for r in rows:
        if not r.valid:
            errors[r.judgement.error_type or "invalid"] = errors.get(r.judgement.error_type or "invalid", 0) + 1
    n, valid = len(rows), sum(r.valid for r in rows)
    board = sum(r.judgement.checks.get("multi_turn_checker", r.valid) for r in rows)
    return EpisodeScoreSummary(n=n, valid=valid, accuracy=valid / n if n else None, leaderboard=board / n if n else None,
                               categories=categories, error_types=dict(sorted(errors.items())), rejected=rejected,
                               not_in_file=missing)


__all__ = ["EpisodeScoreResult", "EpisodeScoreRow", "EpisodeScoreSummary", "ResultRow", "score_multi_turn"]
