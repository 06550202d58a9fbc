"""``SecurityConfig``: what a ``saag-opt security`` run runs, without importing AgentDojo.

Why apart from ``run``: the command line reads the config's fields (``--config``, the ``--resume``
help) before it needs AgentDojo, whose import takes seconds; ``run`` and ``suites`` import it from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from saag_opt.resuming import RUN_OPTION

SUITES = ("workspace", "travel", "banking", "slack")
ATTACKS = ("important_instructions", "tool_knowledge", "direct", "ignore_previous", "system_message", "injecagent")
"""The attacks a security run uses by default (all FixedJailbreakAttack templates of AgentDojo 0.1.35)."""
ADAPTIVE = ("adaptive_markerless", "adaptive_voice", "adaptive_swap", "adaptive_reviewer", "adaptive_laundering")
"""Attacks written against the guard (``runtime.agentdojo.adaptive``), run on request beside the templates."""
SCRIPTED = "scripted"
"""The ``--agent`` value of the obedient worst case."""


class SecurityConfig(BaseModel):
    """What a security run runs (``run.json``'s ``config``)."""

    model_config = ConfigDict(extra="forbid")
    FLAGS: ClassVar[Mapping[str, str]] = {"suites": "--suite", "attacks": "--attack", "limit": "--user-tasks"}
    """Fields whose command-line flag is not the field's name (``resuming.flag``)."""

    suites: list[str] = Field(default_factory=lambda: list(SUITES))
    attacks: list[str] = Field(default_factory=lambda: list(ATTACKS))
    agent: str = SCRIPTED
    """``scripted`` or a model spec."""
    mode: Literal["auto", "native", "json"] = "auto"
    """How a model agent calls tools (``SaagLLM``)."""
    guard: bool = True
    """Both arms (without and with the guard); False: the unguarded arm alone."""
    benign: bool = True
    """Also run each user task without an attack (utility without attack)."""
    limit: int | None = Field(default=None, ge=1)
    """The first N user tasks of each suite (all injection tasks)."""
    max_cost: Annotated[float | None, RUN_OPTION] = Field(default=None, gt=0)
    runs_dir: Path = Path("runs")

    @field_validator("suites")
    @classmethod
    def _suites(cls, value: list[str]) -> list[str]:
        return _known("suite", value, SUITES)

    @field_validator("attacks")
    @classmethod
    def _attacks(cls, value: list[str]) -> list[str]:
        return _known("attack", value, ATTACKS + ADAPTIVE, empty=True)

    @property
    def arms(self) -> tuple[str, ...]:
        """The pipeline arms run."""
        return ("none", "guard") if self.guard else ("none",)


def _known(what: str, value: Sequence[str], known: Sequence[str], *, empty: bool = False) -> list[str]:
    names = list(dict.fromkeys(v.strip() for item in value for v in item.split(",") if v.strip()))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    if not names and not empty:
        raise ValueError(f"give at least one {what}")
    return names


__all__ = ["ADAPTIVE", "ATTACKS", "SCRIPTED", "SUITES", "SecurityConfig"]
