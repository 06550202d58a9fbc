"""Pre-flight estimates (``--dry-run``): LM calls, tokens and dollars per role before anything runs.

One model for every verb: ``Estimate`` (rows per role, the assumptions stated, ``merge`` for a
second pass, ``parts`` for a breakdown such as security's suites and attacks), rendered by
``report.estimate_tables``. evaluate and compare build it here (``estimate_evaluation``,
``estimate_episodes``, ``estimate_tau2``), tune adds those up (``tune.preflight``), optimize adds
GEPA's rollouts and reflection (``optimize.budget.estimate_run``), security its AgentDojo runs
(``security.run.preflight_security``).

An estimate, not a bound (the bound is ``--max-cost``): every base call is assumed uncached, a
reviewer is assumed to reject half of what it sees (``REJECT_RATE``), prompts are measured from
the examples' rendered text (about 4 characters per token) and replies are assumed short
(``REPLY_TOKENS``; reasoning models add ``THINKING_TOKENS``). Prices are the models' own
(``lm.spend.accounting.model_price``; local and compatible servers are free; an OpenAI model without a
known price is ``None``, printed ``unknown``, never $0). Import-light (``optimize.summary``, a run
reader, stores an ``Estimate``): the agents' prompts and renderers load inside the builders.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

from saag_opt.agents.conversation import Conversation
from saag_opt.episodes import Episode
from saag_opt.lm import is_reasoning_model, parse_model_spec
from saag_opt.lm.spend.accounting import price_call
from saag_opt.model import Example

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism
    from saag_opt.agents.tau2 import Tau2Sizes

REJECT_RATE = 0.5
"""Assumed share of reviews that reject (each rejection costs one base revision)."""

REPLY_TOKENS = {"base": 60, "reviewer": 120, "reflection": 2000, "user": 40}
"""Assumed completion tokens per call by role."""

THINKING_TOKENS = 1500
"""Extra completion tokens of a reasoning model (gpt-5*, o*) per call."""

CHARS_PER_TOKEN = 4


def _sum(a: float | None, b: float | None) -> float | None:
    """Dollars added up; None (an unknown price) wins."""
    return None if a is None or b is None else a + b


@dataclass
class RoleEstimate:
    """Expected calls, tokens and dollars of one role."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float | None = 0.0
    """None: the model has no known price (printed ``unknown``: an unpriced call is not a free one)."""
    model: str | None = None

    def add(self, other: RoleEstimate) -> None:
        """Add ``other``'s calls, tokens and dollars (a second pass of the same role)."""
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.dollars = _sum(self.dollars, other.dollars)
        self.model = self.model or other.model

    def scaled(self, factor: float) -> RoleEstimate:
        """``factor`` times the calls, tokens (rounded) and dollars: a share of passes (tune's mean configuration)."""
        return RoleEstimate(round(self.calls * factor), round(self.prompt_tokens * factor),
                            round(self.completion_tokens * factor),
                            None if self.dollars is None else self.dollars * factor, self.model)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly, dollars rounded to 1/100 cent."""
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "dollars": None if self.dollars is None else round(self.dollars, 4), "model": self.model}


@dataclass
class Estimate:
    """What a command is expected to spend, by role; every verb's ``--dry-run`` returns one.

    ``examples`` counts what the command runs (``unit``: examples, entries as examples, security's
    runs). ``parts``: a breakdown by what is run (security: one per suite and attack), each an
    ``Estimate`` of its own; ``roles`` and ``examples`` hold their sum (``add_part``).
    """

    command: str
    examples: int
    roles: dict[str, RoleEstimate] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    parts: dict[str, Estimate] = field(default_factory=dict)
    unit: str = "examples"

    def add(self, role: str, part: RoleEstimate) -> None:
        """Add ``part`` to ``role``'s running estimate."""
        self.roles.setdefault(role, RoleEstimate()).add(part)

    def assume(self, *said: str) -> None:
        """State assumptions, each once."""
        self.assumptions += [a for a in said if a not in self.assumptions]

    def merge(self, other: Estimate) -> None:
        """Add every role (and part) of ``other``: another pass of the same command (``examples`` unchanged)."""
        for role, part in other.roles.items():
            self.add(role, part)
        for label, sub in other.parts.items():
            if label in self.parts:
                self.parts[label].merge(sub)
                self.parts[label].examples += sub.examples
            else:
                self.parts[label] = _copy(sub)
        self.assume(*other.assumptions)

    def add_part(self, label: str, part: Estimate) -> None:
        """Add ``part`` as the breakdown row ``label`` (merged into one already there), and to the totals."""
        self.merge(Estimate(self.command, 0, parts={label: part}))
        for role, row in part.roles.items():
            self.add(role, row)
        self.examples += part.examples

    @property
    def total(self) -> RoleEstimate:
        """Every role added up (no model)."""
        out = RoleEstimate()
        for part in self.roles.values():
            out.add(part)
        out.model = None
        return out

    def headline(self) -> str:
        """One line: the calls and dollars in all, and what they assume (optimize's ``estimate`` event)."""
        total = self.total
        dollars = "unknown dollars" if total.dollars is None else f"${total.dollars:.2f}"
        return f"about {total.calls} LM calls and {dollars} (an estimate; {'; '.join(self.assumptions)})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: per role and total, dollars rounded to 1/100 cent (what the table renders)."""
        out = {"command": self.command, "examples": self.examples, "unit": self.unit,
               "roles": {r: p.to_dict() for r, p in sorted(self.roles.items())} | {"total": self.total.to_dict()},
               "assumptions": list(self.assumptions)}
        if self.parts:
            out["parts"] = {label: part.to_dict() for label, part in self.parts.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """Read ``to_dict``'s output back, or an older optimize run's ``summary.json`` estimate.

        Older optimize runs stored GEPA's estimate as its own record (``rollouts``, ``reviewer_calls``,
        ``base_calls``, ``reflection_calls``, ``lm_calls``, ``tokens``, ``dollars``, one ``assumptions``
        string, and per role calls, tokens and dollars without the model): read as the roles it
        names, its rollouts and its sentence as assumptions.
        """
        if "command" not in data:
            return _old_gepa_estimate(data)
        roles = {role: RoleEstimate(**{k: v for k, v in row.items() if k in RoleEstimate.__dataclass_fields__})
                 for role, row in (data.get("roles") or {}).items() if role != "total"}
        return cls(str(data["command"]), int(data.get("examples") or 0), roles, list(data.get("assumptions") or []),
                   {label: cls.from_dict(part) for label, part in (data.get("parts") or {}).items()},
                   str(data.get("unit") or "examples"))


def _copy(estimate: Estimate) -> Estimate:
    out = Estimate(estimate.command, estimate.examples, unit=estimate.unit)
    out.merge(estimate)
    return out


def _old_gepa_estimate(data: Mapping[str, Any]) -> Estimate:
    """``Estimate.from_dict`` of the record older optimize runs stored (see there)."""
    rows = data.get("roles") or {}
    fields = RoleEstimate.__dataclass_fields__
    roles = {role: RoleEstimate(**{k: v for k, v in row.items() if k in fields}) for role, row in rows.items()}
    said = [f"{data['rollouts']} rollouts on train/val"] if "rollouts" in data else []
    if not roles:  # before the per-role split: the calls by role, the tokens and dollars in all
        roles = {role: RoleEstimate(calls=int(data.get(f"{role}_calls") or 0))
                 for role in ("reviewer", "base", "reflection")}
        said.append(f"recorded without a per-role split: {data.get('tokens', 0)} tokens, "
                    f"${float(data.get('dollars') or 0.0):.4f} in all")
    if data.get("assumptions"):
        said.append(str(data["assumptions"]))
    return Estimate("optimize", 0, roles, said)


def _read_estimate(value: Any) -> Estimate:
    if isinstance(value, Estimate):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"an estimate is a mapping, got {type(value).__name__}")
    return Estimate.from_dict(value)


StoredEstimate = Annotated[Estimate, PlainValidator(_read_estimate), PlainSerializer(Estimate.to_dict),
                           WithJsonSchema({"type": "object"})]
"""An ``Estimate`` as a pydantic field: written as ``to_dict``, read by ``Estimate.from_dict`` (older shapes too)."""


def role_estimate(model: str, role: str, calls: float, prompt_tokens: float,
                  completion_tokens: float | None = None) -> RoleEstimate:
    """``calls`` calls of ``prompt_tokens`` in / the role's reply size out, priced for ``model``."""
    spec = parse_model_spec(model)
    n = math.ceil(calls)
    out = REPLY_TOKENS.get(role, 100) if completion_tokens is None else completion_tokens
    out += THINKING_TOKENS if is_reasoning_model(spec) and role != "reflection" else 0
    p_in, p_out = int(n * prompt_tokens), int(n * out)
    return RoleEstimate(n, p_in, p_out, price_call(spec, p_in, p_out), spec.label)


def review_assumptions(mechanism: Mechanism) -> list[str]:
    """What an estimate assumes of the reviews: the reject rate, and for a gate that it never skips one."""
    said = [f"{REJECT_RATE:.0%} of reviews reject"]
    if mechanism.gated:
        said.append(f"{mechanism.spec}: every call reaches the reviewer (none vouched for by the SAAG gate), "
                    "so this is the upper end")
    return said


def prompt_tokens(examples: Sequence[Example], extra_chars: int = 0, *, sample_size: int = 50) -> float:
    """Mean prompt tokens of a call about one of ``examples``: conversation + tool docs + ``extra_chars``.

    Measured on the first ``sample_size`` examples (rendering every one would cost more than it tells).
    """
    from saag_opt.agents.reviewer import (  # noqa: PLC0415 - loads dspy; the module stays import-light
        render_conversation,
        render_tool_docs,
    )

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
    from saag_opt.agents.base import BASE_SYSTEM_PROMPT  # noqa: PLC0415 - loads dspy; the module stays import-light

    texts = instructions.values() if isinstance(instructions, Mapping) else instructions
    reviews, revisions = mechanism.calls_per_example(REJECT_RATE)
    base_calls = revisions + (0.0 if base_cached else 1.0)  # round 0 (and s/g's first candidate) is one call
    n = len(examples)
    est = Estimate(command, n, assumptions=[
        "round-0 base calls paid by the shared base pass" if base_cached else "every base call uncached",
        *review_assumptions(mechanism),
        f"replies of {REPLY_TOKENS['base']} (base) and {REPLY_TOKENS['reviewer']} (reviewer) tokens",
        "about 4 characters per token"])
    per_base = prompt_tokens(examples, len(BASE_SYSTEM_PROMPT) + 200)
    est.add("base", role_estimate(base, "base", n * base_calls, per_base))
    if reviewer is not None and reviews:
        per_review = prompt_tokens(examples, sum(len(t) for t in texts) + 1000)
        est.add("reviewer", role_estimate(reviewer, "reviewer", n * reviews, per_review))
    return est


STEPS_PER_TURN = 2
"""Assumed agent steps per user turn of a conversation: one that calls, one that answers."""

STEP_CHARS = 600
"""Assumed characters one calling step adds to the conversation: its calls and their results."""


def episode_step_sizes(episodes: Sequence[Episode], *, sample_size: int = 50) -> tuple[float, float]:
    """(assumed steps per entry, mean characters of a step's conversation + tool docs) on the first ``sample_size``.

    What a multi-turn estimate multiplies: ``estimate_episodes`` here, GEPA's rollouts in ``optimize.budget``.
    """
    sample = [_episode_steps(e) for e in list(episodes)[:sample_size]]
    steps = sum(len(s) for s in sample) / len(sample) if sample else 0.0
    chars = sum(c for s in sample for c, _ in s) / max(sum(len(s) for s in sample), 1)
    return steps, chars


def _episode_steps(episode: Episode) -> list[tuple[int, int]]:
    """Per assumed step of ``episode``: (characters of the conversation + tool docs, tool-doc characters).

    The conversation is the episode's own user turns, with ``STEP_CHARS`` added per calling step
    before it; the tool docs are those at the step's turn (``miss_func`` functions from their turn).
    """
    from saag_opt.agents.reviewer import (  # noqa: PLC0415 - loads dspy; the module stays import-light
        render_conversation,
        render_tool_docs,
    )

    conversation = Conversation(episode.id)
    out, history = [], 0
    for index, turn in enumerate(episode.turns):
        conversation.user(turn.messages)
        example = conversation.step(index, 0, episode.tools_at(index), episode.category)
        docs, text = len(render_tool_docs(example)), len(render_conversation(example))
        for _ in range(STEPS_PER_TURN):
            out.append((text + history + docs, docs))
            history += STEP_CHARS
        history -= STEP_CHARS  # the answering step adds its short text only
    return out


def estimate_episodes(episodes: Sequence[Episode], *, base: str, reviewer: str | None, mechanism: Mechanism,
                      instructions: Mapping[str, str] | Iterable[str] = (), sample_size: int = 50,
                      base_cached: bool = False, command: str = "evaluate") -> Estimate:
    """A multi-turn evaluate over ``episodes``: the base run and the reviewed run of every entry.

    Every step of both runs sends the whole conversation so far and the tool docs (long: BFCL's
    docs are several thousand tokens), so the prompt grows step by step; it is measured per step
    on the first ``sample_size`` entries (``_episode_steps``). The reviewed run's proposals are
    counted as uncached (it leaves the base run's path at its first change), unless the mechanism
    reviews nothing (``none``: its run is the base run's, from the cache). ``base_cached``: the
    base run's steps are already paid (compare's per-version passes after its shared base pass).
    """
    from saag_opt.agents.base import CONVERSATION_SYSTEM_PROMPT  # noqa: PLC0415 - loads dspy; the module stays light

    texts = list(instructions.values() if isinstance(instructions, Mapping) else instructions)
    reviews, revisions = mechanism.calls_per_example(REJECT_RATE)
    n = len(episodes)
    steps, chars = episode_step_sizes(episodes, sample_size=sample_size)
    est = Estimate(command, n, assumptions=[
        f"{STEPS_PER_TURN} agent steps per user turn ({steps:.1f} per entry), each adding {STEP_CHARS} characters "
        "of calls and results to the conversation",
        "every step's prompt carries the conversation so far and the tool docs "
        f"(measured: {chars / CHARS_PER_TOKEN:,.0f} tokens per step on average, before instructions)",
        "the base run's steps paid by the shared base pass; the reviewed run's uncached" if base_cached else
        "two runs per entry (base, reviewed), every base call uncached", *review_assumptions(mechanism),
        f"replies of {REPLY_TOKENS['base']} (base) and {REPLY_TOKENS['reviewer']} (reviewer) tokens",
        "about 4 characters per token"])
    per_base = (chars + len(CONVERSATION_SYSTEM_PROMPT) + 200) / CHARS_PER_TOKEN
    reviewed = (1.0 + revisions) if reviews or revisions else 0.0  # `none`: the same steps, all cache hits
    est.add("base", role_estimate(base, "base", n * steps * ((0.0 if base_cached else 1.0) + reviewed), per_base))
    if reviewer is not None and reviews:
        per_review = (chars + sum(len(t) for t in texts) + 1000) / CHARS_PER_TOKEN
        est.add("reviewer", role_estimate(reviewer, "reviewer", n * steps * reviews, per_review))
    return est


def tau2_task_steps(sizes: Tau2Sizes, max_steps: int | None = None) -> tuple[int, int]:
    """Assumed (agent steps, user calls) of one tau2 task, from its gold actions.

    A calling step and a message step per gold action, plus a greeting and a closing message; a
    user call opens the conversation and answers each message. Agent steps are capped at the run's
    ``max_steps`` (None: ``agents.tau2.DEFAULT_MAX_STEPS``).
    """
    steps = min(2 * sizes.gold_actions + 2, _max_steps(max_steps))
    return steps, sizes.gold_actions + 2


def _max_steps(max_steps: int | None) -> int:
    if max_steps is not None:
        return max_steps
    from saag_opt.agents.tau2 import DEFAULT_MAX_STEPS  # noqa: PLC0415 - loads dspy; the module stays import-light

    return DEFAULT_MAX_STEPS


def estimate_tau2(sizes: Sequence[Tau2Sizes], *, base: str, reviewer: str | None, user: str, mechanism: Mechanism,
                  instructions: Mapping[str, str] | Iterable[str] = (), base_cached: bool = False,
                  command: str = "evaluate", max_steps: int | None = None) -> Estimate:
    """A tau2 evaluate: the base and the reviewed run of every task (trial), with tau2's user simulator.

    Every agent step sends tau2's system prompt (instructions + policy), the tools' schemas and the
    conversation so far; every user call sends tau2's user prompt (guidelines + scenario) and the
    conversation (``STEP_CHARS`` per step, half the run's on average). Steps per task are an assumption
    from the task's gold actions (``tau2_task_steps``); both runs' calls are counted uncached, unless
    ``base_cached``: the base run (agent and user) is already paid (compare's per-version passes).
    ``max_steps``: the run's cap on agent steps per task (None: ``agents.tau2.DEFAULT_MAX_STEPS``).
    """
    max_steps = _max_steps(max_steps)
    texts = list(instructions.values() if isinstance(instructions, Mapping) else instructions)
    reviews, revisions = mechanism.calls_per_example(REJECT_RATE)
    n = len(sizes)
    est = Estimate(command, n, assumptions=[
        "per task, 2 agent steps per gold action plus 2, and a user call per gold action plus 2 "
        f"(capped at {max_steps} steps)",
        f"each agent step adds {STEP_CHARS} characters to the conversation; a call carries half the run's on average",
        "every agent step sends tau2's system prompt, policy and tool schemas; every user call tau2's user prompt",
        "the base run paid by the shared base pass; the reviewed run's calls uncached" if base_cached else
        "two runs per task (base, reviewed), every call uncached", *review_assumptions(mechanism),
        f"replies of {REPLY_TOKENS['base']} (base), {REPLY_TOKENS['reviewer']} (reviewer) and "
        f"{REPLY_TOKENS['user']} (user) tokens", "about 4 characters per token"])
    reviewed = (1.0 + revisions) if reviews or revisions else 0.0  # `none`: the same steps, all cache hits
    runs = (0.0 if base_cached else 1.0) + (1.0 if reviews or revisions else 0.0)
    for size in sizes:
        steps, user_calls = tau2_task_steps(size, max_steps)
        history = steps * STEP_CHARS / 2
        per_base = (size.agent_chars + history) / CHARS_PER_TOKEN
        est.add("base", role_estimate(base, "base", steps * ((0.0 if base_cached else 1.0) + reviewed), per_base))
        est.add("user", role_estimate(user, "user", user_calls * runs, (size.user_chars + history) / CHARS_PER_TOKEN))
        if reviewer is not None and reviews:
            per_review = (size.agent_chars + history + sum(len(t) for t in texts) + 1000) / CHARS_PER_TOKEN
            est.add("reviewer", role_estimate(reviewer, "reviewer", steps * reviews, per_review))
    return est


__all__ = ["Estimate", "RoleEstimate", "StoredEstimate", "episode_step_sizes", "estimate_episodes",
           "estimate_evaluation", "estimate_tau2", "prompt_tokens", "review_assumptions", "role_estimate",
           "tau2_task_steps"]
