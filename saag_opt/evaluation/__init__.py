"""Evaluation: score saved predictions offline (SAAG cascade + BFCL truth); runs and help/harm live beside it."""

from saag_opt.evaluation.score import (
    AbstentionCounts,
    CategoryScore,
    PredictionRow,
    Rejection,
    RelevanceSuite,
    ScoredPrediction,
    ScoreResult,
    ScoreRow,
    ScoreSummary,
    relevance_suite,
    score_predictions,
    summary_path,
    write_score_json,
)

__all__ = [
    "AbstentionCounts",
    "CategoryScore",
    "PredictionRow",
    "Rejection",
    "RelevanceSuite",
    "ScoreResult",
    "ScoreRow",
    "ScoreSummary",
    "ScoredPrediction",
    "relevance_suite",
    "score_predictions",
    "summary_path",
    "write_score_json",
]
