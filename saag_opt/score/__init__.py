"""The ``score`` verb: a predictions file judged offline by the SAAG cascade and the dataset's own truth."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.score.predictions import (
        AbstentionCounts,
        PredictionRow,
        Rejection,
        ScoredPrediction,
        ScoreResult,
        ScoreRow,
        ScoreSummary,
        score_predictions,
        summary_path,
        write_score_json,
    )
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "predictions": (
            "AbstentionCounts", "PredictionRow", "Rejection", "ScoredPrediction",
            "ScoreResult", "ScoreRow", "ScoreSummary", "score_predictions", "summary_path",
            "write_score_json",
        ),
    })

__all__ = [
    "AbstentionCounts",
    "PredictionRow",
    "Rejection",
    "ScoreResult",
    "ScoreRow",
    "ScoreSummary",
    "ScoredPrediction",
    "score_predictions",
    "summary_path",
    "write_score_json",
]
