"""The evaluation-side verdict on one prediction: BFCL truth plus the gold-aware SAAG diagnosis.

Both halves read the gold (the truth check compares against the gold calls; the diagnosis reads
``example.expect``), hence the name. Scoring files, evaluate runs and compare runs judge through
``judge_with_gold``; nothing it returns may reach a base agent or a reviewer, which see only
``check_calls`` (registry and query).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from saag_opt.model import Example, ToolCall
from saag_opt.saag.cascade import PredictionReport, diagnose_with_gold
from saag_opt.saag.modes import GroundingMode
from saag_opt.saag.truth import check_truth

__all__ = ["GoldJudgement", "judge_with_gold"]


@dataclass(frozen=True, slots=True)
class GoldJudgement:
    """Is the prediction right (and why not), and how far it got through the SAAG cascade."""

    correct: bool
    reason: str
    cascade: PredictionReport


def judge_with_gold(calls: Sequence[ToolCall], example: Example, *,
                    grounding: GroundingMode = "paper") -> GoldJudgement:
    """Truth check and gold-aware cascade of ``calls`` against ``example`` (reads the gold).

    ``grounding``: stage 3 of the cascade (``paper`` keeps the paper's numbers; ``calibrated``).
    """
    truth = check_truth(calls, example)
    return GoldJudgement(truth.correct, truth.reason, diagnose_with_gold(calls, example, grounding=grounding))
