"""dspy's disk cache, whose missing shards are made beside the first requests instead of before them.

Why: dspy's ``Cache`` builds a 16-shard ``diskcache.FanoutCache``, and making a shard (a sqlite
database with its tables, triggers and settings) costs ~8 ms. Made up front, a run on an empty cache
spent ~0.15 s before its first request; made by the workers' first lookups, 16 workers queued
behind each other's shards (experiments/bench/concurrency.py: the first wave of examples paid
~0.2 s more than later ones). So a lookup on a shard that does not exist yet is a miss without
making it (nothing can be in it), and the missing shards are made by one background thread while
the first requests wait on the network; a store that comes first makes its own shard. The layout,
settings and keys are dspy's own (a test builds dspy's cache beside ours and compares them), so
either reads what the other wrote.

Shards that already exist are opened at once, as dspy does: a damaged one is still found before
the run starts (``configure_lm_cache`` turns that into its one-line message).
"""

from __future__ import annotations

import logging
import os
import os.path
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from diskcache import Cache, Disk, FanoutCache, Timeout
from diskcache.core import DEFAULT_SETTINGS

from saag_opt.errors import RunError
from saag_opt.paths import CACHE_ENV, cache_dir

SHARDS = 16
"""dspy's shard count (``dspy.clients.cache.Cache``): a key's shard is its hash modulo this."""
TIMEOUT = 10
"""dspy's sqlite timeout (seconds) for each shard."""
DB_NAME = "cache.db"
"""diskcache's database file inside a shard's folder."""

log = logging.getLogger(__name__)


class _Shards:
    """The shards of one fanout cache, by index; a missing one is created on first access (once)."""

    def __init__(self, directory: str, count: int, make: Callable[[str], Cache]) -> None:
        self._folders = [os.path.join(directory, f"{n:03d}") for n in range(count)]
        self._make = make
        self._locks = [threading.Lock() for _ in range(count)]  # one per shard: making one blocks no other
        self._open: list[Cache | None] = [make(folder) if os.path.exists(os.path.join(folder, DB_NAME)) else None
                                          for folder in self._folders]

    def __len__(self) -> int:
        return len(self._open)

    def __getitem__(self, index: int) -> Cache:
        shard = self._open[index]
        if shard is None:
            with self._locks[index]:
                shard = self._open[index]
                if shard is None:
                    shard = self._open[index] = self._make(self._folders[index])
        return shard

    def __iter__(self) -> Iterator[Cache]:
        return (self[n] for n in range(len(self)))

    def __reversed__(self) -> Iterator[Cache]:
        return (self[n] for n in reversed(range(len(self))))

    def existing(self, index: int) -> Cache | None:
        """The shard if its database exists (opened now if another thread or process made it), else None."""
        shard = self._open[index]
        if shard is None and os.path.exists(os.path.join(self._folders[index], DB_NAME)):
            shard = self[index]  # waits while this process is still making it
        return shard

    def opened(self) -> list[Cache]:
        """The shards created or opened so far."""
        return [shard for shard in self._open if shard is not None]

    def missing(self) -> list[int]:
        """The indexes of the shards not made or opened yet."""
        return [n for n, shard in enumerate(self._open) if shard is None]


class OnDemandFanoutCache(FanoutCache):
    """``diskcache.FanoutCache`` whose missing shards are made on first store (same files, same keys).

    A lookup in a shard that does not exist is a miss and makes nothing; ``make_missing_shards``
    makes the rest in a background thread.
    """

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
        # The shards' own Disk (same settings) only to hash keys: hashing opens no shard.
        chosen = {**DEFAULT_SETTINGS, **settings}
        self._hasher = disk(directory, **{k[5:]: v for k, v in chosen.items() if k.startswith("disk_")})
        self._maker: threading.Thread | None = None
        self._closing = threading.Event()
        self._caches: dict[str, Any] = {}
        self._deques: dict[str, Any] = {}
        self._indexes: dict[str, Any] = {}

    def _hash(self, key: Any) -> int:  # type: ignore[override]
        """The key's shard hash (diskcache's ``Disk.hash``, as FanoutCache reads it from shard 0)."""
        return int(self._hasher.hash(key))

    def get(self, key: Any, default: Any = None, read: bool = False, expire_time: bool = False, tag: bool = False,
            retry: bool = False) -> Any:
        """FanoutCache.get; a key whose shard does not exist yet is a miss (the shard is not made)."""
        shard = self._existing_shard(key)
        if shard is None:
            return (default, None, None) if expire_time and tag else (default, None) if expire_time or tag else default
        try:
            return shard.get(key, default, read, expire_time, tag, retry)
        except (Timeout, sqlite3.OperationalError):
            return default

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, default=_MISSING, retry=True)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: Any) -> bool:
        shard = self._existing_shard(key)
        return shard is not None and key in shard

    def _existing_shard(self, key: Any) -> Cache | None:
        """The key's shard if its database exists, else None (a lookup makes no shard)."""
        return self._shards.existing(self._hash(key) % self._count)  # type: ignore[attr-defined,no-any-return]

    def make_missing_shards(self) -> None:
        """Make the shards that do not exist yet, in a daemon thread (started once; a failure is left to the stores)."""
        if self._maker is not None or not self._shards.missing():  # type: ignore[attr-defined]
            return

        def make() -> None:
            for index in self._shards.missing():  # type: ignore[attr-defined]
                if self._closing.is_set():
                    return
                try:
                    self._shards[index]
                except (OSError, sqlite3.Error) as exc:  # the store that needs it raises it properly
                    log.debug("LM cache: shard %d not made in the background: %s", index, exc)
                    return

        self._maker = threading.Thread(target=make, name="saag-lm-cache-shards", daemon=True)
        self._maker.start()

    def close(self) -> None:
        """Stop making shards, then close the ones that were opened (closing creates none)."""
        self._closing.set()
        if self._maker is not None:
            self._maker.join()
        for shard in self._shards.opened():  # type: ignore[attr-defined]
            shard.close()
        self._caches.clear()
        self._deques.clear()
        self._indexes.clear()


_MISSING = object()


def install_disk_cache(where: str, size_limit: int) -> None:
    """Make dspy's active cache a memory tier over an ``OnDemandFanoutCache`` in ``where``.

    Its missing shards are then made in the background (``make_missing_shards``).

    Raises what opening an existing shard raises (``sqlite3.DatabaseError`` for a damaged one, ``OSError``).
    """
    import dspy  # noqa: PLC0415 - heavy: only when a run configures its cache

    disk = OnDemandFanoutCache(where, shards=SHARDS, timeout=TIMEOUT, size_limit=size_limit)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=where)
    cache = dspy.cache
    cache.disk_cache = disk
    cache.enable_disk_cache = True
    disk.make_missing_shards()


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
