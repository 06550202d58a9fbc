"""The evaluate verb on either kind of dataset: single calls (``runner``) or conversations (``episode_run``).

Which kind a run is gets asked here once: a new run by its dataset spec, a resumed one by its run
directory (docs/design.md §18). ``saag_opt.evaluate`` and ``saag-opt evaluate`` are ``evaluate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from saag_opt.data.catalog import is_multi_turn_dataset
from saag_opt.evaluate.calls import EvaluationResult, preflight, run_evaluation
from saag_opt.evaluate.config import EvaluateConfig, resume_config
from saag_opt.evaluate.conversations import (
    MultiTurnResult,
    is_multi_turn_run,
    multi_turn_resume_config,
    preflight_multi_turn,
    run_multi_turn,
)
from saag_opt.evaluation.estimate import Estimate
from saag_opt.events import EventSink


def evaluate(config: EvaluateConfig, *, on_event: EventSink | None = None, args_passed: dict[str, Any] | None = None,
             resume: Path | None = None) -> EvaluationResult | MultiTurnResult:
    """Run the base agent with and without a reviewer mechanism on a dataset and write its run directory.

    A single-call dataset gives an ``EvaluationResult`` (``runner.run_evaluation``), a multi-turn
    one a ``MultiTurnResult`` (``episode_run.run_multi_turn``); both carry ``run_dir`` and ``summary``.

    Args:
        config: what to measure and how, e.g. ``EvaluateConfig(base="gpt-4o", reviewer="gpt-5-mini", limit=20)``.
        on_event: called with each progress event (``saag_opt.events``).
        args_passed: the options the user set, recorded in ``run.json``.
        resume: continue this run directory (``config`` then comes from ``resume_evaluate_config``).

    Raises:
        ConfigError: a bad dataset, split, prompt or mechanism.
        ModelUnavailableError: a model cannot be reached (missing key, dead server).
        RunError: the run directory cannot be written or resumed.
        RunFailed: every example failed.
    """
    if _multi_turn(config.dataset, resume):
        return run_multi_turn(config, on_event=on_event, args_passed=args_passed, resume=resume)
    return run_evaluation(config, on_event=on_event, args_passed=args_passed, resume=resume)


def preflight_evaluate(config: EvaluateConfig) -> Estimate:
    """``--dry-run``: the expected LM calls, tokens and dollars by role; loads the data, opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``evaluate`` would, before any work.
    """
    return preflight_multi_turn(config) if _multi_turn(config.dataset, None) else preflight(config)


def resume_evaluate_config(run_dir: Path, passed: Mapping[str, Any] | None = None) -> EvaluateConfig:
    """The configuration an evaluate run of either kind continues with: its ``run.json``'s, plus ``passed``'s run options.

    Raises:
        RunError: ``run_dir`` is not an evaluate run, or its ``run.json`` cannot be read.
        ConfigError: ``passed`` contradicts the recorded configuration.
    """
    return multi_turn_resume_config(run_dir, passed) if _multi_turn("", run_dir) else resume_config(run_dir, passed)


def _multi_turn(dataset: str, resume: Path | None) -> bool:
    """Conversations or single calls: by the run being resumed, else by the dataset."""
    return is_multi_turn_run(resume) if resume is not None else is_multi_turn_dataset(dataset)


__all__ = ["evaluate", "preflight_evaluate", "resume_evaluate_config"]
