"""GEPA callbacks: save each accepted candidate as a prompt version; stop on a systemic fault or the spend cap."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from saag_opt.errors import RunError
from saag_opt.events import EventSink, emit
from saag_opt.runfiles import atomic_write_json


class ArtifactWriter:
    """gepa callback: each candidate added to the pool becomes a prompt version.

    ``on_valset_evaluated`` fires for the seed (index 0, already an artifact) and for every accepted
    or merged candidate, with its full val score and parents. The candidate index -> version map is
    persisted (atomically) in ``<run>/artifacts.json``, so a resumed run knows the versions of
    candidates found before the crash; ``PromptStore.save_new(dedupe=True)`` makes re-accepting an
    identical candidate after a crash return the saved version instead of a duplicate. Beside the
    map it keeps each candidate's per-example val scores (``val_scores``), from which the HTML
    report marks GEPA's Pareto front.
    """

    def __init__(self, store: Any, *, seed_version: Any, map_path: Path, metadata: Mapping[str, Any],
                 spent: Callable[[], float], sink: EventSink | None = None, cap: Any = None) -> None:
        self.store = store
        self.cap = cap
        self.val_means: dict[int, float] = {}
        self.incomplete: list[int] = []
        self.seed = seed_version
        self.map_path = map_path
        self.metadata = dict(metadata)
        self._spent = spent
        self._sink = sink
        self._lock = threading.Lock()
        self.metric_calls = 0
        self.errors: list[str] = []
        self.versions: dict[int, str] = {0: seed_version.version}
        self.val_scores: dict[int, dict[str, float]] = {}
        if map_path.is_file():
            try:
                saved = json.loads(map_path.read_text(encoding="utf-8"))
                self.versions.update({int(k): v for k, v in saved.get("versions", {}).items()})
                self.val_scores.update({int(k): v for k, v in saved.get("val_scores", {}).items()})
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                raise RunError(f"{map_path}: unreadable ({exc}); it maps GEPA candidates to the prompt versions "
                               "already saved, so a resume cannot go on without it: start a new run") from exc

    def on_budget_updated(self, event: Mapping[str, Any]) -> None:
        """Remember the cumulative rollout count (recorded as the candidate's discovery cost)."""
        self.metric_calls = int(event.get("metric_calls_used", self.metric_calls))

    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        """Save a prompt version for a new pool member (never raises: errors are kept for the run)."""
        idx = int(event["candidate_idx"])
        if self.cap is not None and self.cap.reached:  # some rollouts were refused: the score is not real
            self.incomplete.append(idx)
            return
        with self._lock:  # per-example val scores (persisted with the next version): the report's Pareto marks
            self.val_scores[idx] = {str(k): float(v) for k, v in (event.get("scores_by_val_id") or {}).items()}
            self.val_means[idx] = float(event["average_score"])
        if idx == 0:
            return
        try:
            self._save(idx, event)
        except Exception as exc:  # noqa: BLE001 - reported by run_optimize after GEPA returns
            self.errors.append(f"candidate {idx}: {type(exc).__name__}: {exc}")

    def _save(self, idx: int, event: Mapping[str, Any]) -> None:
        parents = [self.versions[p] for p in event.get("parent_ids") or () if p is not None and p in self.versions]
        instructions = dict(self.seed.instructions)
        instructions.update({k.removeprefix("reviewer."): v for k, v in event["candidate"].items()})
        scores = {"val_accuracy": round(float(event["average_score"]), 6),
                  "val_examples": int(event.get("num_examples_evaluated", 0)), "gepa_candidate": idx,
                  "gepa_iteration": int(event.get("iteration", 0))}
        cost = {"usd_so_far": round(self._spent(), 6), "metric_calls_so_far": self.metric_calls}
        with self._lock:
            version = self.store.save_new(self.seed.program, instructions, parents=parents or [self.seed.version],
                                          source="gepa", scores=scores, cost=cost, **self.metadata)
            self.versions[idx] = version.version
            atomic_write_json(self.map_path, {"versions": {str(k): v for k, v in sorted(self.versions.items())},
                                              "val_scores": {str(k): v for k, v in sorted(self.val_scores.items())}})
        emit(self._sink, "candidate", f"candidate {idx} -> {version.ref} (val {scores['val_accuracy']:.3f})",
             candidate=idx, version=version.version, parents=parents, val_accuracy=scores["val_accuracy"])


    def best_saved(self) -> str:
        """The saved version with the highest complete val score (the seed when none beats it).

        Scores seen in this process come from GEPA's events; versions saved by an earlier attempt of
        a resumed run carry theirs in the store.
        """
        scores: dict[int, float] = {}
        for idx, version in self.versions.items():
            if idx in self.val_means:
                scores[idx] = self.val_means[idx]
            elif idx:
                stored = self.store.get(self.seed.program, version).scores.get("val_accuracy")
                if isinstance(stored, (int, float)):
                    scores[idx] = float(stored)
        return self.versions[max(scores, key=lambda i: (scores[i], -i))] if scores else self.seed.version


class FatalStopper:
    """gepa stop callback: end the run when a rollout hit a systemic fault (missing key, dead server)."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def __call__(self, gepa_state: Any) -> bool:
        """True once the context recorded a fatal error."""
        return self.context.fatal is not None


class CostStopper:
    """gepa stop callback: end the run at the next iteration boundary once the spend cap refused a call.

    The cap itself is enforced per LM call (``lm.spendcap.SpendCap``: nothing is sent that could
    pass ``--max-cost``); this only stops GEPA from starting iterations whose calls would all be
    refused, and reports the stop once.
    """

    def __init__(self, cap: Any, *, on_stop: Callable[[str], None] | None = None) -> None:
        self.cap = cap
        self._on_stop = on_stop
        self.stopped = False
        self.stopped_at: float | None = None

    def __call__(self, gepa_state: Any) -> bool:
        """True once the cap has been reached."""
        if not self.cap.reached:
            return False
        if not self.stopped:
            self.stopped, self.stopped_at = True, time.time()
            if self._on_stop is not None:
                self._on_stop(self.cap.message())
        return True


__all__ = ["ArtifactWriter", "CostStopper", "FatalStopper"]
