"""SAAG stage 1, registry conformance: FNEM and NCS (SAAG paper §2.1; docs/design.md §3).

FNEM (Eq. 1) is -1 when no name could be parsed (None, a non-string, or an empty/blank string),
0 when the name is not registered and 1 when it is. A name written in its OpenAI-safe spelling
(``math_factorial`` for ``math.factorial``) counts as registered, because that is the name the
agent was shown.

NCS (Eq. 2) is computed only when FNEM = 0::

    NCS = max over c in C of 0.6 * WRatio(name, c) / 100 + 0.4 * Jaccard(name, c)

where C holds the registered names that share at least one lowercase character trigram with the
name (a name shorter than 3 characters is a single gram), WRatio is rapidfuzz's weighted ratio on
the raw strings and Jaccard is over lowercased whitespace tokens. The paper leaves an empty C
undefined; we return NCS = 0 with no nearest name (as the c2kv port does).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from rapidfuzz import fuzz

from saag_opt.model import Registry, ToolSpec
from saag_opt.saag.caches import register_cache

__all__ = ["fnem", "name_trigrams", "ncs", "resolve_tool", "token_jaccard"]

NCS_WRATIO_WEIGHT = 0.6
NCS_JACCARD_WEIGHT = 0.4


def _parsed_name(name: Any) -> str | None:
    """The name as a usable string, or None when nothing parsable is there."""
    if isinstance(name, str) and name.strip():
        return name
    return None


def resolve_tool(name: Any, registry: Registry) -> ToolSpec | None:
    """The registered tool a predicted name refers to (exact or OpenAI-safe spelling), or None."""
    tool = registry.get(name)
    if tool is not None or not isinstance(name, str):
        return tool
    resolved = registry.resolve(name)
    return registry.get(resolved) if resolved is not None else None


def fnem(name: Any, registry: Registry) -> Literal[-1, 0, 1]:
    """Function Name Exact Match (Eq. 1): -1 unparsable, 0 unregistered, 1 registered."""
    if _parsed_name(name) is None:
        return -1
    return 1 if resolve_tool(name, registry) is not None else 0


@lru_cache(maxsize=8192)
def name_trigrams(name: str) -> frozenset[str]:
    """Lowercase character trigrams of a name; a name shorter than 3 characters is one gram."""
    low = name.lower()
    if len(low) < 3:
        return frozenset((low,))
    return frozenset(low[i:i + 3] for i in range(len(low) - 2))


register_cache(name_trigrams.cache_clear)


def _shares_trigram(name: str, grams: frozenset[str], candidate: str) -> bool:
    """Whether ``candidate`` is in NCS's candidate set C for ``name`` (with ``grams`` its trigrams).

    When both have three or more characters, a trigram of the name is a trigram of the candidate
    iff it occurs in the lowercased candidate: a few substring searches instead of building the
    candidate's trigram set (each prediction brings a new registry, so a cache rarely hits).
    """
    if len(name) < 3 or len(candidate) < 3:
        return not grams.isdisjoint(name_trigrams(candidate))
    low = candidate.lower()
    for gram in grams:
        if gram in low:
            return True
    return False


def token_jaccard(a: str, b: str) -> float:
    """Jaccard similarity of lowercased whitespace tokens (0 when both are empty)."""
    ta, tb = set(a.lower().split()), set(b.lower().split())
    union = ta | tb
    return len(ta & tb) / len(union) if union else 0.0


def ncs(name: Any, registry: Registry) -> tuple[float, str | None]:
    """Nearest Candidate Score (Eq. 2) and the registered name that attains it.

    Returns ``(0.0, None)`` for an unparsable name or when no registered name shares a trigram.
    Ties keep the earlier registry entry, so the result is deterministic.
    """
    parsed = _parsed_name(name)
    if parsed is None:
        return 0.0, None
    grams = name_trigrams(parsed)
    best_score, best_name = 0.0, None
    for tool in registry:
        candidate = tool.name
        if not _shares_trigram(parsed, grams, candidate):
            continue
        score = (NCS_WRATIO_WEIGHT * fuzz.WRatio(parsed, candidate) / 100.0
                 + NCS_JACCARD_WEIGHT * token_jaccard(parsed, candidate))
        if best_name is None or score > best_score:
            best_score, best_name = score, candidate
    return best_score, best_name
