"""Latency as it would be without the LM cache: a replayed call counts at the time of its original call.

Why: every latency saag-opt reports (record ``seconds``, ``overhead_x``, tune's latency objective, the
guard's ``latency_s``) is wall time around LM work, and a reply replayed from dspy's disk cache takes
~0 s. A re-run, a resumed run, a tune trial sharing calls with an earlier trial, or ``gate+r2`` after
``r2`` would report a latency the configuration does not have. So ``SaagLM`` remembers the wall time of
every real call in ``CallTimes`` (beside the LM cache, keyed by a hash of the request, never its text)
and, on a cache hit, tells every ``LatencyClock`` open in the caller's context how much longer the
original call took. The cost ledger keeps the real time (time actually spent).

Clocks live in a ``ContextVar``: work on another thread sees them only when run in a copy of the
caller's context (``contextvars.copy_context().run``), as the runtime guard does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from saag_opt.runfiles import JsonShelf

_OPEN: ContextVar[tuple[LatencyClock, ...]] = ContextVar("saag_latency_clocks", default=())


class LatencyClock:
    """Wall seconds of a block of LM work, each replayed call counted at its original time.

    ``untimed`` counts replayed calls whose original time is unknown (a cache entry older than the
    time store): they count at their replay time, so the block's latency is then a lower bound.
    """

    def __init__(self) -> None:
        self._started = time.perf_counter()
        self._stopped: float | None = None
        self._replayed = 0.0
        self.untimed = 0
        self._lock = threading.Lock()

    @property
    def seconds(self) -> float:
        """Wall time so far (or until the block ended) plus what the replayed calls originally took extra."""
        end = time.perf_counter() if self._stopped is None else self._stopped
        with self._lock:
            return end - self._started + self._replayed

    def replayed(self, original: float | None, took: float) -> None:
        """A call inside the block was a cache hit that took ``took`` s and originally ``original`` s (None: unknown)."""
        with self._lock:
            if self._stopped is not None:
                return  # e.g. a timed-out review finishing in the background
            if original is None:
                self.untimed += 1
            else:
                self._replayed += max(0.0, original - took)

    def stop(self) -> None:
        """End the block: later replays (of abandoned work) no longer count."""
        with self._lock:
            if self._stopped is None:
                self._stopped = time.perf_counter()


@contextlib.contextmanager
def lm_clock() -> Iterator[LatencyClock]:
    """Time the LM work in the block as latency (the one timing helper of mechanisms and the guard)."""
    clock = LatencyClock()
    token = _OPEN.set((*_OPEN.get(), clock))
    try:
        yield clock
    finally:
        clock.stop()
        _OPEN.reset(token)


def note_replay(original: float | None, took: float) -> None:
    """Tell every clock open in this context that a call was replayed from the cache (``SaagLM`` calls it)."""
    for clock in _OPEN.get():
        clock.replayed(original, took)


class CallTimes:
    """Wall seconds of real LM calls by request hash: in memory, and on disk with a ``directory``.

    Only the hash (the file name) and ``{"seconds": s}`` are stored: no message text, no key.
    A missing or corrupt entry is an unknown time, never an error.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._shelf = JsonShelf(directory) if directory is not None else None
        self._memory: dict[str, float] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> float | None:
        """The original seconds of the call with request hash ``key``, or None."""
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        data = self._shelf.load(key) if self._shelf is not None else None
        seconds = data.get("seconds") if isinstance(data, dict) else None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
            return None
        with self._lock:
            self._memory[key] = float(seconds)
        return float(seconds)

    def put(self, key: str, seconds: float) -> None:
        """Remember a real call's wall time (the latest real call of a request wins)."""
        with self._lock:
            self._memory[key] = seconds
        if self._shelf is not None:
            try:
                self._shelf.save(key, {"seconds": round(seconds, 6)})
            except OSError:
                pass  # an unwritable store only loses the replay time, as before this store existed


__all__ = ["CallTimes", "LatencyClock", "lm_clock", "note_replay"]
