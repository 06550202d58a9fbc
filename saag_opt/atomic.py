"""Atomic file writes: a temp file beside the target, then ``os.replace``, so no reader sees half a file.

Every verb (evaluate, compare, optimize, score) and every store (prompt versions, the
base-prediction cache, dataset files, run directories) writes through ``atomic_file`` or the
``atomic_write_*`` helpers; ``JsonShelf`` keeps small JSON documents by key the same way. Files are
made 0644 (``share_file``): caches and runs are shared between users and processes.

Bottom layer: imports nothing of the package (the standard library and jsonlines only).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

import jsonlines


@contextmanager
def atomic_file(path: Path, mode: Literal["w", "wb"] = "w", *, fsync: bool = False) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on a clean exit it replaces ``path``, on an error it is removed.

    Why: readers (and a run resumed after a crash) see the old file or the new one, never half.
    The parent directory is created; the file is 0644 (temp files are made 0600, but these are shared
    files); ``fsync`` makes the content durable before the rename (prompt versions in git).

    Raises:
        OSError: the directory or the temp file cannot be created or written.
    """
    fd, tmp = _temp_beside(path)
    try:
        share_file(fd, tmp)
        handle: IO[Any] = os.fdopen(fd, "wb") if mode == "wb" else os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with handle:
            yield handle
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` atomically, as ``atomic_file`` does, in five system calls.

    Why not ``atomic_file``: the small entries written per LM call and per example (call times, base
    proposals) paid a mkdir, a file object's fstat, ioctl and lseek on top; each system call lets
    go of the GIL, which the other workers then queue to take back. Here: open, fchmod, write,
    close, rename (and a mkdir only when the directory is missing).

    Raises:
        OSError: the directory or the temp file cannot be created or written.
    """
    fd, tmp = _temp_beside(path)
    try:
        try:
            share_file(fd, tmp)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def share_file(fd: int, path: str | os.PathLike[str]) -> None:
    """Make the open file ``fd`` (at ``path``) 0644 whatever the umask: cache and run files are shared."""
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o644)
    else:  # pragma: no cover - Windows (Python < 3.13)
        os.chmod(path, 0o644)


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_TEMP_SERIAL = itertools.count()


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new 0600 temp file in ``path``'s directory, which is created only when it is missing.

    Named ``.<name>.<pid>-<serial>.tmp``: unique among live writers without a random draw; a name a
    dead process left behind is skipped.
    """
    made = False
    while True:
        tmp = os.path.join(path.parent, f".{path.name}.{os.getpid()}-{next(_TEMP_SERIAL)}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
        except FileExistsError:
            continue
        except FileNotFoundError:
            if made:
                raise
            path.parent.mkdir(parents=True, exist_ok=True)
            made = True


def atomic_write_text(path: Path, text: str, *, fsync: bool = False) -> None:
    """Write ``text`` (UTF-8, newlines as given) atomically (see ``atomic_file``)."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def atomic_write_json(path: Path, payload: Any) -> None:
    """Write indented JSON atomically (non-JSON values via ``str``)."""
    atomic_write_text(path, json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """Write one compact JSON line per row atomically."""
    with atomic_file(path) as handle:
        jsonlines.Writer(handle, compact=True, sort_keys=False).write_all(rows)


class JsonShelf:
    """JSON documents by hex key, one small file each: ``<directory>/<key[:2]>/<key>.json``.

    Why: caches shared by concurrent workers and runs (base proposals, guard reviews) need no
    database: every entry is written atomically, and a missing, half-read or corrupt entry is a miss
    (recomputed and overwritten), never an error.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        """Where ``key``'s document lives."""
        return self.directory / key[:2] / f"{key}.json"

    def load(self, key: str) -> Any:
        """The stored document, or None when there is none that parses."""
        try:
            return json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def save(self, key: str, payload: Any) -> None:
        """Store ``payload`` under ``key`` atomically (non-JSON values via ``str``)."""
        atomic_write_text(self.path(key), json.dumps(payload, ensure_ascii=False, default=str))


__all__ = [
    "JsonShelf",
    "atomic_file",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_jsonl",
    "atomic_write_text",
    "share_file",
]
