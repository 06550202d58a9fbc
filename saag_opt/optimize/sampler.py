"""GEPA's minibatch sampler for the reviewer: every minibatch carries the failures seen so far.

Why: a reviewer is right on most examples, so gepa's epoch-shuffled minibatches are often all
right; gepa then skips the iteration ("All subsample scores perfect") or the reflection LM has
nothing to learn from. ``FailureFirstSampler`` draws train examples in shuffled epochs, as gepa's
own sampler does, but fills up to half of each minibatch (every other minibatch of one) with train
examples whose last review by a pool member went wrong (``feedback.FAILING``), least recently shown
first. It learns the outcomes as a gepa callback (``on_evaluation_end`` of a pool member's minibatch,
read from the feedback metric's ``outcome_class``), so it costs no rollout. Deterministic for a seed;
a resumed run skips the epoch order ahead by the minibatches already drawn (``state.i`` iterations of
``per_iteration`` each) and starts from the failures gepa's trace records (a parent's score of 0 on a
minibatch example), then learns the outcomes again as it goes.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from typing import Any

from saag_opt.optimize.feedback import FAILING


def _item_key(example: Any) -> str | None:
    """The saag item's id inside a dspy.Example (``item=Example`` or ``Episode``)."""
    item = example.get("item") if hasattr(example, "get") else None
    key = getattr(item, "id", None)
    return None if key is None else str(key)


class FailureFirstSampler:
    """A gepa ``BatchSampler`` and callback (module docstring)."""

    def __init__(self, minibatch_size: int, seed: int = 0, *, per_iteration: int = 1) -> None:
        self.minibatch_size, self.per_iteration = minibatch_size, per_iteration
        self.rng = random.Random(seed)
        self._order: list[Any] = []
        self._pos = 0
        self._ids_by_key: dict[str, Any] = {}
        self._failing: dict[Any, str] = {}
        self._last_shown: dict[Any, int] = {}
        self._calls = 0
        self._lock = threading.Lock()

    # -- BatchSampler ------------------------------------------------------------------------------

    def next_minibatch_ids(self, loader: Any, state: Any) -> list[Any]:
        """Up to half known failures (least recently shown), the rest from the shuffled epoch order."""
        ids = list(loader.all_ids())
        if not ids:
            raise ValueError("Cannot sample a minibatch from an empty loader.")
        with self._lock:
            size = min(self.minibatch_size, len(ids))
            if not self._ids_by_key:  # the first call of this process
                for data_id, example in zip(ids, loader.fetch(ids), strict=True):
                    key = _item_key(example)
                    if key is not None:
                        self._ids_by_key[key] = data_id
                for _ in range(int(getattr(state, "i", 0) or 0) * size * self.per_iteration):  # a resume goes on
                    self._fresh(ids)
                self._relearn(getattr(state, "full_program_trace", None) or (), set(ids))
            self._calls += 1
            failing = sorted((i for i in self._failing if i in ids), key=lambda i: (self._last_shown.get(i, -1), str(i)))
            batch = failing[: size // 2 if size > 1 else self._calls % 2]
            while len(batch) < size:
                candidate = self._fresh(ids)
                if candidate not in batch:
                    batch.append(candidate)
            for data_id in batch:
                self._last_shown[data_id] = self._calls
            return batch

    def _fresh(self, ids: list[Any]) -> Any:
        """The next id of the shuffled epoch order (a new epoch, shuffled again, when one is used up)."""
        if self._pos >= len(self._order) or set(self._order) != set(ids):
            self._order = list(ids)
            self.rng.shuffle(self._order)
            self._pos = 0
        self._pos += 1
        return self._order[self._pos - 1]

    def _relearn(self, trace: Any, ids: set[Any]) -> None:
        """A resumed run's failures from gepa's trace: the parent's score per minibatch example, latest last.

        Why: the outcome classes the callback learned died with the stopped process, and without them the
        first minibatches after a resume are drawn blind (gepa then skips "perfect" ones). A score of 0
        (final call wrong) stands for a failing outcome here (``error``-free, class unknown: ``wrong``).
        """
        for entry in trace:
            for task in (entry.get("tasks") or [entry]) if isinstance(entry, Mapping) else ():
                scores = task.get("subsample_scores") or ()
                for data_id, score in zip(task.get("subsample_ids") or (), scores, strict=False):
                    if data_id not in ids:
                        continue
                    if score == 0:
                        self._failing[data_id] = "wrong"
                    else:
                        self._failing.pop(data_id, None)
                    self._last_shown[data_id] = int(entry.get("i", 0)) - len(trace)

    # -- gepa callback -----------------------------------------------------------------------------

    def on_evaluation_end(self, event: Mapping[str, Any]) -> None:
        """Learn each minibatch example's outcome from a pool member's traced evaluation."""
        if event.get("candidate_idx") is None:  # a proposal's evaluation: not a pool member (yet)
            return
        for trajectory in event.get("trajectories") or ():
            if not isinstance(trajectory, Mapping):
                continue
            key = _item_key(trajectory.get("example"))
            score = trajectory.get("score")
            cls = score.get("outcome_class") if score is not None and hasattr(score, "get") else None
            with self._lock:
                data_id = self._ids_by_key.get(key) if key is not None else None
                if data_id is None or not isinstance(cls, str):
                    continue
                if cls in FAILING:
                    self._failing[data_id] = cls
                else:
                    self._failing.pop(data_id, None)

    @property
    def failing(self) -> dict[Any, str]:
        """Train ids whose last review went wrong, with the outcome class."""
        with self._lock:
            return dict(self._failing)


__all__ = ["FailureFirstSampler"]
