"""The pure SAAG core: the three-stage cascade, its metrics and its corrections.

No LM, no network, no file I/O; imports only ``saag_opt.model``, ``saag_opt.choices``, the
standard library and rapidfuzz (tests enforce it).

The core memoises per query, tool and example (that is what makes a second prediction for the
same example cheap); ``clear_caches()`` empties all of it, e.g. before timing new predictions.
"""

from saag_opt.model import CascadeReport
from saag_opt.saag import truth as _truth  # noqa: F401 - registers its plan cache with clear_caches
from saag_opt.saag.caches import clear_caches
from saag_opt.saag.cascade import (
    CascadeStats,
    MetricMean,
    PredictionReport,
    aggregate,
    check_calls,
    correction_for,
    diagnose_with_gold,
    metric_values,
    run_cascade,
    unanchored,
)
from saag_opt.saag.conformance import fnem, ncs, resolve_tool
from saag_opt.saag.corrections import closest_span, psi1, psi2, psi3
from saag_opt.saag.grounding import GroundingResult, check_grounding, exact_match, query_context
from saag_opt.saag.judgement import GoldJudgement, judge_with_gold
from saag_opt.saag.modes import CALIBRATION_RULES, INTERVENTION_GROUNDING, GroundingMode
from saag_opt.saag.structure import DRIFT_THRESHOLD, StructureResult, check_structure, split_call

__all__ = [
    "CALIBRATION_RULES",
    "INTERVENTION_GROUNDING",
    "DRIFT_THRESHOLD",
    "CascadeReport",
    "CascadeStats",
    "GoldJudgement",
    "GroundingMode",
    "GroundingResult",
    "MetricMean",
    "PredictionReport",
    "StructureResult",
    "aggregate",
    "check_calls",
    "check_grounding",
    "check_structure",
    "clear_caches",
    "closest_span",
    "correction_for",
    "diagnose_with_gold",
    "exact_match",
    "fnem",
    "judge_with_gold",
    "metric_values",
    "ncs",
    "psi1",
    "psi2",
    "psi3",
    "query_context",
    "resolve_tool",
    "run_cascade",
    "split_call",
    "unanchored",
]
