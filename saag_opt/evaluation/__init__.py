"""Evaluation: score saved predictions offline (SAAG cascade + BFCL truth); runs and help/harm live beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.evaluation.config import EvaluateConfig
    from saag_opt.evaluation.helpharm import HelpHarm, bootstrap_net_change_ci, bootstrap_rate_ci, mcnemar_exact
    from saag_opt.evaluation.results import ConditionSummary, EvaluationSummary, ExampleRecord, read_records, read_run
    from saag_opt.evaluation.runner import EvaluationResult, run_evaluation
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
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "config": ("EvaluateConfig",),
        "helpharm": ("HelpHarm", "bootstrap_net_change_ci", "bootstrap_rate_ci", "mcnemar_exact"),
        "results": ("ConditionSummary", "EvaluationSummary", "ExampleRecord", "read_records", "read_run"),
        "runner": ("EvaluationResult", "run_evaluation"),
        "score": (
            "AbstentionCounts", "CategoryScore", "PredictionRow", "Rejection", "RelevanceSuite", "ScoredPrediction",
            "ScoreResult", "ScoreRow", "ScoreSummary", "relevance_suite", "score_predictions", "summary_path",
            "write_score_json",
        ),
    })

__all__ = [
    "AbstentionCounts",
    "CategoryScore",
    "ConditionSummary",
    "EvaluateConfig",
    "EvaluationResult",
    "EvaluationSummary",
    "ExampleRecord",
    "HelpHarm",
    "PredictionRow",
    "Rejection",
    "RelevanceSuite",
    "ScoreResult",
    "ScoreRow",
    "ScoreSummary",
    "ScoredPrediction",
    "bootstrap_net_change_ci",
    "bootstrap_rate_ci",
    "mcnemar_exact",
    "read_records",
    "read_run",
    "relevance_suite",
    "run_evaluation",
    "score_predictions",
    "summary_path",
    "write_score_json",
]
