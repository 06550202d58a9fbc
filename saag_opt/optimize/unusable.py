"""Reviewer replies that could not be read, per phase of an optimize run: GEPA's rollouts and the TEST phase.

Why: in a rollout such a reply reaches only GEPA's feedback ("reviewer error"); a weak or broken
reviewer would otherwise look harmless in optimize's own tables. ``RolloutContext`` counts them as
rollouts run; ``RolloutCountSaver`` keeps ``<run>/rollouts.json`` current after every GEPA iteration,
so a resumed run reports the whole run (a resume re-runs the seed's val evaluation once; those
rollouts count again, as they ran again). The TEST phase's counts are its compare run's
``reviewer_unusable`` per side, the same field evaluate and compare report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from saag_opt.atomic import atomic_write_json
from saag_opt.errors import RunError
from saag_opt.optimize.summary import RolloutCounts, TestComparison, UnusableByPhase
from saag_opt.runfiles import read_model

ROLLOUTS_FILE = "rollouts.json"


def restore_counts(context: Any, run_dir: Path) -> None:
    """Add the counts an earlier attempt of this run saved (none for a new run, or an unreadable file)."""
    path = run_dir / ROLLOUTS_FILE
    try:
        counts = read_model(path, RolloutCounts) if path.is_file() else None
    except RunError:  # an unreadable earlier count: this attempt counts from zero
        return
    if counts is not None:
        context.restore(counts.model_dump())


class RolloutCountSaver:
    """gepa callback: rewrite ``rollouts.json`` after every iteration (what a resume restores)."""

    def __init__(self, run_dir: Path, context: Any) -> None:
        self.run_dir = run_dir
        self.context = context

    def on_iteration_end(self, event: Any) -> None:
        """Save the rollout counts."""
        save_counts(self.run_dir, self.context)


def save_counts(run_dir: Path, context: Any) -> dict[str, int]:
    """Write ``rollouts.json`` (atomically) and return the counts."""
    counts: dict[str, int] = context.counts()
    atomic_write_json(run_dir / ROLLOUTS_FILE, counts)
    return counts


def unusable_by_phase(rollouts: Mapping[str, int], test: TestComparison | None) -> UnusableByPhase:
    """``summary.json``'s ``reviewer_unusable``: GEPA rollouts (train and val) and TEST (seed, best).

    ``test`` is None when the TEST phase did not run (``--no-test``, or the cap stopped it).
    """
    comparison = test.comparison if test is not None else None
    on_test = None if comparison is None else {"seed": comparison.a.accuracy.reviewer_unusable,
                                               "best": comparison.b.accuracy.reviewer_unusable}
    return UnusableByPhase(gepa_rollouts=RolloutCounts.model_validate(dict(rollouts)), test=on_test)


__all__ = ["ROLLOUTS_FILE", "RolloutCountSaver", "restore_counts", "save_counts", "unusable_by_phase"]
