"""Live optimize progress from GEPA's own callbacks (gepa 0.1.4 ``GEPACallback`` events).

``GepaProgress`` turns budget, acceptance and val-evaluation events into ``progress`` events with
the numbers a user watches: rollouts used of the budget, candidates accepted, the best val score
and the live spend (every role, from the run's ledger). The CLI draws them as a rich bar; tests
and other observers read the same events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any


class GepaProgress:
    """gepa callback -> ``emit("progress", ...)``; observer faults never reach GEPA (``emit`` swallows them)."""

    def __init__(self, emit_progress: Callable[..., None], *, budget: int, spent: Callable[[], float],
                 accepted: int = 0) -> None:
        self._emit = emit_progress
        self.budget = budget
        self._spent = spent
        self._lock = threading.Lock()
        self.rollouts = 0
        self.accepted = accepted  # a resumed run starts with the candidates found before
        self.best_val: float | None = None
        self.iteration = 0

    def snapshot(self) -> dict[str, Any]:
        """The numbers of the last event (what the bar shows)."""
        return {"rollouts": self.rollouts, "budget": self.budget, "accepted": self.accepted,
                "best_val": self.best_val, "spent": round(self._spent(), 6), "iteration": self.iteration}

    def _send(self) -> None:
        data = self.snapshot()
        best = "-" if data["best_val"] is None else f"{data['best_val']:.3f}"
        self._emit(f"{data['rollouts']}/{data['budget']} rollouts, {data['accepted']} accepted, best val {best}, "
                   f"${data['spent']:.4f}", **data)

    def on_budget_updated(self, event: Mapping[str, Any]) -> None:
        """Rollouts used so far (cumulative over resumes)."""
        with self._lock:
            self.rollouts = int(event.get("metric_calls_used", self.rollouts))
        self._send()

    def on_candidate_accepted(self, event: Mapping[str, Any]) -> None:
        """One more candidate entered the pool."""
        with self._lock:
            self.accepted += 1
        self._send()

    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        """A candidate's full val score (the seed's first)."""
        with self._lock:
            score = float(event.get("average_score", 0.0))
            self.best_val = score if self.best_val is None else max(self.best_val, score)
        self._send()

    def on_iteration_start(self, event: Mapping[str, Any]) -> None:
        """The iteration number (shown by the bar's description)."""
        with self._lock:
            self.iteration = int(event.get("iteration", self.iteration))
        self._send()


__all__ = ["GepaProgress"]
