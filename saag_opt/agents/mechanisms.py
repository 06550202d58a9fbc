"""Review mechanisms: how the base agent, a reviewer and the SAAG cascade combine (DESIGN 3 and 5).

Specs: ``none`` | ``binary`` | ``saag`` (SAAG self-repair, no LLM reviewer) | ``r<N>`` (progressive
review) | ``s<N>`` (best-of-N selection) | ``g<N>`` (best-of-N grading) | ``gate+r<N>`` /
``gate+s<N>`` / ``gate+g<N>`` (experimental: the LLM reviewer only runs when the gold-free SAAG
cascade does not pass the base call cleanly).

Every round-0 proposal (the base prediction and the s/g candidates) goes through
``MechanismContext.propose_initial``, i.e. the on-disk ``BasePredictionCache``, so mechanisms and
prompt versions compared on one dataset share the same base calls. Nothing here sees gold: the
cascade inside a mechanism is ``check_calls`` (registry + query only).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from saag_opt.agents.base import BaseAgent, BasePredictionCache, FeedbackTurn, Proposal
from saag_opt.agents.reviewer import Reviewer, blind_cascade
from saag_opt.errors import ConfigError
from saag_opt.model import Example, Prediction

DEFAULT_MAX_REPAIRS = 5
"""D_max of the SAAG self-repair loop (the paper used 15; DESIGN section 3)."""

BINARY_FEEDBACK = "Your previous function call was incorrect. Try again."
"""The content-free signal of the ``binary`` ablation."""

DEFAULT_REJECTION = "The tentative function calls contain an error. Check them against the request and fix them."
"""Sent when a reviewer rejects with empty feedback."""

TEMPERATURE_RANGE = (0.3, 1.0)
"""Candidate temperatures for s<N>/g<N> (paper 2.2; evenly spaced is our reading)."""

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


@dataclass(frozen=True, slots=True)
class MechanismOutcome:
    """What a mechanism did for one example.

    ``seconds`` covers every LM call of the condition (cached proposals count the time of their
    original call), so ``seconds / base.seconds`` is the latency multiplier.
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


@dataclass
class MechanismContext:
    """Shared state for mechanism runs: the base-prediction cache and the repair budget."""

    cache: BasePredictionCache = field(default_factory=BasePredictionCache)
    max_repairs: int = DEFAULT_MAX_REPAIRS

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
    """

    spec: str
    needs_reviewer: bool
    experimental: bool

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Run the mechanism on one example."""
        ...


# -- implementations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoReview:
    """``none``: the base prediction is final."""

    spec: str = "none"
    needs_reviewer: bool = False
    experimental: bool = False

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Return the (cached) base prediction."""
        base = ctx.propose_initial(agent, example)
        return MechanismOutcome(self.spec, base, base.prediction, seconds=base.seconds)


@dataclass(frozen=True)
class SelfRepair:
    """``binary`` / ``saag``: repair while the gold-free cascade fails, at most ``max_repairs`` times.

    ``saag`` feeds back the psi message of the first failing stage (``correction_for``); ``binary``
    feeds back "incorrect, try again". The trigger is the cascade in both, so the two differ only
    in the feedback content (the SAAG paper's ablation). ``max_repairs`` None = the context's.
    """

    spec: str
    informative: bool
    max_repairs: int | None = None
    needs_reviewer: bool = False
    experimental: bool = False

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Check, repair, repeat; the last revision is final even if it still fails."""
        from saag_opt.saag import correction_for

        base = ctx.propose_initial(agent, example)
        budget = ctx.max_repairs if self.max_repairs is None else self.max_repairs
        current, seconds, history, rounds = base.prediction, base.seconds, [], []
        for index in range(budget):
            report = blind_cascade(current, example)
            if report.passed:
                rounds.append(ReviewRound(index, current, "saag_pass", "saag"))
                break
            text = (correction_for(report) or BINARY_FEEDBACK) if self.informative else BINARY_FEEDBACK
            history.append(FeedbackTurn(current, text))
            revision = agent.propose(example, feedback=history)
            seconds += revision.seconds
            rounds.append(ReviewRound(index, current, "saag_fail", "saag", text, revision.prediction))
            current = revision.prediction
        return MechanismOutcome(self.spec, base, current, tuple(rounds), agent_calls=len(history),
                                seconds=seconds)


def _need(reviewer: Reviewer | None, spec: str) -> Reviewer:
    if reviewer is None:
        raise ConfigError(f"mechanism {spec!r} needs a reviewer model (--reviewer)")
    return reviewer


@dataclass(frozen=True)
class Progressive:
    """``r<N>``: review; on rejection inject the feedback and revise; at most N reviews.

    Stops at the first approval. The revision after the N-th rejection is executed unreviewed
    (our reading of the paper, as AgentLTL does). Unusable reviewer output counts as approval.
    """

    n: int
    needs_reviewer: bool = True
    experimental: bool = False

    @property
    def spec(self) -> str:
        """``r<N>``."""
        return f"r{self.n}"

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Review-revise loop."""
        rev = _need(reviewer, self.spec)
        base = ctx.propose_initial(agent, example)
        current, seconds, history, rounds = base.prediction, base.seconds, [], []
        for index in range(self.n):
            start = time.perf_counter()
            verdict = rev.review_call(example, current)
            seconds += time.perf_counter() - start
            if verdict.failed:
                rounds.append(ReviewRound(index, current, "reviewer_failed", "llm", note=verdict.failed))
                break
            if not verdict.error:
                rounds.append(ReviewRound(index, current, "approve", "llm", verdict.feedback or None))
                break
            text = verdict.feedback or DEFAULT_REJECTION
            history.append(FeedbackTurn(current, text))
            revision = agent.propose(example, feedback=history)
            seconds += revision.seconds
            rounds.append(ReviewRound(index, current, "reject", "llm", text, revision.prediction))
            current = revision.prediction
        return MechanismOutcome(self.spec, base, current, tuple(rounds), reviewer_calls=len(rounds),
                                agent_calls=len(history), seconds=seconds)


def spread_temperatures(n: int, low: float = TEMPERATURE_RANGE[0], high: float = TEMPERATURE_RANGE[1]) -> list[float]:
    """``n`` temperatures evenly spaced over [low, high] (one candidate: ``low``)."""
    if n <= 1:
        return [low]
    return [round(low + (high - low) * i / (n - 1), 6) for i in range(n)]


def _candidates(example: Example, agent: BaseAgent, ctx: MechanismContext, n: int) -> list[Candidate]:
    out = []
    for index, temperature in enumerate(spread_temperatures(n)):
        proposal = ctx.propose_initial(agent, example, temperature)
        out.append(Candidate(index, temperature, proposal.prediction, seconds=proposal.seconds))
    return out


@dataclass(frozen=True)
class Selection:
    """``s<N>``: N candidates at temperatures over 0.3-1.0; the selector picks one index.

    An invalid or unreadable index falls back to the first (lowest-temperature) candidate, noted.
    """

    n: int
    needs_reviewer: bool = True
    experimental: bool = False

    @property
    def spec(self) -> str:
        """``s<N>``."""
        return f"s{self.n}"

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Generate, select once."""
        rev = _need(reviewer, self.spec)
        base = ctx.propose_initial(agent, example)
        cands = _candidates(example, agent, ctx, self.n)
        start = time.perf_counter()
        index, failure = rev.select_candidate(example, [c.prediction for c in cands])
        took = time.perf_counter() - start
        notes = []
        if failure is not None or index is None or not 0 <= index < len(cands):
            notes.append(f"selector returned {index!r}{f' ({failure})' if failure else ''}; using candidate 0")
            index = 0
        seconds = sum(c.seconds for c in cands) + took
        return MechanismOutcome(self.spec, base, cands[index].prediction, candidates=tuple(cands), selected=index,
                                reviewer_calls=1, agent_calls=len(cands), seconds=seconds, notes=tuple(notes))


@dataclass(frozen=True)
class Grading:
    """``g<N>``: the grader scores each candidate (one call each); the best is executed.

    Ties go to the lowest temperature; unreadable grades rank last; all unreadable -> candidate 0.
    """

    n: int
    needs_reviewer: bool = True
    experimental: bool = False

    @property
    def spec(self) -> str:
        """``g<N>``."""
        return f"g{self.n}"

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Generate, grade each, keep the best."""
        rev = _need(reviewer, self.spec)
        base = ctx.propose_initial(agent, example)
        graded, seconds, notes = [], 0.0, []
        for cand in _candidates(example, agent, ctx, self.n):
            start = time.perf_counter()
            grade = rev.grade_candidate(example, cand.prediction)
            seconds += time.perf_counter() - start + cand.seconds
            if grade.failed:
                notes.append(f"candidate {cand.index}: grade unusable ({grade.failed})")
            graded.append(Candidate(cand.index, cand.temperature, cand.prediction, grade.score,
                                    grade.rationale or None, cand.seconds))
        scored = [c for c in graded if c.score is not None]
        best = max(scored, key=lambda c: (c.score, -c.temperature)) if scored else graded[0]
        return MechanismOutcome(self.spec, base, best.prediction, candidates=tuple(graded), selected=best.index,
                                reviewer_calls=len(graded), agent_calls=len(graded), seconds=seconds,
                                notes=tuple(notes))


@dataclass(frozen=True)
class Gate:
    """``gate+<mech>`` (experimental): skip the LLM reviewer when the base call passes SAAG cleanly.

    "Cleanly" = every call passes the gold-free cascade with no correction (not even drift). An
    abstention never passes (FNEM = -1), so the reviewer judges every abstention.
    """

    inner: Mechanism
    needs_reviewer: bool = True
    experimental: bool = True

    @property
    def spec(self) -> str:
        """``gate+<inner>``."""
        return f"gate+{self.inner.spec}"

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Gate on the cascade, else delegate."""
        base = ctx.propose_initial(agent, example)
        if blind_cascade(base.prediction, example).clean:
            return MechanismOutcome(self.spec, base, base.prediction,
                                    (ReviewRound(0, base.prediction, "saag_pass", "saag"),),
                                    seconds=base.seconds, gated=True)
        out = self.inner.run(example, agent, reviewer, ctx=ctx)
        return MechanismOutcome(self.spec, out.base, out.final, out.rounds, out.candidates, out.selected,
                                out.reviewer_calls, out.agent_calls, out.seconds, False, out.notes)


# -- registry --------------------------------------------------------------------------------------

_SPEC = re.compile(r"^(?P<gate>gate\+)?(?:(?P<plain>none|binary|saag)|(?P<family>[rsg])(?P<n>\d+))$")

_FAMILIES: dict[str, tuple[str, Callable[[int], Mechanism]]] = {
    "r": ("r<N>: progressive review, at most N reviews", lambda n: Progressive(n)),
    "s": ("s<N>: best-of-N selection", lambda n: Selection(n)),
    "g": ("g<N>: best-of-N grading", lambda n: Grading(n)),
}
_PLAIN: dict[str, tuple[str, Callable[[int | None], Mechanism]]] = {
    "none": ("none: base agent alone", lambda _: NoReview()),
    "binary": ("binary: SAAG-triggered self-repair with 'incorrect, try again'",
               lambda d: SelfRepair("binary", informative=False, max_repairs=d)),
    "saag": ("saag: SAAG self-repair with psi corrections", lambda d: SelfRepair("saag", informative=True, max_repairs=d)),
}


def mechanism_names() -> list[str]:
    """The accepted spec forms, for help texts and error messages."""
    return [*_PLAIN, "r<N>", "s<N>", "g<N>", "gate+r<N>", "gate+s<N>", "gate+g<N>"]


def describe_mechanisms() -> dict[str, str]:
    """Spec form -> one-line description."""
    out = {name: text for name, (text, _) in _PLAIN.items()}
    out.update({f"{k}<N>": text for k, (text, _) in _FAMILIES.items()})
    out["gate+<r|s|g><N>"] = "experimental: LLM reviewer only when the SAAG cascade does not pass cleanly"
    return out


def parse_mechanism(spec: str, *, max_repairs: int | None = None) -> Mechanism:
    """Parse ``none | binary | saag | r<N> | s<N> | g<N> | gate+<r|s|g><N>``.

    Raises:
        ConfigError: unknown form, N < 1, or a gate around a mechanism without an LLM reviewer.
    """
    text = (spec or "").strip().lower()
    match = _SPEC.match(text)
    if match is None:
        raise ConfigError(f"unknown mechanism {spec!r}. Available: {mechanism_names()}")
    if max_repairs is not None and max_repairs < 0:
        raise ConfigError(f"max_repairs must be >= 0, got {max_repairs}")
    if match["plain"]:
        if match["gate"]:
            raise ConfigError(f"mechanism {spec!r}: gate+ wraps an LLM-reviewer mechanism (r<N>, s<N>, g<N>)")
        return _PLAIN[match["plain"]][1](max_repairs)
    n = int(match["n"])
    if n < 1:
        raise ConfigError(f"mechanism {spec!r}: N must be >= 1")
    inner = _FAMILIES[match["family"]][1](n)
    return Gate(inner) if match["gate"] else inner


def resolve_mechanism(spec: str | Mechanism, *, max_repairs: int | None = None) -> Mechanism:
    """Name or instance -> instance (call once, at the boundary)."""
    return parse_mechanism(spec, max_repairs=max_repairs) if isinstance(spec, str) else spec


if TYPE_CHECKING:
    _a: Mechanism = NoReview()
    _b: Mechanism = SelfRepair("saag", informative=True)
    _c: Mechanism = Progressive(2)
    _d: Mechanism = Selection(5)
    _e: Mechanism = Grading(5)
    _f: Mechanism = Gate(Progressive(2))
