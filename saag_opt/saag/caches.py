"""One switch for every cache the SAAG core keeps.

The cascade and the truth check memoise per query, per tool and per example (prepared queries,
tool shapes, compiled gold). That is what makes a second prediction for the same example cheap;
it also means a benchmark that does not clear them measures a warm cache, not new predictions.
Every module that keeps a cache registers its clear function here, and ``clear_caches`` empties
them all (the speed benchmark calls it before each timed repetition).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["clear_caches", "register_cache"]

_CLEARERS: list[Callable[[], object]] = []


def register_cache(clear: Callable[[], object]) -> Callable[[], object]:
    """Register a zero-argument function that empties one cache; returns it unchanged."""
    _CLEARERS.append(clear)
    return clear


def clear_caches() -> None:
    """Empty every cache of the SAAG core (results do not change; only speed does)."""
    for clear in _CLEARERS:
        clear()
