"""What every verb measures with: run records and summaries, help/harm statistics, pre-flight estimates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.evaluation.categories import CategoryScore, RelevanceSuite, relevance_suite
    from saag_opt.evaluation.helpharm import HelpHarm, bootstrap_net_change_ci, bootstrap_rate_ci, mcnemar_exact
    from saag_opt.evaluation.results import ConditionSummary, EvaluationSummary, ExampleRecord, read_records, read_run
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "categories": ("CategoryScore", "RelevanceSuite", "relevance_suite"),
        "helpharm": ("HelpHarm", "bootstrap_net_change_ci", "bootstrap_rate_ci", "mcnemar_exact"),
        "results": ("ConditionSummary", "EvaluationSummary", "ExampleRecord", "read_records", "read_run"),
    })

__all__ = [
    "CategoryScore",
    "RelevanceSuite",
    "relevance_suite",
    "ConditionSummary",
    "EvaluationSummary",
    "ExampleRecord",
    "HelpHarm",
    "bootstrap_net_change_ci",
    "bootstrap_rate_ci",
    "mcnemar_exact",
    "read_records",
    "read_run",
]
