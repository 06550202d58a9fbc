"""Reviewer replies that could not be read, per phase of an optimize run: GEPA's rollouts and the TEST phase.

Why: in a rollout such a reply reaches only GEPA's feedback ("reviewer error"); a weak or broken
reviewer would otherwise look harmless in optimize's own tables. ``RolloutContext`` counts them as
rollouts run; ``RolloutCountSaver`` keeps ``<run>/rollouts.json`` current after every GEPA iteration,
so a resumed run reports the whole run (a resume re-runs the seed's val evaluation once; those
rollouts count again, as they ran again). The TEST phase's counts are its compare run's
``reviewer_unusable`` per side, the same field evaluate and compare report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from saag_opt.runfiles import atomic_write_json

ROLLOUTS_FILE = "rollouts.json"


def restore_counts(context: Any, run_dir: Path) -> None:
    """Add the counts an earlier attempt of this run saved (none for a new run, or an unreadable file)."""
    try:
        counts = json.loads((run_dir / ROLLOUTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(counts, dict):
        context.restore(counts)


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


def unusable_by_phase(rollouts: Mapping[str, int], test: Mapping[str, Any] | None) -> dict[str, Any]:
    """``summary.json``'s ``reviewer_unusable``: GEPA rollouts (train and val) and TEST (seed, best).

    ``test`` is None when the TEST phase did not run (``--no-test``, or the cap stopped it).
    """
    comparison = (test or {}).get("comparison") or {}
    on_test = None
    if comparison:
        on_test = {name: int(((comparison.get(key) or {}).get("accuracy") or {}).get("reviewer_unusable") or 0)
                   for name, key in (("seed", "a"), ("best", "b"))}
    return {"gepa_rollouts": dict(rollouts), "test": on_test}


__all__ = ["ROLLOUTS_FILE", "RolloutCountSaver", "restore_counts", "save_counts", "unusable_by_phase"]
