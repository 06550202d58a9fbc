"""The ``Environment`` plug point: where an episode's tool calls run, and who judges the run.

An environment is what BFCL's executable backends, a tau2 domain or a user's own tools look like
to the episode loop (``saag_opt.agents.episode``): reset for an episode, the tools at a turn,
execute calls, check a transcript. The loop never executes anything itself, and the reviewer
sits between the agent's proposal and ``execute``, so a blocked call never reaches it.

Contract (``saag_opt.testing.contracts.environment.check_environment`` runs it):

- ``reset(episode)`` forgets everything of earlier episodes; two environments never share state.
- ``tools(turn)`` is the registry the agent may call at that turn (tools added at later turns are
  not in it); it carries no gold.
- ``execute(calls)`` returns one ``ToolResult`` per call, in order, and never raises for a call
  the agent got wrong (unknown function, bad arguments): that is an error result, as an agent
  would see it. Deterministic: the same calls after the same reset give the same results.
- ``check(transcript)`` judges what was executed against the episode's gold; it depends only on
  the episode and the transcript (not on what ``execute`` did, and not on earlier checks), and it
  is the only method that reads ``Episode.gold``.
- ``close()`` releases what ``reset`` took (BFCL keeps instances in module globals).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from saag_opt.episodes.model import Episode, Judgement, ToolResult, Transcript
from saag_opt.errors import ConfigError
from saag_opt.model import Registry, ToolCall


class Environment(Protocol):
    """Runs one episode's calls and judges the run (module docstring: the contract)."""

    def reset(self, episode: Episode) -> None:
        """Start ``episode`` from its initial state."""
        ...

    def tools(self, turn: int) -> Registry:
        """The tools available at ``turn`` (0-based)."""
        ...

    def execute(self, calls: Sequence[ToolCall]) -> tuple[ToolResult, ...]:
        """Run ``calls`` in order on the current state; one result each."""
        ...

    def check(self, transcript: Transcript) -> Judgement:
        """The verdict on the executed calls of a whole run of the current episode."""
        ...

    def close(self) -> None:
        """Release the episode's state."""
        ...


EnvironmentFactory = Callable[[], Environment]
"""Builds a fresh environment (one per episode run, so runs in parallel share nothing)."""

_ENVIRONMENTS: dict[str, tuple[EnvironmentFactory, str]] = {}


def register_environment(name: str, factory: EnvironmentFactory, description: str) -> None:
    """Make ``Episode.environment == name`` runnable; a dataset module registers its environment on import.

    Raises:
        ConfigError: an empty name.
    """
    if not name or not name.strip():
        raise ConfigError("an environment needs a name")
    _ENVIRONMENTS[name] = (factory, description)


def environment_names() -> list[str]:
    """Registered environment names."""
    return list(_ENVIRONMENTS)


def open_environment(name: str) -> Environment:
    """A fresh environment of a registered name.

    Raises:
        ConfigError: an unknown name (the message lists the registered ones).
    """
    entry = _ENVIRONMENTS.get(name)
    if entry is None:
        known = ", ".join(sorted(_ENVIRONMENTS)) or "none (load the episodes' dataset first: it registers its own)"
        raise ConfigError(f"unknown environment {name!r}; registered: {known}")
    return entry[0]()


__all__ = ["Environment", "EnvironmentFactory", "environment_names", "open_environment", "register_environment"]
