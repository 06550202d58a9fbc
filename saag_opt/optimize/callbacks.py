"""GEPA callbacks: each accepted (or quarantined) candidate a prompt version; stop on a systemic fault or the cap."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from saag_opt.agents.report_note import version_instructions
from saag_opt.artifacts.store import content_hash
from saag_opt.atomic import atomic_write_json
from saag_opt.errors import RunError, SaagOptError, validation_message
from saag_opt.events import EventSink, emit
from saag_opt.optimize.candidates import from_state
from saag_opt.optimize.rails import pick_best
from saag_opt.optimize.summary import CandidateHelpHarm, CandidateMap, QuarantineLog
from saag_opt.runfiles import read_model


class ArtifactWriter:
    """gepa callback: each candidate added to the pool becomes a prompt version.

    ``on_valset_evaluated`` fires for the seed (index 0, already an artifact) and for every accepted
    or merged candidate, with its full val score and parents. The candidate index -> version map is
    persisted (atomically) in ``<run>/artifacts.json``, so a resumed run knows the versions of
    candidates found before the crash; ``PromptStore.save_new(dedupe=True)`` makes re-accepting an
    identical candidate after a crash return the saved version instead of a duplicate. Beside the
    map it keeps each candidate's per-example val scores (``val_scores``), from which the HTML
    report marks GEPA's val-instance frontier, and its help/harm on val (``candidates``).

    Help/harm come from gepa's state (``optimize.candidates``). A new candidate's counts are there
    when its ``on_valset_evaluated`` fires (the state seen at ``on_iteration_start`` is the one gepa
    updates), so its version's ``scores`` carry ``val_fixed`` and ``val_broken``. The seed's counts,
    and those of candidates a resumed run reloads from gepa's checkpoint, are known only at
    ``on_iteration_end`` / ``on_optimization_end``, after their versions were saved: saved versions
    are immutable, so for those ``artifacts.json`` and ``summary.json`` alone carry the counts.
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
        self.candidates: dict[int, CandidateHelpHarm] = {}
        """Help/harm on val per saved candidate (read back on resume, refreshed from gepa's state)."""
        self._state: Any = None
        self._sha256: dict[str, str] = {}
        if map_path.is_file():
            try:
                saved = read_model(map_path, CandidateMap)
            except RunError as exc:
                cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
                raise RunError(f"{map_path}: unreadable ({validation_message(cause, whole='file')}); it maps GEPA "
                               "candidates to the prompt versions already saved, so a resume cannot go on without "
                               "it: start a new run") from exc
            self.versions.update(saved.versions)
            self.val_scores.update(saved.val_scores)
            self.candidates.update(saved.candidates)
        self.quarantine_path = map_path.with_name(QUARANTINE_FILE)
        self.quarantined: list[dict[str, Any]] = _read_quarantined(self.quarantine_path)
        """Proposals the rails refused, in order: ``{"version", "sha256", "parent", "iteration"}``."""

    def on_budget_updated(self, event: Mapping[str, Any]) -> None:
        """Remember the cumulative rollout count (recorded as the candidate's discovery cost)."""
        self.metric_calls = int(event.get("metric_calls_used", self.metric_calls))

    def on_iteration_start(self, event: Mapping[str, Any]) -> None:
        """Keep gepa's state: a new candidate's val counts are in it when its ``on_valset_evaluated`` fires."""
        self._state = event.get("state")

    def on_iteration_end(self, event: Mapping[str, Any]) -> None:
        """Record the help/harm of every saved candidate (a resumed run's reloaded ones included)."""
        self.record_state(event.get("state"))

    def on_optimization_end(self, event: Mapping[str, Any]) -> None:
        """The same, for a run that ended before its first iteration (the seed alone)."""
        self.record_state(event.get("final_state"))

    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        """Save a prompt version for a new pool member (never raises: errors are kept for the run)."""
        idx = int(event["candidate_idx"])
        if self.cap is not None and self.cap.reached:  # some rollouts were refused: the score is not real
            self.incomplete.append(idx)
            return
        with self._lock:  # per-example val scores (persisted with the next version): the frontier marks
            self.val_scores[idx] = {str(k): float(v) for k, v in (event.get("scores_by_val_id") or {}).items()}
            self.val_means[idx] = float(event["average_score"])
        if idx == 0:
            return
        try:
            self._save(idx, event)
        except Exception as exc:  # noqa: BLE001 - reported by run_optimize after GEPA returns
            self.errors.append(f"candidate {idx}: {type(exc).__name__}: {exc}")

    def record_state(self, state: Any) -> None:
        """Help/harm of each saved candidate in gepa's state, persisted when it changed (never raises).

        Only candidates with a version count: one whose val evaluation the cap cut short has no real
        score (``incomplete``), and one whose text in the state is not its version's (a resume whose
        checkpoint was set aside starts the pool again, so an index may name another text) has none
        yet. A failure is a warning: the run and its versions stand without it.
        """
        if state is None:
            return
        try:
            with self._lock:
                found = {}
                for idx, version in self.versions.items():
                    if idx in self.incomplete or not self._is_version_of(state, idx, version):
                        continue
                    counts = from_state(state, idx, version)
                    if counts is not None:
                        found[idx] = counts
                if all(self.candidates.get(idx) == c for idx, c in found.items()):
                    return
                self.candidates.update(found)
                self._write_map()
        except Exception as exc:  # noqa: BLE001 - a callback must not stop GEPA
            emit(self._sink, "warning", f"help/harm of the GEPA candidates not recorded: {type(exc).__name__}: "
                 f"{exc}")

    def _is_version_of(self, state: Any, idx: int, version: str) -> bool:
        """Candidate ``idx`` of the state has the text of prompt version ``version`` (hashes kept per version)."""
        if idx >= len(state.program_candidates):
            return False
        if idx == 0:
            return True  # the seed is the seed in every state
        if version not in self._sha256:
            self._sha256[version] = self.store.get(self.seed.program, version).sha256
        text = version_instructions(self.seed.instructions, state.program_candidates[idx])
        return content_hash(self.seed.program, text) == self._sha256[version]

    def candidate_list(self) -> list[CandidateHelpHarm]:
        """The recorded help/harm in index order (what ``summary.json`` lists)."""
        return [self.candidates[idx] for idx in sorted(self.candidates)]

    def _save(self, idx: int, event: Mapping[str, Any]) -> None:
        parents = [self.versions[p] for p in event.get("parent_ids") or () if p is not None and p in self.versions]
        instructions = version_instructions(self.seed.instructions, event["candidate"])
        counts = self._counts_now(idx, event["candidate"])
        scores = {"val_accuracy": round(float(event["average_score"]), 6),
                  "val_examples": int(event.get("num_examples_evaluated", 0)), "gepa_candidate": idx,
                  "gepa_iteration": int(event.get("iteration", 0))}
        if counts is not None:
            scores |= {"val_fixed": counts.fixed, "val_broken": counts.broken}
        cost = {"usd_so_far": round(self._spent(), 6), "metric_calls_so_far": self.metric_calls}
        with self._lock:
            version = self.store.save_new(self.seed.program, instructions, parents=parents or [self.seed.version],
                                          source="gepa", scores=scores, cost=cost, **self.metadata)
            self.versions[idx] = version.version
            self._sha256[version.version] = version.sha256
            if counts is not None:
                self.candidates[idx] = counts.model_copy(update={"version": version.version})
            self._write_map()
        emit(self._sink, "candidate", f"candidate {idx} -> {version.ref} (val {scores['val_accuracy']:.3f})",
             candidate=idx, version=version.version, parents=parents, val_accuracy=scores["val_accuracy"])

    def _counts_now(self, idx: int, candidate: Mapping[str, str]) -> CandidateHelpHarm | None:
        """Candidate ``idx``'s help/harm from the state of the running iteration (None when not there)."""
        state = self._state
        if state is None or idx >= len(state.program_candidates) or state.program_candidates[idx] != candidate:
            return None
        return from_state(state, idx)

    def _write_map(self) -> None:
        """Persist ``artifacts.json`` (the caller holds the lock)."""
        saved = CandidateMap(versions=dict(sorted(self.versions.items())),
                             val_scores=dict(sorted(self.val_scores.items())),
                             candidates=dict(sorted(self.candidates.items())))
        atomic_write_json(self.map_path, saved.model_dump(mode="json"))

    def quarantine(self, candidate: Mapping[str, str], parent_idx: int | None, reason: str, iteration: int) -> None:
        """Keep a proposal the rails refused as a version marked ``quarantine`` (never raises, as ``_save``).

        Why versions: the text stays in the lineage where ``prompts list/show/diff`` and the report
        read every other candidate, and the store itself refuses any alias to it.
        """
        try:
            parent = self.versions.get(parent_idx, self.seed.version) if parent_idx is not None else self.seed.version
            instructions = version_instructions(self.seed.instructions, candidate)
            with self._lock:
                version = self.store.save_new(self.seed.program, instructions, parents=[parent], source="gepa",
                                              quarantine=reason, scores={"gepa_iteration": iteration},
                                              cost={"usd_so_far": round(self._spent(), 6),
                                                    "metric_calls_so_far": self.metric_calls}, **self.metadata)
                if all(q["version"] != version.version for q in self.quarantined):
                    self.quarantined.append({"version": version.version, "sha256": version.sha256, "parent": parent,
                                             "iteration": iteration})
                    atomic_write_json(self.quarantine_path, {"quarantined": self.quarantined})
        except Exception as exc:  # noqa: BLE001 - reported by run_optimize after GEPA returns
            self.errors.append(f"quarantined proposal from candidate {parent_idx}: {type(exc).__name__}: {exc}")
            return
        emit(self._sink, "warning", f"proposal from {parent} quarantined as {version.ref}, not accepted: {reason}",
             quarantined=version.version, parent=parent, reason=reason)

    def quarantined_reason(self, candidate: Mapping[str, str]) -> str | None:
        """Why this exact text was quarantined earlier in the run (a resumed run included), or None."""
        instructions = version_instructions(self.seed.instructions, candidate)
        sha = content_hash(self.seed.program, instructions)
        for entry in self.quarantined:
            if entry.get("sha256") == sha:
                try:
                    return self.store.get(self.seed.program, entry["version"]).quarantine or "quarantined"
                except SaagOptError:  # the store moved on; the run's own list still says so
                    return f"quarantined as {entry['version']} (not found in {self.store.location})"
        return None

    def best_saved(self, n_val: int) -> str:
        """The version to alias ``best``: the seed unless a candidate clears ``rails.pick_best``'s val margin.

        Scores seen in this process come from GEPA's events; versions saved by an earlier attempt of
        a resumed run carry theirs in the store. When a higher-scoring candidate misses the margin
        the run says so (a ``warning`` event).
        """
        scores: dict[int, float] = {}
        for idx, version in self.versions.items():
            if idx in self.val_means:
                scores[idx] = self.val_means[idx]
            elif idx:
                stored = self.store.get(self.seed.program, version).scores.get("val_accuracy")
                if isinstance(stored, (int, float)):
                    scores[idx] = float(stored)
        best, why = pick_best(self.seed.version, scores.get(0),
                              {self.versions[i]: s for i, s in sorted(scores.items()) if i}, n_val)
        if best == self.seed.version and any(s > scores.get(0, 1.0) for i, s in scores.items() if i):
            emit(self._sink, "warning", why, best=best)
        return best


QUARANTINE_FILE = "quarantine.json"
"""``<run>/quarantine.json``: the run's quarantined proposals (the reasons live in their versions)."""


def _read_quarantined(path: Path) -> list[dict[str, Any]]:
    """The run's quarantine list (``[]`` when absent).

    Raises:
        RunError: unreadable (without it a resumed run forgets which texts it refused).
    """
    if not path.is_file():
        return []
    try:
        return [entry.model_dump() for entry in read_model(path, QuarantineLog).quarantined]
    except RunError as exc:
        raise RunError(f"{exc}; it lists the proposals GEPA's rails refused: start a new run") from exc


class FatalStopper:
    """gepa stop callback: end the run when a rollout hit a systemic fault (missing key, dead server)."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def __call__(self, gepa_state: Any) -> bool:
        """True once the context recorded a fatal error."""
        return self.context.fatal is not None


class CostStopper:
    """gepa stop callback: end the run at the next iteration boundary once the spend cap refused a call.

    The cap itself is enforced per LM call (``lm.spend.cap.SpendCap``: nothing is sent that could
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


__all__ = ["QUARANTINE_FILE", "ArtifactWriter", "CostStopper", "FatalStopper"]
