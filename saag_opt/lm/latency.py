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
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from saag_opt.atomic import JsonShelf, share_file

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

    On disk: ``_TimeLog`` lines (``<hash> <seconds>``), and the one-file-per-request entries
    (``<hash[:2]>/<hash>.json`` = ``{"seconds": s}``) that earlier versions wrote, still read.
    Only hashes and seconds are stored: no message text, no key. A missing or corrupt entry is an
    unknown time, never an error.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._shelf = JsonShelf(directory) if directory is not None else None
        self._log = _TimeLog(directory / TIME_LOG_DIR) if directory is not None else None
        self._memory: dict[str, float] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> float | None:
        """The original seconds of the call with request hash ``key``, or None."""
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        if self._log is not None:  # what other processes (or earlier runs) appended since we last looked
            found = self._log.read_new(key)
            with self._lock:
                self._memory.update(found)
                if key in self._memory:
                    return self._memory[key]
        data = self._shelf.load(key) if self._shelf is not None else None
        seconds = data.get("seconds") if isinstance(data, dict) else None
        if seconds is None or not _is_seconds(seconds):
            return None
        with self._lock:
            self._memory[key] = float(seconds)
        return float(seconds)

    def put(self, key: str, seconds: float) -> None:
        """Remember a real call's wall time (the latest real call of a request wins)."""
        with self._lock:
            self._memory[key] = seconds
        if self._log is not None:
            try:
                self._log.append(key, seconds)
            except OSError:
                pass  # an unwritable store only loses the replay time, as before this store existed


TIME_LOG_DIR = "log"
"""In the time store: ``<first hex digit of the hash>.times``, appended to by every process."""
_HEX = frozenset("0123456789abcdef")
_RECORD = 64 + 1 + 17
"""Bytes of one record: the 64-hex hash, a space, the seconds zero-padded to 17 characters."""


def _is_seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


class _TimeLog:
    """Call times as fixed-size lines appended to one of 16 files (by the hash's first hex digit).

    Why: a file per request cost five system calls per LM call (create, chmod, write, close,
    rename), each a release of the GIL that the other workers queue behind, and an ext4 directory
    update; one ``O_APPEND`` write of an 83-byte record is one system call, seen by every process at
    once and never interleaved with another writer's line. Each record starts with a newline and has
    a fixed length, so a record a killed writer left short is skipped and cannot spoil the next one.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fds: dict[str, int] = {}
        self._read: dict[str, int] = {}  # file -> bytes already parsed
        self._lock = threading.Lock()

    def append(self, key: str, seconds: float) -> None:
        """Add one record (one write of 83 bytes)."""
        data = f"\n{key} {seconds:017.6f}".encode()
        if len(data) != _RECORD + 1:  # not a sha256 hex digest, or an absurd time: nothing to store
            return
        name = _file_of(key)
        fd = self._fd(name)
        if os.fstat(fd).st_nlink == 0:  # the file was deleted under us (a cleared cache): start a new one
            fd = self._reopen(name, fd)
        os.write(fd, data)

    def _reopen(self, name: str, stale: int) -> int:
        with self._lock:
            if self._fds.get(name) == stale:
                del self._fds[name]
                self._read.pop(name, None)
                os.close(stale)
        return self._fd(name)

    def read_new(self, key: str) -> dict[str, float]:
        """The records of ``key``'s file appended since the last look (by any process)."""
        name = _file_of(key)
        with self._lock:
            start = self._read.get(name, 0)
        try:
            fd = os.open(self.directory / name, os.O_RDONLY | _CLOEXEC | _BINARY)
        except OSError:
            return {}
        try:
            size = os.fstat(fd).st_size
            data = _read_from(fd, start, size - start) if size > start else b""
        except OSError:
            return {}
        finally:
            os.close(fd)
        found: dict[str, float] = {}
        pieces = data.split(b"\n")
        for piece in pieces[:-1]:
            _parse(piece, found)
        last = pieces[-1]  # whole, unless a write is being copied in right now: then it is read next time
        done = len(data) if not last or _parse(last, found) else len(data) - len(last) - 1
        with self._lock:
            self._read[name] = max(self._read.get(name, 0), start + max(done, 0))
        return found

    def _fd(self, name: str) -> int:
        with self._lock:
            fd = self._fds.get(name)
            if fd is None:
                path = self.directory / name
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC | _BINARY
                try:
                    fd = os.open(path, flags, 0o644)
                except FileNotFoundError:
                    self.directory.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, flags, 0o644)
                share_file(fd, path)
                self._fds[name] = fd
            return fd

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass


_CLOEXEC, _BINARY = getattr(os, "O_CLOEXEC", 0), getattr(os, "O_BINARY", 0)


def _read_from(fd: int, offset: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, size)  # pragma: no cover


def _file_of(key: str) -> str:
    return f"{key[:1] if key[:1] in _HEX else '_'}.times"


def _parse(piece: bytes, into: dict[str, float]) -> bool:
    """Add a whole record to ``into``; False for anything else (an empty line, a record cut short)."""
    if len(piece) != _RECORD or piece[64:65] != b" ":
        return False
    key = piece[:64].decode("ascii", "replace")
    try:
        seconds = float(piece[65:])
    except ValueError:
        return False
    if not _HEX.issuperset(key) or not _is_seconds(seconds):
        return False
    into[key] = seconds
    return True


__all__ = ["CallTimes", "LatencyClock", "lm_clock", "note_replay"]
