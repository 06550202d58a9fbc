"""One LM request at a time per distinct request, across the processes that share a disk cache.

Why: ``tune --workers N`` runs configurations in parallel processes that share dspy's disk cache.
Two configurations often open with the same request (r1 and r2 share their first review), and
neither worker sees the other's request while it is in flight, so both pay for it. Holding an
exclusive ``flock`` on a file named after the request (``SaagLM._request_hash``, the hash
that also keys its remembered latency) while it is sent makes the second worker
wait for the first; it then finds the reply in the disk cache and pays nothing.

Safe by construction: the lock only changes *when* a request is sent, never what is sent or
answered (a waiter that finds no cached reply sends its own request). The kernel releases a
``flock`` when its holder dies, and a waiter gives up waiting after ``WAIT_SECONDS`` (a holder that
hangs). Lock files live in ``<disk cache>/inflight/`` and are removed by their holder; a waiter
that locked a file its holder already removed tries again on the new one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dspy

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: no coalescing there
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

WAIT_SECONDS = 300.0
"""Longest wait for another process's identical request (then this one is sent anyway)."""
POLL_SECONDS = 0.02
"""How often a waiter tries the lock."""


def lock_dir() -> Path | None:
    """``<dspy disk cache>/inflight``, or None when the disk cache is off (no other process shares replies)."""
    cache = getattr(dspy, "cache", None)
    if cache is None or not getattr(cache, "enable_disk_cache", False) or not getattr(cache, "disk_cache_dir", None):
        return None
    return Path(cache.disk_cache_dir) / "inflight"


@contextmanager
def one_at_a_time(key: str, directory: Path | None, *, wait: float | None = None) -> Iterator[bool]:
    """Hold the in-flight lock of ``key`` for the body; yields whether it is held.

    Waits while another holder (any thread or process) has it, up to ``wait`` seconds
    (``WAIT_SECONDS``); then, or when locking is not possible here, the body runs unlocked.
    """
    path = directory / key[:2] / f"{key}.lock" if directory is not None and fcntl is not None else None
    fd = _acquire(path, WAIT_SECONDS if wait is None else wait) if path is not None else None
    try:
        yield fd is not None
    finally:
        if path is not None and fd is not None:
            _release(path, fd)


def _acquire(path: Path, wait: float) -> int | None:
    deadline = time.monotonic() + wait
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            return None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    log.warning("an identical LM request has been in flight for %.0f s; sending this one too", wait)
                    return None
                time.sleep(POLL_SECONDS)
            except OSError:
                os.close(fd)
                return None
        try:
            current = os.stat(path).st_ino
        except OSError:
            current = None
        if current == os.fstat(fd).st_ino:
            return fd
        os.close(fd)  # its holder removed it after we opened it: lock the file that is there now


def _release(path: Path, fd: int) -> None:
    try:
        os.unlink(path)  # while still holding it: a waiter on this inode sees it is gone and retries
    except OSError:
        pass
    os.close(fd)


__all__ = ["POLL_SECONDS", "WAIT_SECONDS", "lock_dir", "one_at_a_time"]
