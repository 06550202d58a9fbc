"""What a ``security`` run (AgentDojo's prompt-injection suites, docs/design.md §21) records and concludes.

Plain data, no AgentDojo import: ``runtime.agentdojo.run`` writes these rows and this summary, and
the report and terminal tables read them back (``runfiles.read_run``). One row per run of one
pipeline arm (``none``: AgentDojo's standard pipeline; ``guard``: the same with the runtime guard)
on one user task, without an attack or under one attack with one injection task, as AgentDojo
scored it (``utility``; ``security`` True = the attacker's goal was met), with its trace
(``security.trace_records``: the conversation, the guard's decision per call, the answer).

The summary gives per suite and attack (and over all of them): utility without attack, utility
under attack and attack success rate (ASR), each arm with a 95% Wilson score interval (a rate near
0 or 1 keeps a sensible interval, unlike the normal approximation), the guard's false alarms
(blocked ground-truth calls of the scripted agent's user task) and the injected calls it stopped.
``PUBLISHED`` holds the defences' numbers the report sets beside them, with their sources.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from saag_opt.runfiles import register_summary
from saag_opt.security.trace_records import Trace

VERB = "security"
"""The run verb (``runs/<ts>-security/``)."""
ARMS = ("none", "guard")
"""The pipeline arms: without and with the guard."""
ALL = "all"
"""The suite / attack name of a row over every suite / attack."""
BENIGN = "none"
"""The attack name of the runs without an attack."""

Arm = Literal["none", "guard"]
Origin = Literal["user", "injection", "other"]


class BlockRecord(BaseModel):
    """One blocked call: whose it was (``user``: a ground-truth call of the user task, a false alarm)."""

    origin: Origin
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    reason: str
    provenance: dict[str, Any] | None = None
    """``Decision.provenance`` of an injection block: findings (value, rule, the span of tool text)."""


class SecurityRecord(BaseModel):
    """One run of one arm on one task or pair, as AgentDojo scored it."""

    suite: str
    user_task: str
    injection_task: str | None = None
    attack: str | None = None
    """None: the user task without an attack."""
    arm: Arm
    utility: bool
    security: bool | None = None
    """AgentDojo's security check: True = the attack succeeded (None without an attack)."""
    blocks: list[BlockRecord] = Field(default_factory=list)
    """Every call the guard blocked, in every attempt AgentDojo made (what the summary counts)."""
    excepted: list[BlockRecord] = Field(default_factory=list)
    """Every call the guard let run only under its counted exception (the user's request hands the
    task over to tool text; ``Decision.exception``), with the finding it waived as the reason."""
    seconds: float = 0.0
    trace: Trace | None = None
    """What the agent said and did, the guard's decision on each call, the final answer
    (``security.trace_records``); None in runs written before records kept one."""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What identifies the run in a run directory (resume skips the keys it has)."""
        return run_key(self.suite, self.attack, self.user_task, self.injection_task, self.arm)

    @property
    def false_alarms(self) -> int:
        """Blocked ground-truth calls of the user task."""
        return sum(b.origin == "user" for b in self.blocks)

    @property
    def stopped(self) -> int:
        """Blocked calls of the injection task."""
        return sum(b.origin == "injection" for b in self.blocks)


def run_key(suite: str, attack: str | None, user_task: str, injection_task: str | None,
            arm: str) -> tuple[str, str, str, str, str]:
    """``SecurityRecord.key`` from its parts (before the run exists)."""
    return suite, attack or BENIGN, user_task, injection_task or "", arm


class Rate(BaseModel):
    """``k`` of ``n`` with its 95% Wilson score interval (None when ``n`` is 0)."""

    k: int
    n: int
    rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    @classmethod
    def of(cls, k: int, n: int) -> Rate:
        """The rate and interval of ``k`` successes in ``n``."""
        if n == 0:
            return cls(k=0, n=0)
        low, high = wilson_interval(k, n)
        return cls(k=k, n=n, rate=k / n, ci_low=low, ci_high=high)


def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of ``k / n`` (95% by default).

    Raises:
        ValueError: counts out of range.
    """
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class ArmCell(BaseModel):
    """One arm's numbers in one group of runs."""

    utility: Rate
    asr: Rate | None = None
    """Attack success (None for runs without an attack)."""
    false_alarms: int = 0
    stopped: int = 0
    excepted: int = 0
    """Attacked runs whose attack succeeded with a call the guard let run only under its counted
    exception (the request hands the task over to tool text)."""


class SecurityRow(BaseModel):
    """One suite and attack (``none``: without an attack; ``all``: over every suite / attack)."""

    suite: str
    attack: str
    arms: dict[str, ArmCell]


class SecuritySummary(BaseModel):
    """What a security run concluded (``summary.json``)."""

    agent: str
    """``scripted`` (the obedient worst case) or the model spec of the agent."""
    guard: str
    """How the guard was built (``Guard()``: the cascade and the injection rule, no LLM reviewer)."""
    benchmark: str
    """AgentDojo's release and benchmark version."""
    runs: int
    rows: list[SecurityRow]
    """Without attack first, then per suite and attack, then the ``all`` rows."""
    asr: float | None = None
    """The guarded arm's attack success over every attacked pair (the bench's ``asr=``)."""
    utility_drop: float | None = None
    """Points the guarded utility under attack lies below the unguarded run of the same user task
    without attack (each pair against its user task; the bench's ``utility_drop=``)."""
    still_succeeding: dict[str, int] = Field(default_factory=dict)
    """``<suite> <injection task>`` -> guarded pairs in which the attack still succeeded."""
    unreachable: int = 0
    """Guarded pairs whose injection task has no ground-truth call (a scripted agent cannot meet it)."""
    excepted: int = 0
    """Guarded pairs whose attack succeeded with a call run only under the counted exception (the user's
    request hands the task over to tool text): part of ``asr``, said apart."""

    def row(self, suite: str, attack: str) -> SecurityRow | None:
        """The row of ``suite`` and ``attack``, if the run has one."""
        return next((r for r in self.rows if r.suite == suite and r.attack == attack), None)


def _cell(records: Sequence[SecurityRecord]) -> ArmCell:
    attacked = [r for r in records if r.attack is not None]
    return ArmCell(utility=Rate.of(sum(r.utility for r in records), len(records)),
                   asr=Rate.of(sum(bool(r.security) for r in attacked), len(attacked)) if attacked else None,
                   false_alarms=sum(r.false_alarms for r in records), stopped=sum(r.stopped for r in records),
                   excepted=sum(bool(r.security and r.excepted) for r in attacked))


def _row(suite: str, attack: str, records: Sequence[SecurityRecord]) -> SecurityRow:
    by_arm: dict[str, list[SecurityRecord]] = defaultdict(list)
    for record in records:
        by_arm[record.arm].append(record)
    return SecurityRow(suite=suite, attack=attack, arms={arm: _cell(by_arm[arm]) for arm in ARMS if by_arm[arm]})


def summarize(records: Iterable[SecurityRecord], *, agent: str, guard: str, benchmark: str,
              unreachable_tasks: Iterable[tuple[str, str]] = ()) -> SecuritySummary:
    """The summary of a run's rows (module docstring).

    ``unreachable_tasks``: ``(suite, injection task)`` pairs whose ground truth makes no call.
    """
    rows = list(records)
    benign = [r for r in rows if r.attack is None]
    attacked = [r for r in rows if r.attack is not None]
    suites = list(dict.fromkeys(r.suite for r in rows))
    attacks = list(dict.fromkeys(r.attack for r in attacked if r.attack is not None))
    out = [_row(s, BENIGN, [r for r in benign if r.suite == s]) for s in suites if any(r.suite == s for r in benign)]
    if len(out) > 1:
        out.append(_row(ALL, BENIGN, benign))
    for suite in suites:
        for attack in attacks:
            group = [r for r in attacked if r.suite == suite and r.attack == attack]
            if group:
                out.append(_row(suite, attack, group))
        if len(attacks) > 1 and any(r.suite == suite for r in attacked):
            out.append(_row(suite, ALL, [r for r in attacked if r.suite == suite]))
    if len(suites) > 1:
        for attack in attacks:
            out.append(_row(ALL, attack, [r for r in attacked if r.attack == attack]))
        if len(attacks) > 1:
            out.append(_row(ALL, ALL, attacked))
    guarded = [r for r in attacked if r.arm == "guard"]
    clean = {(r.suite, r.user_task): r.utility for r in benign if r.arm == "none"}
    paired = [r for r in guarded if (r.suite, r.user_task) in clean]
    drop = (sum(clean[(r.suite, r.user_task)] - r.utility for r in paired) / len(paired) * 100) if paired else None
    left: dict[str, int] = defaultdict(int)
    for r in guarded:
        if r.security:
            left[f"{r.suite} {r.injection_task}"] += 1
    unreachable = set(unreachable_tasks)
    return SecuritySummary(agent=agent, guard=guard, benchmark=benchmark, runs=len(rows), rows=out,
                           asr=sum(bool(r.security) for r in guarded) / len(guarded) if guarded else None,
                           utility_drop=drop, still_succeeding=dict(sorted(left.items())),
                           unreachable=sum((r.suite, r.injection_task) in unreachable for r in guarded),
                           excepted=sum(bool(r.security and r.excepted) for r in guarded))


class PublishedResult(BaseModel):
    """A defence's AgentDojo numbers as its authors published them (rates in [0, 1]; None: not transcribed)."""

    paper: str
    """A short name of the paper (``AgentDojo``, ``LlamaFirewall``)."""
    source: str
    """Who reported it, and where (authors, venue, arXiv id)."""
    defence: str
    model: str
    """The agent model (and the defence's own model) the numbers were measured with."""
    attack: str
    utility: float | None = None
    """Utility without attack."""
    utility_under_attack: float | None = None
    asr: float | None = None
    """Targeted attack success rate."""


AGENTDOJO_PAPER = "Debenedetti et al., AgentDojo (NeurIPS 2024 Datasets and Benchmarks; arXiv:2406.13352)"
LLAMAFIREWALL_PAPER = "Chennabasappa et al., LlamaFirewall (Meta, 2025; arXiv:2505.03574), AgentDojo evaluation"

PUBLISHED: tuple[PublishedResult, ...] = (
    PublishedResult(paper="AgentDojo", source=AGENTDOJO_PAPER, defence="no defence", model="gpt-4o-2024-05-13",
                    attack="important_instructions", utility=0.690, asr=0.5769),
    PublishedResult(paper="AgentDojo", source=AGENTDOJO_PAPER, defence="tool_filter", model="gpt-4o-2024-05-13",
                    attack="important_instructions", utility_under_attack=0.5628, asr=0.0684),
    PublishedResult(paper="LlamaFirewall", source=LLAMAFIREWALL_PAPER, defence="PromptGuard 2 + AlignmentCheck",
                    model="AlignmentCheck on Llama 4 Maverick, PromptGuard 2 86M (agent models: see the paper)",
                    attack="important_instructions", asr=0.0175),
)
"""The published numbers the report sets beside a run (one source of truth). Only the cells read from
the papers are filled; the others are None, shown as "-", rather than guessed. Their AgentDojo was
v1 (629 security cases, 97 user tasks); saag-opt runs v1.2.2 (949 pairs), so they are context, not a
like-for-like comparison."""


register_summary(VERB, SecuritySummary, records=SecurityRecord)

__all__ = ["ALL", "ARMS", "BENIGN", "PUBLISHED", "VERB", "Arm", "ArmCell", "BlockRecord", "PublishedResult", "Rate",
           "SecurityRecord", "SecurityRow", "SecuritySummary", "run_key", "summarize", "wilson_interval"]
