"""Single calls as score work: a predictions file judged by the SAAG cascade and BFCL ground truth per prediction.

A predictions file is JSONL, one prediction per line (or a JSON array of the same objects)::

    {"id": "p1", "example_id": "simple_python_0", "calls": [{"name": "f", "arguments": {"a": 1}}]}
    {"id": "p2", "example_id": "simple_python_0", "text": "<raw model output>"}

``example_id`` defaults to ``id``; several predictions may name one example (e.g. two models).
``calls: []`` or a plain-answer ``text`` is an abstention. ``arguments`` may be a JSON string.

Bad rows are data, not crashes: each becomes a ``Rejection`` (``path:line: message``, ``score.files``)
and the rest of the file is still scored. The caller decides what rejections mean (the CLI exits 2).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from rapidfuzz import process

from saag_opt.errors import DatasetError
from saag_opt.evaluation.categories import CategoryScore, RelevanceSuite, relevance_suite
from saag_opt.model import Example, Prediction
from saag_opt.parse import parse_calls_field, parse_output
from saag_opt.saag import CascadeStats, PredictionReport, aggregate, judge_with_gold
from saag_opt.saag.modes import GroundingMode
from saag_opt.score.files import Rejection, judge_rows

__all__ = [
    "AbstentionCounts", "PredictionRow", "ScoreResult", "ScoreRow", "ScoreSummary", "ScoredPrediction",
    "score_predictions",
]

class PredictionRow(BaseModel):
    """One row of a predictions file (input)."""

    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True)

    id: str = Field(min_length=1)
    """Unique prediction id."""
    example_id: Union[str, None] = Field(default=None, min_length=1)
    """The dataset example this predicts; defaults to ``id``."""
    calls: Union[list[Any], None] = None
    """Structured calls ``[{"name", "arguments"}]``; ``[]`` = abstain. Exclusive with ``text``."""
    text: Union[str, None] = None
    """Raw model output, parsed by ``saag_opt.parse.parse_output``. Exclusive with ``calls``."""

    @model_validator(mode="after")
    def _exactly_one_output(self) -> PredictionRow:
        if (self.calls is None) == (self.text is None):
            raise ValueError("give exactly one of 'calls' or 'text'")
        return self


class ScoreRow(BaseModel):
    """One row of the ``--json`` output: one per accepted prediction."""

    id: str
    """Prediction id."""
    example_id: str
    """Example scored against."""
    category: str
    """The example's category."""
    correct: bool
    """BFCL ground-truth verdict."""
    truth_reason: str
    """``ok`` or why the truth check failed (``value:base``, ``wrong_count``, ...)."""
    parse_status: str
    """``ok`` | ``empty`` (abstained) | ``unparsable``."""
    grounding: str
    """The SAAG stage-3 mode that decided ``cascade.passed``: ``paper`` (default) or ``calibrated``."""
    cascade: dict[str, Any]
    """The SAAG PredictionReport (per-call CascadeReports inside)."""


@dataclass(frozen=True, slots=True)
class ScoredPrediction:
    """One accepted prediction with its verdict and cascade diagnosis."""

    id: str
    example_id: str
    category: str
    correct: bool
    cascade: PredictionReport
    prediction: Prediction
    truth_reason: str = "ok"
    expect: str = "calls"

    def to_row(self) -> ScoreRow:
        """The JSON output row."""
        return ScoreRow(id=self.id, example_id=self.example_id, category=self.category, correct=self.correct,
                        truth_reason=self.truth_reason, parse_status=self.prediction.status,
                        grounding=self.cascade.grounding, cascade=self.cascade.to_dict())


class AbstentionCounts(BaseModel):
    """How often predictions made no call, and whether that was right."""

    abstained: int
    """Predictions with no call (``calls: []`` or a plain-answer text)."""
    abstained_correctly: int
    """... that the truth check accepts (irrelevance-style examples)."""
    abstained_when_call_expected: int
    """... on examples that needed a call (gold calls or ``any_call``)."""
    called_when_no_call_expected: int
    """Predictions that called on an irrelevance-style example."""
    unparsable: int
    """Texts that tried to call but could not be read (stage 1 sees FNEM = -1)."""


class ScoreSummary(BaseModel):
    """What ``OUT.summary.json`` holds."""

    n_predictions: int
    """Accepted predictions."""
    n_rejected: int
    """Rejected rows (see the CLI's rejections panel)."""
    accuracy: Union[float, None]
    """Overall truth accuracy over accepted predictions (None if none)."""
    categories: dict[str, CategoryScore]
    """Per-category truth accuracy."""
    relevance_suite: Union[RelevanceSuite, None]
    """BFCL non-live summary when any of its groups is present."""
    abstentions: AbstentionCounts
    """Abstention counts."""
    cascade: dict[str, Any]
    """Stage funnel and stage-conditional metric means over every call report (CascadeStats)."""
    rejections: list[str]
    """``path:line: message`` for every rejected row."""


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """Everything ``score_predictions`` found: accepted rows, rejections, and their summary."""

    rows: tuple[ScoredPrediction, ...]
    rejections: tuple[Rejection, ...]
    summary: ScoreSummary
    stats: CascadeStats

    def json_rows(self) -> list[dict[str, Any]]:
        """The ``--json`` rows: one ``ScoreRow`` per accepted prediction."""
        return [row.to_row().model_dump(mode="json") for row in self.rows]


def score_predictions(path: str | Path, examples: Sequence[Example], *,
                      grounding: GroundingMode = "paper") -> ScoreResult:
    """Score a predictions file offline: SAAG cascade diagnostics and accuracy against the examples' ground truth.

    ``grounding``: stage 3 of the cascade, ``paper`` (default: the paper's numbers) or ``calibrated``.

    Raises:
        DatasetError: the predictions file does not exist or cannot be read at all.
    """
    by_id = {example.id: example for example in examples}
    first_line: dict[str, int] = {}
    rows, rejections = judge_rows(path, "predictions file not found",
                                  lambda value, line: _score_line(value, by_id, first_line, line, grounding))
    return _result(rows, rejections)


def _score_line(value: Any, by_id: Mapping[str, Example], first_line: dict[str, int],
                line: int, grounding: GroundingMode = "paper") -> ScoredPrediction | str:
    """Score one decoded line, or return why it is rejected."""
    if isinstance(value, DatasetError):
        return _json_message(str(value).split(f":{line}: ", 1)[-1])
    if not isinstance(value, dict):
        return f"row must be a JSON object, got {type(value).__name__}"
    try:
        row = PredictionRow.model_validate(value)
    except ValidationError as exc:
        return _describe(exc)
    if row.id in first_line:
        return f"duplicate id {row.id!r} (first on line {first_line[row.id]})"
    example = by_id.get(row.example_id or row.id)
    if example is None:
        return _unknown_example(row, by_id)
    try:
        prediction = _prediction(row)
    except ValueError as exc:
        return str(exc)
    first_line[row.id] = line
    return _score(row.id, prediction, example, grounding)


def _prediction(row: PredictionRow) -> Prediction:
    """The row's calls: structured (validated) or parsed from raw text."""
    if row.text is not None:
        return parse_output(row.text)
    calls = parse_calls_field(row.calls)
    return Prediction(calls=calls, raw=None, status="ok" if calls else "empty")


def _score(prediction_id: str, prediction: Prediction, example: Example,
           grounding: GroundingMode = "paper") -> ScoredPrediction:
    verdict = judge_with_gold(prediction.calls, example, grounding=grounding)
    return ScoredPrediction(id=prediction_id, example_id=example.id, category=example.category,
                            correct=verdict.correct, cascade=verdict.cascade, prediction=prediction,
                            truth_reason=verdict.reason, expect=example.expect)


def _json_message(message: str) -> str:
    """Jsonlines' wording, minus the decoder's position (it counts lines inside one JSONL line)."""
    message = message.replace("line contains invalid json: ", "invalid JSON: ")
    return _POSITION.sub(r" (at character \1)", message)


_POSITION = re.compile(r": line \d+ column \d+ \(char (\d+)\)$")


def _describe(exc: ValidationError) -> str:
    """One line per pydantic error, phrased for someone editing the file by hand."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            parts.append(f"missing field {loc!r}")
        elif loc:
            parts.append(f"field {loc!r}: {message}")
        else:
            parts.append(message)
    return "; ".join(parts)


def _unknown_example(row: PredictionRow, by_id: Mapping[str, Example]) -> str:
    """Name the missing example and the nearest known id (a typo is the usual cause)."""
    wanted = row.example_id or row.id
    message = f"unknown example_id {wanted!r}"
    if row.example_id is None:
        message += " (taken from 'id'; add 'example_id' when prediction ids differ from example ids)"
    nearest = process.extractOne(wanted, list(by_id)) if by_id else None
    if nearest is not None and nearest[1] >= 60:
        message += f"; nearest: {nearest[0]!r}"
    return message


# ------------------------------------------------------------------------------------ summary


def _result(rows: list[ScoredPrediction], rejections: list[Rejection]) -> ScoreResult:
    stats = aggregate(call for row in rows for call in row.cascade.calls)
    n, categories = len(rows), _categories(rows)
    summary = ScoreSummary(
        n_predictions=n, n_rejected=len(rejections),
        accuracy=sum(r.correct for r in rows) / n if n else None,
        categories=categories, relevance_suite=relevance_suite(categories),
        abstentions=_abstentions(rows), cascade=stats.to_dict(),
        rejections=[str(r) for r in rejections])
    return ScoreResult(rows=tuple(rows), rejections=tuple(rejections), summary=summary, stats=stats)


def _categories(rows: Iterable[ScoredPrediction]) -> dict[str, CategoryScore]:
    totals: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    for row in rows:
        totals[row.category] += 1
        correct[row.category] += row.correct
    return {cat: CategoryScore(n=totals[cat], correct=correct[cat], accuracy=correct[cat] / totals[cat])
            for cat in sorted(totals)}


def _abstentions(rows: Iterable[ScoredPrediction]) -> AbstentionCounts:
    counts: Counter[str] = Counter()
    for row in rows:
        status, no_call = row.prediction.status, row.expect == "no_call"
        counts["abstained"] += status == "empty"
        counts["abstained_correctly"] += status == "empty" and row.correct
        counts["abstained_when_call_expected"] += status == "empty" and not no_call
        counts["called_when_no_call_expected"] += status == "ok" and no_call
        counts["unparsable"] += status == "unparsable"
    return AbstentionCounts(**{name: counts[name] for name in AbstentionCounts.model_fields})
