"""Evaluation: score saved predictions offline (SAAG cascade + BFCL truth); runs and help/harm live beside it."""

from saag_opt.evaluation.config import EvaluateConfig
from saag_opt.evaluation.helpharm import HelpHarm, bootstrap_net_change_ci, bootstrap_rate_ci, mcnemar_exact
from saag_opt.evaluation.results import (
    ConditionSummary,
    EvaluationSummary,
    ExampleRecord,
    read_records,
    read_run,
)
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

__all__ = [
    "ConditionSummary",
    "EvaluateConfig",
    "EvaluationResult",
    "EvaluationSummary",
    "ExampleRecord",
    "HelpHarm",
    "bootstrap_net_change_ci",
    "bootstrap_rate_ci",
    "mcnemar_exact",
    "read_records",
    "read_run",
    "run_evaluation",
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
