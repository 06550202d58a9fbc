"""GEPA over the reviewer's instructions: the student program, its work (calls or conversations), budgets, the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.optimize.budget import (
        auto_metric_calls,
        estimate_gepa,
        estimate_run,
        resolve_metric_calls,
    )
    from saag_opt.optimize.callbacks import ArtifactWriter, CostStopper, FatalStopper
    from saag_opt.optimize.calls import ReviewStep, RolloutView, build_feedback, metric, view_outcome
    from saag_opt.optimize.config import OptimizeConfig
    from saag_opt.optimize.feedback import OutcomeClass, classify_outcome
    from saag_opt.optimize.program import ReviewerProgram, RolloutContext, to_dspy_examples
    from saag_opt.optimize.rollouts import Work, work_for
    from saag_opt.optimize.run import OptimizeResult, run_optimize
    from saag_opt.optimize.wiring import GepaSettings, build_gepa, compile_gepa
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "budget": (
            "auto_metric_calls", "estimate_gepa", "estimate_run",
            "resolve_metric_calls",
        ),
        "callbacks": ("ArtifactWriter", "CostStopper", "FatalStopper"),
        "calls": ("ReviewStep", "RolloutView", "build_feedback", "metric", "view_outcome"),
        "config": ("OptimizeConfig",),
        "feedback": ("OutcomeClass", "classify_outcome"),
        "program": ("ReviewerProgram", "RolloutContext", "to_dspy_examples"),
        "rollouts": ("Work", "work_for"),
        "run": ("OptimizeResult", "run_optimize"),
        "wiring": ("GepaSettings", "build_gepa", "compile_gepa"),
    })

__all__ = [
    "ArtifactWriter",
    "CostStopper",
    "FatalStopper",
    "GepaSettings",
    "OptimizeConfig",
    "OptimizeResult",
    "OutcomeClass",
    "ReviewStep",
    "ReviewerProgram",
    "RolloutContext",
    "RolloutView",
    "Work",
    "auto_metric_calls",
    "build_feedback",
    "build_gepa",
    "classify_outcome",
    "compile_gepa",
    "estimate_gepa",
    "estimate_run",
    "metric",
    "resolve_metric_calls",
    "run_optimize",
    "to_dspy_examples",
    "view_outcome",
    "work_for",
]
