"""Pre-flight estimates (``--dry-run``): LM calls, tokens and dollars per role before anything runs.

An estimate, not a bound (the bound is ``--max-cost``): every base call is assumed uncached, a
reviewer is assumed to reject half of what it sees (``REJECT_RATE``), prompts are measured from
the examples' rendered text (about 4 characters per token) and replies are assumed short
(``REPLY_TOKENS``; reasoning models add ``THINKING_TOKENS``). Prices are the models' own
(``lm.accounting.model_price``; local and compatible servers are free).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from saag_opt.agents.base import BASE_SYSTEM_PROMPT
from saag_opt.agents.reviewer import render_conversation, render_tool_docs
from saag_opt.lm import is_reasoning_model, parse_model_spec
from saag_opt.lm.accounting import price_call
from saag_opt.model import Example

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms import Mechanism

REJECT_RATE = 0.5
"""Assumed share of reviews that reject (each rejection costs one base revision)."""

REPLY_TOKENS = {"base": 60, "reviewer": 120, "reflection": 2000}
"""Assumed completion tokens per call by role."""

THINKING_TOKENS = 1500
"""Extra completion tokens of a reasoning model (gpt-5*, o*) per call."""

CHARS_PER_TOKEN = 4


@dataclass
class RoleEstimate:
    """Expected calls, tokens and dollars of one role."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0
    model: str | None = None

    def add(self, other: RoleEstimate) -> None:
        """Add ``other``'s calls, tokens and dollars (a second pass of the same role)."""
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.dollars += other.dollars
        self.model = self.model or other.model


@dataclass
class Estimate:
    """What a command is expected to spend, by role; ``to_dict`` is what ``--dry-run`` prints."""

    command: str
    examples: int
    roles: dict[str, RoleEstimate] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)

    def add(self, role: str, part: RoleEstimate) -> None:
        """Add ``part`` to ``role``'s running estimate."""
        self.roles.setdefault(role, RoleEstimate()).add(part)

    def merge(self, other: Estimate) -> None:
        """Add every role of ``other`` (another pass of the same command)."""
        for role, part in other.roles.items():
            self.add(role, part)
        self.assumptions += [a for a in other.assumptions if a not in self.assumptions]

    @property
    def total(self) -> RoleEstimate:
        """Every role added up (no model)."""
        out = RoleEstimate()
        for part in self.roles.values():
            out.add(part)
        out.model = None
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: per role and total, dollars rounded to 1/100 cent."""
        def row(part: RoleEstimate) -> dict[str, Any]:
            return asdict(part) | {"dollars": round(part.dollars, 4)}

        return {"command": self.command, "examples": self.examples,
                "roles": {r: row(p) for r, p in sorted(self.roles.items())} | {"total": row(self.total)},
                "assumptions": self.assumptions}


def role_estimate(model: str, role: str, calls: float, prompt_tokens: float,
                  completion_tokens: float | None = None) -> RoleEstimate:
    """``calls`` calls of ``prompt_tokens`` in / the role's reply size out, priced for ``model``."""
    spec = parse_model_spec(model)
    n = math.ceil(calls)
    out = REPLY_TOKENS.get(role, 100) if completion_tokens is None else completion_tokens
    out += THINKING_TOKENS if is_reasoning_model(spec) and role != "reflection" else 0
    p_in, p_out = int(n * prompt_tokens), int(n * out)
    return RoleEstimate(n, p_in, p_out, price_call(spec, p_in, p_out) or 0.0, spec.label)


def prompt_tokens(examples: Sequence[Example], extra_chars: int = 0, *, sample_size: int = 50) -> float:
    """Mean prompt tokens of a call about one of ``examples``: conversation + tool docs + ``extra_chars``.

    Measured on the first ``sample_size`` examples (rendering every one would cost more than it tells).
    """
    sample = list(examples)[:sample_size]
    if not sample:
        return 0.0
    chars = sum(len(render_conversation(e)) + len(render_tool_docs(e)) for e in sample) / len(sample)
    return (chars + extra_chars) / CHARS_PER_TOKEN


def estimate_evaluation(examples: Sequence[Example], *, base: str, reviewer: str | None, mechanism: Mechanism,
                        instructions: Mapping[str, str] | Iterable[str] = (), base_cached: bool = False,
                        command: str = "evaluate") -> Estimate:
    """One evaluate pass over ``examples`` with ``mechanism`` (a set-up's: its repair budget included).

    ``base_cached``: the round-0 base calls are already paid (compare's per-version passes after
    its shared base pass).
    """
    texts = instructions.values() if isinstance(instructions, Mapping) else instructions
    reviews, revisions = mechanism.calls_per_example(REJECT_RATE)
    base_calls = revisions + (0.0 if base_cached else 1.0)  # round 0 (and s/g's first candidate) is one call
    n = len(examples)
    est = Estimate(command, n, assumptions=[
        "round-0 base calls paid by the shared base pass" if base_cached else "every base call uncached",
        f"{REJECT_RATE:.0%} of reviews reject",
        f"replies of {REPLY_TOKENS['base']} (base) and {REPLY_TOKENS['reviewer']} (reviewer) tokens",
        "about 4 characters per token"])
    per_base = prompt_tokens(examples, len(BASE_SYSTEM_PROMPT) + 200)
    est.add("base", role_estimate(base, "base", n * base_calls, per_base))
    if reviewer is not None and reviews:
        per_review = prompt_tokens(examples, sum(len(t) for t in texts) + 1000)
        est.add("reviewer", role_estimate(reviewer, "reviewer", n * reviews, per_review))
    return est


__all__ = ["Estimate", "RoleEstimate", "estimate_evaluation", "prompt_tokens", "role_estimate"]
