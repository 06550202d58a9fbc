"""The conversation data model: an episode of user turns, what ran, and the environment's verdict.

An ``Episode`` is one multi-turn entry of a dataset (a BFCL ``multi_turn_*`` entry, a tau2 task, a
user's own script): the user turns, the tools at the start and the tools added at later turns
(BFCL's ``miss_func``), what the environment needs to set itself up, and the gold answer. As with
``Example`` (``saag_opt.model``), only the messages and the tools are ever shown to an agent or a
reviewer; ``setup`` is read by the environment, ``gold`` only by its ``check``.

What the checker reads of a run is a ``Transcript``: per turn, per step, the calls that were
*executed*. A call that a reviewer blocked never ran, so it is in no transcript.

Pure values (frozen, slotted dataclasses), like ``saag_opt.model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from saag_opt.model import Registry, ToolCall, ToolSpec

Transcript = tuple[tuple[tuple[ToolCall, ...], ...], ...]
"""Executed calls per turn, per step (steps that executed nothing are left out, as BFCL leaves out
steps it cannot decode). Fewer turns than the episode has = the run was cut off (step limit)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: its messages and the tools that become available at it."""

    messages: tuple[Mapping[str, Any], ...]
    added_tools: tuple[ToolSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Episode:
    """One multi-turn entry. ``setup`` and ``gold`` are never shown to an agent or a reviewer."""

    id: str
    category: str
    turns: tuple[Turn, ...]
    tools: Registry
    """The tools at turn 0 (``tools_at`` adds the later ones)."""
    environment: str
    """The registered environment that runs it (``saag_opt.episodes.environment``)."""
    setup: Mapping[str, Any] = field(default_factory=dict)
    """What the environment resets from (BFCL: ``initial_config``, ``involved_classes``)."""
    gold: Any = None
    """The truth, in the environment's own form; only ``Environment.check`` reads it."""
    split: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError(f"episode {self.id!r} has no turns")

    def tools_at(self, turn: int) -> Registry:
        """The tools available at ``turn``: the initial ones plus those added up to it, in that order."""
        added = [tool for t in self.turns[: turn + 1] for tool in t.added_tools]
        return Registry([*self.tools, *added]) if added else self.tools

    def with_split(self, split: str) -> Episode:
        """A copy tagged with its split."""
        return Episode(self.id, self.category, self.turns, self.tools, self.environment, self.setup, self.gold,
                       split, self.source)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one call returned, as text the agent reads next.

    ``executed`` False: the environment refused the call (not one of its functions, unreadable
    arguments) and nothing ran; ``content`` says why.
    """

    name: str | None
    content: str
    executed: bool = True


@dataclass(frozen=True, slots=True)
class Judgement:
    """The environment's verdict on a transcript (for BFCL, its own checkers' answer).

    ``failed_turn``: the first turn whose check fails (None when valid or unknown);
    ``abstain_turns``: the turns whose truth is to call nothing (BFCL's ``miss_func`` and
    ``miss_param`` turns), so abstention can be counted on its own; ``checks``: each checker's own
    answer when several decide (``valid`` is their conjunction; tau2: one per reward component,
    ``db``, ``env_assertion``, ``action``, ``communicate``); ``details``: JSON-ready evidence
    (state differences, missing results), truncated by whoever stores it.
    """

    valid: bool
    error_type: str | None = None
    message: str | None = None
    failed_turn: int | None = None
    abstain_turns: tuple[int, ...] = ()
    checks: Mapping[str, bool] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    reward: float | None = None
    """The benchmark's own score when it has one (tau2's reward; ``valid`` is its success test)."""


__all__ = ["Episode", "Judgement", "ToolResult", "Transcript", "Turn"]
