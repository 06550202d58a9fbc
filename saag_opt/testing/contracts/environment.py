"""The ``Environment`` contract (``saag_opt.episodes.environment``).

Resets isolate, execution is deterministic and never raises for a wrong call, the gold is read by
``check`` alone, and ``check`` judges the transcript, not the live state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from saag_opt.episodes import Environment, Episode, Judgement, ToolResult, Transcript
from saag_opt.model import Registry, ToolCall
from saag_opt.testing.contracts.mechanism import GoldRead

JUNK_CALLS = (
    ToolCall("no_such_function_anywhere", {"x": 1}),
    ToolCall(None, {}),
    ToolCall("open", {"file": "/nonexistent/saag-opt-contract", "mode": "w"}),
    ToolCall("print", {"x=__import__('os').getcwd() or 1, y": 2}),
)
"""Calls an agent may propose that must come back as error results (unknown, unnamed, builtins, injected keys)."""


class _PoisonedGold:
    """Stands in for ``Episode.gold``: any use raises ``GoldRead``."""

    def _read(self, *_: Any, **__: Any) -> Any:
        raise GoldRead("the environment read episode.gold outside check")

    __iter__ = __len__ = __bool__ = __getitem__ = __contains__ = __eq__ = __hash__ = _read


def _without_gold(episode: Episode) -> Episode:
    out = copy.copy(episode)
    object.__setattr__(out, "gold", _PoisonedGold())
    return out


def _replay(env: Environment, episode: Episode, transcript: Transcript) -> list[tuple[ToolResult, ...]]:
    env.reset(episode)
    return [env.execute(step) for turn in transcript for step in turn]


def check_environment(make: Callable[[], Environment], episode: Episode, gold: Transcript, *,
                      wrong: Transcript | None = None) -> Judgement:
    """Run an environment factory through the contract on one episode; returns ``check(gold)``.

    ``gold`` is a transcript the environment must judge valid (for BFCL: the gold calls, one step per
    turn); ``wrong``, if given, one it must judge invalid. The episode needs at least one call.

    Raises:
        AssertionError: the first broken rule, named.
    """
    before = copy.deepcopy(episode)
    env = make()
    try:
        first = _first_step(gold)
        for turn in range(len(episode.turns)):
            tools = env_tools(env, episode, turn)
            assert isinstance(tools, Registry), f"tools({turn}) returned {type(tools).__name__}, not a Registry"
        results = _replay(env, episode, gold)
        for step, got in zip((s for t in gold for s in t), results):
            assert isinstance(got, tuple) and len(got) == len(step), "execute must return one result per call"
            assert all(isinstance(r, ToolResult) for r in got), "execute must return ToolResult values"
        assert _replay(env, episode, gold) == results, "the same calls after a reset gave other results"
        other = make()
        try:
            other.reset(episode)
            assert other.execute(first) == results[0], "a second environment saw the first one's state"
        finally:
            other.close()
        try:
            junk = env.execute(JUNK_CALLS)
        except Exception as exc:  # noqa: BLE001 - that is the broken rule
            raise AssertionError(f"execute raised {type(exc).__name__} on a wrong call: {exc}; "
                                 "a wrong call is an error result") from None
        assert len(junk) == len(JUNK_CALLS), "execute must return one result per call, wrong ones too"
        judgement = env.check(gold)
        assert isinstance(judgement, Judgement), f"check returned {type(judgement).__name__}, not a Judgement"
        assert judgement.valid, f"check judged the gold transcript invalid: {judgement.error_type}: {judgement.message}"
        assert env.check(gold) == judgement, "a second check of the same transcript gave another judgement"
        assert all(0 <= t < len(episode.turns) for t in judgement.abstain_turns), "abstain_turns out of range"
        if wrong is not None:
            verdict = env.check(wrong)
            assert not verdict.valid, "check judged the wrong transcript valid"
            assert verdict.failed_turn is None or 0 <= verdict.failed_turn < len(episode.turns), "failed_turn out of range"
        try:
            _replay(env, _without_gold(episode), gold)
            env_tools(env, _without_gold(episode), 0)
        except GoldRead as exc:
            raise AssertionError(f"{exc}; reset, tools and execute may not read the gold") from None
        env.reset(episode)
        assert env.check(gold) == judgement, "check depends on what execute did (it must judge the transcript alone)"
    finally:
        env.close()
    env.close()  # a second close is harmless
    assert episode == before, "the environment mutated the episode"
    return judgement


def env_tools(env: Environment, episode: Episode, turn: int) -> Registry:
    """``tools(turn)`` after a reset to ``episode``."""
    env.reset(episode)
    return env.tools(turn)


def _first_step(gold: Transcript) -> tuple[ToolCall, ...]:
    for turn in gold:
        for step in turn:
            if step:
                return step
    raise AssertionError("the gold transcript makes no call: give an episode that needs one")


__all__ = ["JUNK_CALLS", "check_environment", "env_tools"]
