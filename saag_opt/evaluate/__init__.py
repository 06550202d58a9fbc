"""The ``evaluate`` verb: a review set-up over a dataset's single calls or conversations, as a run directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.evaluate.config import EvaluateConfig, resume_config
    from saag_opt.evaluate.run import EvaluationResult, preflight_evaluate, run_evaluation
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "config": ("EvaluateConfig", "resume_config"),
        "run": ("EvaluationResult", "preflight_evaluate", "run_evaluation"),
    })

__all__ = ["EvaluateConfig", "EvaluationResult", "preflight_evaluate", "resume_config", "run_evaluation"]
