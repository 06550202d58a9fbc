"""One LM request at a time per distinct request, across the processes that share a disk cache.

Why: ``tune --processes N`` runs configurations in parallel processes that share dspy's disk cache.
Two configurations often open with the same request (r1 and r2 share their first review), and
neither worker sees the other's request while it is in flight, so both pay for it. Holding an
exclusive lock named after the request (``SaagLM._request_hash``, the hash that also keys its
remembered latency) while it is sent makes the second worker wait for the first; it then finds
the reply in the disk cache and pays nothing.

How (Linux): one byte of one file, ``<disk cache>/inflight/requests.lock``, per request: an
open-file-description lock (``F_OFD_SETLK``) on the byte at an offset taken from the request hash.
Each thread keeps its own description of the file open, so a lock costs two system calls (lock,
unlock) and no file is created or removed per request. Why not a file per request (as before):
create, lock, check, unlink and close were seven system calls per LM call, each a release of the
GIL that 16 workers then queue to take back (experiments/bench/concurrency.py). OFD locks conflict
between descriptions, not processes, so threads of one process exclude each other too. Elsewhere
(no OFD locks): a lock file per request under ``flock``, created and removed by its holder.

Safe by construction: the lock only changes *when* a request is sent, never what is sent or
answered (a waiter that finds no cached reply sends its own request). The kernel releases a lock
when its holder dies, and a waiter gives up waiting after ``WAIT_SECONDS`` (a holder that hangs).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
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
LOCK_FILE = "requests.lock"
"""The one lock file (in ``lock_dir()``) whose bytes stand for requests, where OFD locks exist."""
OFD_LOCKS = fcntl is not None and hasattr(fcntl, "F_OFD_SETLK") and os.uname().sysname == "Linux"
"""Whether the byte-range OFD locks are used (else one ``flock``-ed file per request)."""
_BUSY = (errno.EAGAIN, errno.EACCES)
"""What a refused non-blocking lock raises."""


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
    if directory is None or fcntl is None:
        yield False
        return
    release = _acquire(key, directory, WAIT_SECONDS if wait is None else wait)
    try:
        yield release is not None
    finally:
        if release is not None:
            release()


def _acquire(key: str, directory: Path, wait: float) -> Callable[[], None] | None:
    """Wait for the lock of ``key`` up to ``wait`` seconds; its release, or None when it is not held."""
    if OFD_LOCKS:
        handle = _thread_handle(directory / LOCK_FILE)
        if handle is None:
            return None
        offset = request_offset(key)
        take: Callable[[], bool | None] = functools.partial(handle.lock, offset)
        release: Callable[[], None] = functools.partial(handle.unlock, offset)
    else:
        lock = _RequestFile(directory / key[:2] / f"{key}.lock")
        take, release = lock.lock, lock.unlock
    deadline = time.monotonic() + wait
    while True:
        got = take()
        if got is None:  # cannot lock here (no such file system support): send unlocked
            return None
        if got:
            return release
        if time.monotonic() >= deadline:
            log.warning("an identical LM request has been in flight for %.0f s; sending this one too", wait)
            return None
        time.sleep(POLL_SECONDS)


def request_offset(key: str) -> int:
    """The byte of the lock file that stands for request ``key`` (60 bits of its hex hash; no collisions in practice)."""
    try:
        return int(key[:15], 16)
    except ValueError:  # not a hex hash: any stable 60-bit number will do
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 4


# -- OFD byte locks: one open description of the lock file per thread --------------------------------


class _OFDHandle:
    """This thread's own open description of the lock file; closed when the thread's handles are dropped."""

    def __init__(self, path: Path) -> None:
        self.pid = os.getpid()
        self.fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)

    def lock(self, offset: int) -> bool | None:
        """Try to lock byte ``offset``: True held, False another holder has it, None locking fails here."""
        try:
            fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_WRLCK, offset))
        except OSError as exc:
            return False if exc.errno in _BUSY else None
        return True

    def unlock(self, offset: int) -> None:
        try:
            fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, offset))
        except OSError:  # pragma: no cover - the close at thread exit releases it anyway
            pass

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)  # None: the open failed
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


_THREAD = threading.local()


def _thread_handle(path: Path) -> _OFDHandle | None:
    """This thread's handle on ``path`` (opened on first use; anew in a forked child, whose copy is shared)."""
    handles: dict[Path, _OFDHandle] | None = getattr(_THREAD, "handles", None)
    if handles is None:
        handles = _THREAD.handles = {}
    handle = handles.get(path)
    if handle is not None and handle.pid == os.getpid():
        return handle
    try:
        handle = _OFDHandle(path)
    except FileNotFoundError:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = _OFDHandle(path)
        except OSError:
            return None
    except OSError:
        return None
    handles[path] = handle
    return handle


def _flock(kind: int, offset: int) -> bytes:
    """A ``struct flock`` for one byte at ``offset`` (l_pid 0, as OFD locks require)."""
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0)


# -- elsewhere: a flock-ed file per request ----------------------------------------------------------


class _RequestFile:
    """A lock file of one request, removed by its holder; a waiter that locked a removed file tries the new one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def lock(self) -> bool | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            return None
        try:
            current = os.stat(self.path).st_ino
        except OSError:
            current = None
        if current != os.fstat(fd).st_ino:  # its holder removed it after we opened it: try the file there now
            os.close(fd)
            return False
        self.fd = fd
        return True

    def unlock(self) -> None:
        try:
            os.unlink(self.path)  # while still holding it: a waiter on this inode sees it is gone and retries
        except OSError:
            pass
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


__all__ = ["LOCK_FILE", "OFD_LOCKS", "POLL_SECONDS", "WAIT_SECONDS", "lock_dir", "one_at_a_time", "request_offset"]
