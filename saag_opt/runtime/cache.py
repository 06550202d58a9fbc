"""Review cache: a decision is replayed for the same prompt, configuration, messages, tools and calls.

Why: a re-run of an agent episode, or LangGraph re-running a node on resume, must not pay for the
same review twice. Keys are sha256 digests of canonical JSON; entries are small JSON files written
atomically (one per decision), plus an in-memory LRU. Only finished reviews are stored: a decision
made by ``on_error`` (timeout, dead server) is not, so the next attempt reviews for real.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from saag_opt.atomic import JsonShelf
from saag_opt.model import canonical_json


def review_key(*parts: Any) -> str:
    """The cache key of a review: sha256 of the canonical JSON of its parts."""
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


class ReviewCache:
    """Decisions by key, in memory (LRU of ``max_memory``) and, with a ``directory``, on disk."""

    def __init__(self, directory: Path | None = None, *, max_memory: int = 4096) -> None:
        self.directory = directory
        self.max_memory = max_memory
        self._memory: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._shelf = JsonShelf(directory) if directory is not None else None

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored decision dict, or None (a corrupt file is a miss)."""
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                return self._memory[key]
        data = self._shelf.load(key) if self._shelf is not None else None
        if not isinstance(data, dict):
            return None
        self._remember(key, data)
        return data

    def put(self, key: str, decision: dict[str, Any]) -> None:
        """Store a decision dict (atomically on disk)."""
        self._remember(key, decision)
        if self._shelf is not None:
            self._shelf.save(key, decision)

    def _remember(self, key: str, decision: dict[str, Any]) -> None:
        with self._lock:
            self._memory[key] = decision
            self._memory.move_to_end(key)
            while len(self._memory) > self.max_memory:
                self._memory.popitem(last=False)


__all__ = ["ReviewCache", "review_key"]
