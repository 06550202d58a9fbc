"""Shared pieces of the multi-turn tests: the BFCL mark, samples of each category, transcripts."""

from __future__ import annotations

import importlib.util

from saag_opt.data.bfcl_environment import gold_calls
from saag_opt.data.bfcl_multiturn import load_bfcl_multi_turn
from saag_opt.episodes import Episode, Transcript
from saag_opt.model import ToolCall
from tests.conftest import requires

_MISSING = [name for name in ("bfcl_eval", "mpmath") if importlib.util.find_spec(name) is None]
needs_bfcl = requires(f"{' and '.join(_MISSING)} not installed (pip install --no-deps bfcl-eval==2026.3.23; "
                      "mpmath is a saag-opt dependency)" if _MISSING else None)
"""Mark for a test that runs BFCL's multi-turn backends and checkers."""

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def episodes(category: str) -> list[Episode]:
    """Every entry of one BFCL multi-turn category (memoised by the loader's caller)."""
    return load_bfcl_multi_turn(category)


def sample(per_category: int = 5) -> list[Episode]:
    """The first ``per_category`` entries of each category, spread over the file (every 40th)."""
    out = []
    for category in CATEGORIES:
        entries = episodes(category)
        out += entries[:: max(len(entries) // per_category, 1)][:per_category]
    return out


def gold_transcript(episode: Episode) -> Transcript:
    """The gold calls as a transcript: each turn's calls in one step (an empty turn: no step)."""
    return tuple(((calls,) if calls else ()) for calls in gold_calls(episode))


def one_step(*calls: ToolCall) -> tuple[tuple[ToolCall, ...], ...]:
    """One turn of a transcript with a single step."""
    return (tuple(calls),) if calls else ()
