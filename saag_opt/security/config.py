"""``SecurityConfig``: what a ``saag-opt security`` run runs, without importing AgentDojo.

Why apart from ``run``: the command line reads the config's fields (``--config``, the ``--resume``
help) before it needs AgentDojo, whose import takes seconds; ``run`` and ``suites`` import it from here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from saag_opt.resuming import RUN_OPTION

SUITES = ("workspace", "travel", "banking", "slack")
ATTACKS = ("important_instructions", "tool_knowledge", "direct", "ignore_previous", "system_message", "injecagent")
"""The attacks a security run uses by default (all FixedJailbreakAttack templates of AgentDojo 0.1.35)."""
SEARCH = "adaptive_search"
"""The search attacker (``runtime.agentdojo.search``): its wording searched from the guard's verdicts, then held out."""
ADAPTIVE = ("adaptive_markerless", "adaptive_voice", "adaptive_swap", "adaptive_reviewer", "adaptive_laundering", SEARCH)
"""Attacks written against the guard (``runtime.agentdojo.adaptive``, ``search``), run on request beside the templates."""
SEARCH_BUDGET = 24
"""The search attacker's trials per suite by default (``search.BUDGET`` is this)."""
SCRIPTED = "scripted"
"""The ``--agent`` value of the obedient worst case."""
CASCADE_ONLY = "guard"
"""The ``--mechanism`` of ``Guard()``: the SAAG cascade and the injection rule, no LLM reviewer (the default)."""
MECHANISMS = (CASCADE_ONLY, "guard+r<N>", "gate+guard+r<N>")
"""What the guarded arm runs; a reviewer mechanism is ``Guard.load``'s loop with the tuned reviewer."""
DEFAULT_PROMPT = "reviewer@v2"
"""The reviewer prompt of a reviewer mechanism when ``--prompt`` is not given (evaluate's default)."""
REVIEWER_FIELDS = ("mechanism", "reviewer", "prompt", "saag_informed", "prompts_dir")
"""The guarded arm's reviewer set-up: written to ``run.json`` only for a reviewer mechanism, so a
``guard`` run's config keeps the shape it always had (and old runs resume to the same file)."""
_REVIEWED = re.compile(r"(gate\+)?(?:guard\+)?r([1-9][0-9]*)")
"""A reviewer mechanism; ``r<N>`` and ``gate+r<N>`` spell the same loops (``Guard.load``) and are recorded in full."""


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
    mechanism: str = CASCADE_ONLY
    """The guarded arm: ``guard`` (``Guard()``), or ``guard+r<N>`` / ``gate+guard+r<N>``: ``Guard.load``
    with the reviewer below (at most N reviews; ``gate+``: calls the cascade vouches for skip it)."""
    reviewer: str | None = None
    """The reviewer's model spec (a reviewer mechanism only); its reviser runs on the same model."""
    prompt: str = DEFAULT_PROMPT
    """The reviewer's prompt: a store reference (``reviewer@best``) or a prompt file."""
    saag_informed: bool = False
    """The reviewer also sees the SAAG report of the calls (experimental reviewer)."""
    prompts_dir: Path | None = None
    """The prompt store ``prompt`` resolves in (``--store``; None: ``$SAAG_OPT_PROMPTS``, else the default)."""
    search_budget: int = Field(default=SEARCH_BUDGET, ge=1, le=500)
    """Trials per suite of the search attacker (``adaptive_search``); in ``run.json`` only when it runs."""

    @field_validator("suites")
    @classmethod
    def _suites(cls, value: list[str]) -> list[str]:
        return _known("suite", value, SUITES)

    @field_validator("attacks")
    @classmethod
    def _attacks(cls, value: list[str]) -> list[str]:
        return _known("attack", value, ATTACKS + ADAPTIVE, empty=True)

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, value: str) -> str:
        name = value.strip().lower()
        if name == CASCADE_ONLY:
            return name
        found = _REVIEWED.fullmatch(name)
        if found is None:
            raise ValueError(f"unknown mechanism {value!r} for the security run (known: {', '.join(MECHANISMS)}, "
                             "N >= 1)")
        return f"{found.group(1) or ''}guard+r{found.group(2)}"

    @model_validator(mode="after")
    def _reviewer_pairs_with_mechanism(self) -> SecurityConfig:
        """A reviewer mechanism needs a reviewer model; ``guard`` takes none (nor its prompt or store)."""
        if self.reviewed and self.reviewer is None:
            raise ValueError(f"--mechanism {self.mechanism} needs a reviewer model: pass --reviewer (e.g. gpt-4o-mini, "
                             "local, openai/<m>@URL), or use --mechanism guard")
        if not self.reviewed:
            given = [flag for name, flag, default in (("reviewer", "--reviewer", None), ("saag_informed", "--saag-informed",
                     False), ("prompt", "--prompt", DEFAULT_PROMPT), ("prompts_dir", "--store", None))
                     if getattr(self, name) != default]
            if given:
                raise ValueError(f"{', '.join(given)}: --mechanism guard runs no LLM reviewer; use --mechanism "
                                 "guard+r<N> (or gate+guard+r<N>) to measure one")
        if self.reviewed and not self.guard:
            raise ValueError(f"--mechanism {self.mechanism} reviews the guarded arm, and --no-guard runs the unguarded "
                             "arm alone: drop one of them")
        if self.reviewer is not None:
            from saag_opt.lm.request_rules import check_model  # noqa: PLC0415 - start-up: the CLI reads this config early

            check_model(self.reviewer, "reviewer")
        return self

    @model_serializer(mode="wrap")
    def _reviewer_fields_when_reviewed(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = dict(handler(self))
        if not self.reviewed:
            for name in REVIEWER_FIELDS:
                data.pop(name, None)
        if SEARCH not in self.attacks:
            data.pop("search_budget", None)
        return data

    @property
    def arms(self) -> tuple[str, ...]:
        """The pipeline arms run."""
        return ("none", "guard") if self.guard else ("none",)

    @property
    def reviewed(self) -> bool:
        """The guarded arm runs the LLM reviewer (``guard+r<N>`` or ``gate+guard+r<N>``)."""
        return self.mechanism != CASCADE_ONLY

    @property
    def gated(self) -> bool:
        """``gate+guard+r<N>``: calls the cascade vouches for run without a review."""
        return self.mechanism.startswith("gate+")


def _known(what: str, value: Sequence[str], known: Sequence[str], *, empty: bool = False) -> list[str]:
    names = list(dict.fromkeys(v.strip() for item in value for v in item.split(",") if v.strip()))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    if not names and not empty:
        raise ValueError(f"give at least one {what}")
    return names


__all__ = ["ADAPTIVE", "ATTACKS", "CASCADE_ONLY", "DEFAULT_PROMPT", "MECHANISMS", "REVIEWER_FIELDS", "SCRIPTED", "SEARCH",
           "SEARCH_BUDGET", "SUITES", "SecurityConfig"]
