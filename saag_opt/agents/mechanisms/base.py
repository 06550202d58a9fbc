"""What every review mechanism shares: the ``Mechanism`` protocol, its context and outcome, the facts' defaults.

Every mechanism can end in an abstention when no function fits: a revision may make no call
(``base.REVISION_INSTRUCTION`` says so) and is kept; the selector and the grader get a "(no
function call)" option; a guard block runs nothing; ``saag`` self-repair keeps an abstention the
agent repeats (docs/design.md, "Abstention across the mechanisms").

Every round-0 proposal (the base prediction and the s/g candidates) goes through
``MechanismContext.propose_initial``, i.e. the on-disk ``BasePredictionCache``, so mechanisms and
prompt versions compared on one dataset share the same base calls. Nothing here sees gold: the
cascade inside a mechanism is ``check_calls`` (registry + query only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from saag_opt.agents.base import BaseAgent, BasePredictionCache, Proposal
from saag_opt.agents.mechanisms.rules import Ruling
from saag_opt.agents.reviewer import Reviewer
from saag_opt.choices import OnUnusable
from saag_opt.errors import ConfigError
from saag_opt.model import Example, Prediction
from saag_opt.saag.modes import INTERVENTION_GROUNDING, GroundingMode
from saag_opt.saag.policy import DEFAULT_POLICY, Policy

DEFAULT_MAX_REPAIRS = 5
"""D_max of the SAAG self-repair loop (the paper used 15; docs/design.md §3)."""

NO_CALL = Prediction((), raw=None, status="empty")
"""An abstention a mechanism decides on (nothing runs): the selector's and grader's no-call option, a
guard block. Rendered to a reviewer as "(no function call)"."""

RoundVerdict = Literal["approve", "reject", "reviewer_failed", "saag_pass", "saag_fail"]


@dataclass(frozen=True, slots=True)
class ReviewRound:
    """One check of a tentative prediction and, if rejected, the agent's revision."""

    index: int
    tentative: Prediction
    verdict: RoundVerdict
    reviewer: Literal["llm", "saag"]
    feedback: str | None = None
    revised: Prediction | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One s<N>/g<N> candidate with its temperature and (for g<N>) grade."""

    index: int
    temperature: float
    prediction: Prediction
    score: float | None = None
    rationale: str | None = None
    seconds: float = 0.0
    passed: bool | None = None
    """``saag+s<N>``: the gold-free cascade passed it, anchored in the request (``verified``; None = not checked)."""


@dataclass(frozen=True, slots=True)
class MechanismOutcome:
    """What a mechanism did for one example.

    ``seconds`` covers every LM call of the condition, timed with ``lm_clock`` (a proposal or reply
    replayed from a cache counts at the time of its original call), so ``seconds / base.seconds`` is
    the latency multiplier.
    """

    mechanism: str
    base: Proposal
    final: Prediction
    rounds: tuple[ReviewRound, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    selected: int | None = None
    reviewer_calls: int = 0
    agent_calls: int = 0
    seconds: float = 0.0
    gated: bool = False
    notes: tuple[str, ...] = ()
    reviewer_unusable: int = 0
    ruling: Ruling | None = None
    """``guard+r<N>`` and ``saag+abstain``: allow / revise / block and why (a block's ``final`` makes no call)."""


@dataclass
class MechanismContext:
    """Shared state for mechanism runs.

    The base-prediction cache, the repair budget, the unusable-review policy (``r<N>``; selection
    and grading fall back as their docs say), the stage-3 mode (``paper`` | ``calibrated``) that
    decides when the gold-free cascade triggers self-repair and lets the gate pass a call, and the
    injection rule's data-flow policy.
    """

    cache: BasePredictionCache = field(default_factory=BasePredictionCache)
    max_repairs: int = DEFAULT_MAX_REPAIRS
    on_unusable: OnUnusable = "approve"
    grounding: GroundingMode = INTERVENTION_GROUNDING
    injection_policy: Policy | None = DEFAULT_POLICY
    """The data-flow policy ``guard+r<N>``'s injection rule applies where tool results are in view (None: the
    marker rules alone)."""

    def propose_initial(self, agent: BaseAgent, example: Example, temperature: float | None = None) -> Proposal:
        """A round-0 proposal, from the cache when another run already made it."""
        return self.cache.get_or_propose(agent, example, temperature)


class Mechanism(Protocol):
    """A review mechanism (one plug point).

    Contract:
        - ``run`` returns exactly one ``MechanismOutcome`` for the example; it never mutates the
          example, the agent or the reviewer.
        - Round-0 proposals come from ``ctx.propose_initial`` (cached); revisions call
          ``agent.propose`` with the feedback history.
        - Unusable reviewer output is data (a round with ``verdict="reviewer_failed"`` or a note),
          never an exception; LM transport failures after retries propagate (the runner records
          them per example).
        - Deterministic given deterministic LMs. Gold is never read.

    The read-only facts below are the one place callers learn what a mechanism does: the runner
    (does it need ``--reviewer``, is it gated), optimize (which reviewer predictors GEPA evolves,
    the cost estimate), compare (are candidates shared through the cache).
    """

    @property
    def spec(self) -> str:
        """The spec string it was built from; also its name in records and tables (``r2``, ``gate+s5``)."""
        ...

    @property
    def components(self) -> tuple[str, ...]:
        """Reviewer predictors ``run`` calls (``review``, ``select``, ``grade``); empty = no LLM reviewer."""
        ...

    @property
    def needs_reviewer(self) -> bool:
        """``run`` needs a reviewer (``bool(components)``)."""
        ...

    @property
    def experimental(self) -> bool:
        """Not from the SAAG paper (reported as exploratory)."""
        ...

    @property
    def gated(self) -> bool:
        """A SAAG gate may skip the reviewer (``MechanismOutcome.gated`` says when it did)."""
        ...

    @property
    def candidates(self) -> int:
        """Round-0 candidates sampled per example (s<N>/g<N>); cached, so a second run reuses them."""
        ...

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """Expected (reviewer calls, base-agent revisions) per example, for cost estimates."""
        ...

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Run the mechanism on one example."""
        ...


class MechanismFacts:
    """Defaults of the ``Mechanism`` facts for a mechanism without an LLM reviewer; override what differs."""

    components: tuple[str, ...] = ()
    experimental: bool = False
    gated: bool = False

    @property
    def candidates(self) -> int:
        """No round-0 candidates beyond the base call."""
        return 0

    @property
    def needs_reviewer(self) -> bool:
        """True when the mechanism calls a reviewer predictor."""
        return bool(self.components)

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """No reviewer calls and no revisions."""
        return 0.0, 0.0


def geometric(reject_rate: float, first: int, last: int) -> float:
    """Expected count of steps ``first..last`` that happen when each needs one more rejection."""
    return sum(reject_rate**k for k in range(first, last + 1))


def require_reviewer(reviewer: Reviewer | None, spec: str) -> Reviewer:
    """The reviewer a mechanism with an LLM reviewer needs.

    Raises:
        ConfigError: ``reviewer`` is None (no ``--reviewer``).
    """
    if reviewer is None:
        raise ConfigError(f"mechanism {spec!r} needs a reviewer model (--reviewer)")
    return reviewer
