"""Clean stops for long runs: SIGTERM or Ctrl-C ends evaluate/compare/optimize/tune within seconds.

How a stop goes:

1. ``stop_on_signals`` (entered once, by the CLI) turns the first SIGTERM or SIGINT into
   ``RunInterrupted`` raised in the main thread, wherever it waits. It subclasses
   ``KeyboardInterrupt``, so ``except Exception`` never swallows it and libraries that clean up on
   Ctrl-C (dspy's parallel executor, gepa) do so here too.
2. Run loops keep only whole examples: records are written by the main thread as examples finish,
   inside ``deferred()`` so a stop never splits one, and an example still in flight is dropped and
   redone on resume (the "example boundary").
   ``thread_pool`` cancels queued examples instead of waiting for them; worker threads and retry
   loops poll ``requested()`` / ``sleep()`` to give up early.
3. ``records.finish_header`` marks the run ``interrupted`` (resumable).
4. ``exit_interrupted`` runs the registered cleanups (the CLI registers "stop the embedded
   servers"), gives in-flight threads a short grace, then exits even if one still waits on a socket.

A second signal while stopping exits at once (cleanups still run).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that stop a run."""

_requested = threading.Event()
_signum: int | None = None
_deferring = 0
"""Depth of ``deferred()`` sections in the main thread (the signal handler runs there)."""
_cleanups: list[Callable[[], None]] = []
_lock = threading.Lock()


class RunInterrupted(KeyboardInterrupt):
    """A stop was requested by a signal; the run is resumable."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        """The shell convention: 128 + signal number (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + self.signum


def requested() -> bool:
    """True once a stop was requested (worker threads poll this between steps)."""
    return _requested.is_set()


def sleep(seconds: float) -> bool:
    """Sleep, waking early on a stop request; True if the full time passed (use as a retry ``sleep``)."""
    return not _requested.wait(seconds)


def request_stop(signum: int = signal.SIGTERM) -> None:
    """Record a stop request (the signal handler does this; tests and the tune loop may too)."""
    global _signum
    _signum = signum
    _requested.set()


def reset() -> None:
    """Forget a previous stop request (tests; a long-lived process starting a new run)."""
    global _signum
    _signum = None
    _requested.clear()


def add_cleanup(fn: Callable[[], None]) -> None:
    """Run ``fn`` on an interrupted exit (before the process ends), once, in registration order."""
    with _lock:
        if fn not in _cleanups:
            _cleanups.append(fn)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _requested.is_set():  # second signal: do not wait any longer
        exit_interrupted(signum, grace=0.0)
    request_stop(signum)
    if not _deferring:
        raise RunInterrupted(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """A section a stop must not cut in two (e.g. writing both records of an example).

    A signal inside it is recorded and raised as ``RunInterrupted`` when the section ends.
    """
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    if not _deferring and threading.current_thread() is threading.main_thread() and _requested.is_set():
        raise RunInterrupted(_signum or signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """While active, SIGTERM/SIGINT raise ``RunInterrupted`` in the main thread (no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def thread_pool(max_workers: int | None, thread_name_prefix: str = "") -> Iterator[ThreadPoolExecutor]:
    """A ``ThreadPoolExecutor`` that stops at once when its body raises (a stop).

    Queued work is cancelled and running work is not waited for, so the stop reaches the run header
    within moments.
    """
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_cleanups() -> None:
    """Run the registered cleanups once each; a failing cleanup does not stop the others."""
    with _lock:
        todo = list(_cleanups)
        _cleanups.clear()
    for fn in todo:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - best effort while exiting
            print(f"warning: cleanup {getattr(fn, '__name__', fn)} failed: {exc}", file=sys.stderr)


def exit_interrupted(signum: int | None = None, *, grace: float = 2.0) -> NoReturn:
    """Clean up and end the process with 128 + the stop signal (default: the one received); never returns.

    Threads still blocked in an LM call get ``grace`` seconds, then the process ends with
    ``os._exit`` (run files are already written and closed; the LM cache commits per entry).
    """
    run_cleanups()
    code = 128 + (signum or _signum or signal.SIGINT)
    deadline = time.monotonic() + grace
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


__all__ = [
    "SIGNALS",
    "RunInterrupted",
    "add_cleanup",
    "deferred",
    "exit_interrupted",
    "request_stop",
    "requested",
    "reset",
    "run_cleanups",
    "sleep",
    "stop_on_signals",
    "thread_pool",
]
