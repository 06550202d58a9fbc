"""The ``evaluate`` verb: a review set-up over a dataset's single calls or conversations, as a run directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.evaluate.calls import EvaluationResult, run_evaluation
    from saag_opt.evaluate.config import EvaluateConfig
    from saag_opt.evaluate.run import evaluate
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "calls": ("EvaluationResult", "run_evaluation"),
        "config": ("EvaluateConfig",),
        "run": ("evaluate",),
    })

__all__ = ["EvaluateConfig", "EvaluationResult", "evaluate", "run_evaluation"]
