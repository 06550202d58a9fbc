"""``tune --max-cost``: one hard cap over every process of a tune run and its test phase.

Why a file: a tune run's LM calls come from several processes (``--workers N`` local workers,
the coordinator's warm-up, drain and test re-evaluation), and ``lm.spendcap.SpendCap`` only
holds inside one. ``SharedSpendCap`` keeps its rule (every attempt reserves its worst case before
it is sent and settles after, so ``settled + held <= max_cost`` at every instant) with the
numbers in ``spend.json`` in the run directory, read and rewritten under an exclusive ``flock``.

A hold whose process died (``kill -9``) is settled at its worst case by the next process that
looks. The file outlives the attempt, so a ``--resume`` counts what earlier attempts spent, and a
higher ``--max-cost`` there lifts the stop. Without ``fcntl`` (Windows) the lock covers this
process only. A worker on another machine (``--storage postgresql://... --study NAME``) has its
own run directory, hence its own cap.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saag_opt.errors import CostCapReached
from saag_opt.lm.accounting import CostLedger
from saag_opt.lm.spendcap import ROUNDING_MARGIN, Hold, SpendCap
from saag_opt.runfiles import atomic_write_json
from saag_opt.tune.storage import dead_local_worker, worker_id

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: the lock covers one process there
    fcntl = None  # type: ignore[assignment]

SPEND_FILE = "spend.json"
"""In the tune run directory: settled dollars, holds in flight, whether the cap stopped the run."""
POLL_SECONDS = 0.05
"""How often a refused hold looks again while other holds are in flight."""


@dataclass
class _FileHold(Hold):
    key: str = ""


class SharedSpendCap(SpendCap):
    """A ``SpendCap`` whose spend and holds live in ``spend.json``, shared by every process that opens it."""

    def __init__(self, path: Path, max_cost: float, *, restart: bool = False, spent: float = 0.0) -> None:
        """Open (or create) the cap file.

        ``restart``: this process starts (or resumes) the run: the file takes this ``max_cost`` and
        the stop of an earlier attempt is lifted when the new cap leaves room. ``spent``: what
        earlier attempts of the run are known to have spent (their run files); the file counts at
        least that (an attempt without ``--max-cost`` kept no account here).
        """
        self.path = path
        self._file_lock = _FileLock(path.with_name(path.name + ".lock"))
        self._thread_lock = threading.Lock()
        super().__init__(max_cost)  # validates max_cost; its counters stay unused
        with self._state() as state:
            if not state:
                state.update(spent=float(spent), holds={}, reached=False, refused=None)
            if restart:
                state["spent"] = max(float(state["spent"]), float(spent))
                state["reached"] = state["spent"] >= self.max_cost - ROUNDING_MARGIN
                state["refused"] = "spend before this attempt already reached the cap" if state["reached"] else None
            state["max_cost"] = self.max_cost

    # -- what SpendCap exposes, read from the file ------------------------------------------------

    @property  # type: ignore[override]
    def reached(self) -> bool:
        """Whether any process of the run was refused for good (every later hold is refused too)."""
        return bool(self._read().get("reached"))

    @reached.setter
    def reached(self, value: bool) -> None:  # SpendCap.__init__ assigns it; the file decides
        pass

    @property
    def spent(self) -> float:
        """Dollars settled by every process of the run."""
        return float(self._read().get("spent") or 0.0)

    @property
    def held(self) -> float:
        """Dollars reserved by calls in flight, in every process."""
        return sum(float(h["dollars"]) for h in (self._read().get("holds") or {}).values())

    def message(self) -> str:
        """The one line a user reads when the run stops."""
        self.refused = self._read().get("refused")
        return super().message()

    # -- reserve and settle -----------------------------------------------------------------------

    def reserve(self, dollars: float, *, what: str = "the next LM call") -> Hold:
        """Hold ``dollars`` for one attempt, waiting while other processes' holds might free room.

        Raises:
            CostCapReached: the cap cannot take this call (or another process was already refused).
        """
        dollars = max(0.0, float(dollars))
        while True:
            with self._state() as state:
                _settle_dead(state)
                spent = state["spent"]
                if state["reached"]:
                    raise CostCapReached(self._message(state))
                if spent + dollars > self.max_cost - ROUNDING_MARGIN:
                    state["reached"] = True
                    state["refused"] = (f"{what} could cost up to ${dollars:.4f} and ${spent:.4f} "
                                        f"of ${self.max_cost:g} is spent")
                    raise CostCapReached(self._message(state))
                held = sum(float(h["dollars"]) for h in state["holds"].values())
                if spent + held + dollars <= self.max_cost - ROUNDING_MARGIN:
                    key = uuid.uuid4().hex
                    state["holds"][key] = {"worker": worker_id(), "dollars": dollars}
                    return _FileHold(self, dollars, key=key)
            time.sleep(POLL_SECONDS)

    def _settle(self, hold: Hold, actual: float) -> None:
        if hold.settled:
            return
        hold.settled = True
        with self._state() as state:
            if state["holds"].pop(getattr(hold, "key", ""), None) is not None:
                state["spent"] += max(0.0, float(actual))

    def _message(self, state: dict[str, Any]) -> str:
        self.refused = state.get("refused")
        return super().message()

    # -- the file ---------------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        """The file's state under the lock; written back (atomically) when the body ends, even by an exception.

        Only when it changed: a refused hold polls every ``POLL_SECONDS`` and used to rewrite the same file.
        """
        with self._thread_lock, self._file_lock.held():
            state = self._read()
            before = copy.deepcopy(state)
            try:
                yield state
            finally:
                if state and state != before:
                    atomic_write_json(self.path, state)


def _settle_dead(state: dict[str, Any]) -> None:
    """Count the holds of processes that died at their worst case (what they may have been billed)."""
    for key, hold in list(state["holds"].items()):
        if dead_local_worker(hold.get("worker")):
            state["spent"] += float(hold["dollars"])
            del state["holds"][key]


class _FileLock:
    """An exclusive ``flock`` on one file whose descriptor stays open (one open, mkdir and close less per use).

    ``flock`` belongs to the open description, so a forked child opens its own (an inherited one
    would share the parent's lock). Threads of one process take ``SharedSpendCap._thread_lock`` first.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            if self._fd is not None:  # the parent's, inherited: closing this copy leaves the parent's lock alone
                os.close(self._fd)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd, self._pid = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644), os.getpid()
        return self._fd

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass


def tune_ledger(run_dir: Path, max_cost: float | None, *, restart: bool = False, spent: float = 0.0) -> CostLedger:
    """This process's ledger for a tune run: capped by the run's shared cap when ``max_cost`` is set.

    Every trial and test evaluation books into a child of it (``run_evaluation(..., ledger=)``).
    """
    if max_cost is None:
        return CostLedger()
    return CostLedger(cap=SharedSpendCap(run_dir / SPEND_FILE, max_cost, restart=restart, spent=spent))


__all__ = ["SPEND_FILE", "SharedSpendCap", "tune_ledger"]
