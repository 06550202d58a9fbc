"""Per-process memos of values derived from files, keyed by the identity of those files.

Why: a ``tune`` worker runs one evaluation per trial, and each used to parse the dataset, read the
installed packages' metadata and fork ``git rev-parse`` again (0.05-0.1 s of CPU per trial on a
busy machine, for answers that do not change). Memoising them is only safe if a changed input is
never served stale, so every entry is keyed by ``file_stamp`` of what it was read from (device,
inode, size, mtime and ctime): an edited, replaced, created or deleted file is a different key.

Bottom layer: imports nothing from the package.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")

Stamp = tuple[int, int, int, int, int] | None
"""``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` of a path, None when it does not exist."""


def file_stamp(path: str | os.PathLike[str]) -> Stamp:
    """The identity of ``path`` as it is now (None if it cannot be stat'ed).

    ctime is part of it because an in-place rewrite may keep size and mtime (``touch -r``), never ctime.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


RACY_SECONDS = 2.0
"""A file changed less than this long ago is not memoised: a same-size rewrite within the file
system's timestamp granularity would keep its stamp (git's "racily clean" problem)."""


def file_stamps(paths: tuple[str | os.PathLike[str], ...]) -> tuple[tuple[str, Stamp], ...] | None:
    """``(path, file_stamp(path))`` for each path: a memo key for values read from those files.

    None (do not memoise) when one of them changed in the last ``RACY_SECONDS``.
    """
    stamps = tuple((os.fspath(p), file_stamp(p)) for p in paths)
    settled = time.time_ns() - int(RACY_SECONDS * 1e9)
    if any(stamp is not None and max(stamp[3], stamp[4]) > settled for _, stamp in stamps):
        return None
    return stamps


class Memo(Generic[T]):
    """A small thread-safe LRU map from a key (that embeds ``file_stamp``s) to a computed value.

    Stale entries are never looked up again (their key cannot recur), so the size bound is what
    frees them. A value being computed is not locked: two threads may compute it twice, which is
    harmless (same inputs, same value) and cannot deadlock.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> T | None:
        """The value stored under ``key``, or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: T) -> T:
        """Store ``value`` under ``key`` (evicting the least recently used beyond ``size``); returns it."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def get_or_compute(self, key: Hashable | None, compute: Callable[[], T]) -> T:
        """The stored value, or ``compute()`` stored under ``key``; a None key is never memoised."""
        if key is None:
            return compute()
        value = self.get(key)
        return value if value is not None else self.put(key, compute())

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()


__all__ = ["RACY_SECONDS", "Memo", "Stamp", "file_stamp", "file_stamps"]
