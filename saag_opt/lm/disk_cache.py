"""dspy's disk cache, with each missing shard created when it is first used rather than up front.

Why: dspy's ``Cache`` builds a 16-shard ``diskcache.FanoutCache``, and creating a shard (a sqlite
database with its tables, triggers and settings) costs ~10 ms, so a run on an empty cache spent
~0.2 s before its first request, serially (experiments/bench/concurrency.py: ~3% of its wall time).
Created on first use, the shards are made by the workers' first calls side by side, while other
workers wait on the network. The layout, settings and keys are dspy's own (a test builds dspy's
cache beside ours and compares them), so either reads what the other wrote.

Shards that already exist are opened at once, as dspy does: a damaged one is still found before
the run starts (``configure_lm_cache`` turns that into its one-line message).
"""

from __future__ import annotations

import os
import os.path
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from diskcache import Cache, Disk, FanoutCache
from diskcache.core import DEFAULT_SETTINGS

from saag_opt.errors import RunError
from saag_opt.paths import CACHE_ENV, cache_dir

SHARDS = 16
"""dspy's shard count (``dspy.clients.cache.Cache``): a key's shard is its hash modulo this."""
TIMEOUT = 10
"""dspy's sqlite timeout (seconds) for each shard."""
DB_NAME = "cache.db"
"""diskcache's database file inside a shard's folder."""


class _Shards:
    """The shards of one fanout cache, by index; a missing one is created on first access (once)."""

    def __init__(self, directory: str, count: int, make: Callable[[str], Cache]) -> None:
        self._folders = [os.path.join(directory, f"{n:03d}") for n in range(count)]
        self._make = make
        self._lock = threading.Lock()
        self._open: list[Cache | None] = [make(folder) if os.path.exists(os.path.join(folder, DB_NAME)) else None
                                          for folder in self._folders]

    def __len__(self) -> int:
        return len(self._open)

    def __getitem__(self, index: int) -> Cache:
        shard = self._open[index]
        if shard is None:
            with self._lock:
                shard = self._open[index]
                if shard is None:
                    shard = self._open[index] = self._make(self._folders[index])
        return shard

    def __iter__(self) -> Iterator[Cache]:
        return (self[n] for n in range(len(self)))

    def __reversed__(self) -> Iterator[Cache]:
        return (self[n] for n in reversed(range(len(self))))

    def opened(self) -> list[Cache]:
        """The shards created or opened so far."""
        return [shard for shard in self._open if shard is not None]


class OnDemandFanoutCache(FanoutCache):
    """``diskcache.FanoutCache`` whose missing shards are created on first use (same files, same keys)."""

    def __init__(self, directory: str, shards: int = SHARDS, timeout: float = TIMEOUT, disk: type = Disk,
                 **settings: Any) -> None:
        # FanoutCache.__init__'s own assignments, minus building every shard.
        directory = os.path.expandvars(os.path.expanduser(str(directory)))
        size_limit = settings.pop("size_limit", DEFAULT_SETTINGS["size_limit"]) / shards
        self._count = shards
        self._directory = directory
        self._disk = disk
        self._shards = _Shards(directory, shards, lambda folder: Cache(  # type: ignore[assignment]
            directory=folder, timeout=timeout, disk=disk, size_limit=size_limit, **settings))
        self._caches: dict[str, Any] = {}
        self._deques: dict[str, Any] = {}
        self._indexes: dict[str, Any] = {}

    def _hash(self, key: Any) -> int:  # type: ignore[override]
        """The key's shard hash (diskcache's, read from shard 0's disk as FanoutCache does)."""
        return int(self._shards[0].disk.hash(key))

    def close(self) -> None:
        """Close the shards that were opened (closing creates none)."""
        for shard in self._shards.opened():  # type: ignore[attr-defined]
            shard.close()
        self._caches.clear()
        self._deques.clear()
        self._indexes.clear()


def install_disk_cache(where: str, size_limit: int) -> None:
    """Make dspy's active cache a memory tier over an ``OnDemandFanoutCache`` in ``where``.

    Raises what opening an existing shard raises (``sqlite3.DatabaseError`` for a damaged one, ``OSError``).
    """
    import dspy  # noqa: PLC0415 - heavy: only when a run configures its cache

    disk = OnDemandFanoutCache(where, shards=SHARDS, timeout=TIMEOUT, size_limit=size_limit)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=where)
    cache = dspy.cache
    cache.disk_cache = disk
    cache.enable_disk_cache = True


def configure_lm_cache() -> Path:
    """Point dspy's disk cache at ``<cache root>/dspy`` (unless ``DSPY_CACHEDIR`` says otherwise).

    Why: re-runs, resumes and ``compare`` must find earlier LM replies, so every command uses the
    same persistent cache rather than dspy's default or a temp dir.

    Raises:
        RunError: the folder cannot be created or a cache file is not a database (a damaged cache).
    """
    import dspy  # noqa: PLC0415 - heavy: only when a run configures its cache
    from dspy.clients import DISK_CACHE_LIMIT  # noqa: PLC0415

    where = Path(os.environ.get("DSPY_CACHEDIR") or cache_dir() / "dspy")
    if _CONFIGURED.get(where) is not None and _CONFIGURED[where] is getattr(dspy, "cache", None):
        return where  # ours is still the active cache: rebuilding it opens its sqlite shards again
    try:
        where.mkdir(parents=True, exist_ok=True)
        if not os.access(where, os.W_OK | os.X_OK):  # its shards are made on first use: refuse now, not mid-run
            raise PermissionError(f"no write permission on {where}")
        install_disk_cache(str(where), DISK_CACHE_LIMIT)
    except (OSError, sqlite3.DatabaseError) as exc:
        damaged = isinstance(exc, sqlite3.DatabaseError)
        raise RunError(f"LM cache {where}: {'damaged' if damaged else 'cannot be used'} ({exc}); move it aside or "
                       f"set ${CACHE_ENV} to another folder (earlier replies are then asked again)") from exc
    _CONFIGURED[where] = dspy.cache
    return where


_CONFIGURED: dict[Path, object] = {}
"""Cache dir -> the dspy cache object ``configure_lm_cache`` installed for it (why: tune runs one
evaluation per trial, and each used to rebuild the disk cache)."""


__all__ = ["SHARDS", "TIMEOUT", "OnDemandFanoutCache", "configure_lm_cache", "install_disk_cache"]
