"""Review mechanisms: how the base agent, a reviewer and the SAAG cascade combine (docs/design.md §3, §5).

Specs: ``none`` | ``binary`` | ``saag`` (SAAG self-repair, no LLM reviewer) | ``r<N>`` (progressive
review) | ``s<N>`` (best-of-N selection) | ``g<N>`` (best-of-N grading) | ``guard+r<N>``
(experimental: the runtime guard's loop, ``r<N>`` plus its stage 1-2 rules; agents/mechanisms/guarded.py) |
``saag+s<N>`` (experimental: SAAG-verified best-of-N, the first candidate the cascade passes;
agents/mechanisms/verified.py) |
``gate+r<N>`` / ``gate+s<N>`` / ``gate+g<N>`` / ``gate+guard+r<N>`` (experimental: the LLM reviewer
only runs when the gold-free SAAG cascade does not vouch for the base call).

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

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from saag_opt.agents.base import BaseAgent, BasePredictionCache, FeedbackTurn, Proposal
from saag_opt.agents.mechanisms.rules import Ruling
from saag_opt.agents.reviewer import Reviewer, blind_cascade
from saag_opt.choices import OnUnusable
from saag_opt.errors import ConfigError
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example, Prediction
from saag_opt.saag import correction_for
from saag_opt.saag.modes import INTERVENTION_GROUNDING, GroundingMode
from saag_opt.saag.policy import DEFAULT_POLICY, Policy

if TYPE_CHECKING:
    from saag_opt.saag import PredictionReport

DEFAULT_MAX_REPAIRS = 5
"""D_max of the SAAG self-repair loop (the paper used 15; docs/design.md §3)."""

BINARY_FEEDBACK = "Your previous function call was incorrect. Try again."
"""The content-free signal of the ``binary`` ablation."""

DEFAULT_REJECTION = "The tentative function calls contain an error. Check them against the request and fix them."
"""Sent when a reviewer rejects with empty feedback."""

NO_CALL = Prediction((), raw=None, status="empty")
"""An abstention a mechanism decides on (nothing runs): the selector's and grader's no-call option, a
guard block. Rendered to a reviewer as "(no function call)"."""

NO_CALL_FEEDBACK = ("You made no function call. If one of the available functions serves the request, answer "
                    "with the call; if none does, or the request lacks information a call needs, answer again "
                    "without a call.")
"""``saag`` self-repair's feedback on an abstention (psi1 asks for a call, which the cascade cannot know
is wanted without gold); a second abstention in a row ends the loop."""

TEMPERATURE_RANGE = (0.3, 1.0)
"""Candidate temperatures for s<N>/g<N> (Reinforced Agent paper §2.1; evenly spaced is our reading)."""

RoundVerdict = Literal["approve", "reject", "reviewer_failed", "saag_pass", "saag_fail"]


def options_with_no_call(candidates: Sequence[Prediction]) -> list[Prediction]:
    """The candidates, plus ``NO_CALL`` when none abstains: the selector or grader may always pick "no call"."""
    return list(candidates) if any(c.declined for c in candidates) else [*candidates, NO_CALL]


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


# -- implementations -------------------------------------------------------------------------------


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


def _geometric(reject_rate: float, first: int, last: int) -> float:
    """Expected count of steps ``first..last`` that happen when each needs one more rejection."""
    return sum(reject_rate**k for k in range(first, last + 1))


@dataclass(frozen=True)
class NoReview(MechanismFacts):
    """``none``: the base prediction is final."""

    spec: str = "none"

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Return the (cached) base prediction."""
        base = ctx.propose_initial(agent, example)
        return MechanismOutcome(self.spec, base, base.prediction, seconds=base.seconds)


@dataclass(frozen=True)
class SelfRepair(MechanismFacts):
    """``binary`` / ``saag``: repair while the gold-free cascade fails, at most ``max_repairs`` times.

    ``saag`` feeds back the psi message of the first failing stage (``correction_for``); ``binary``
    feeds back "incorrect, try again". The trigger is the cascade in both, so the two differ only
    in the feedback content (the SAAG paper's ablation). ``max_repairs`` None = the context's.

    Abstention: the cascade fails every abstention (FNEM = -1), yet without gold nobody here knows
    whether a call was wanted (BFCL irrelevance: it was not). So ``saag`` answers an abstention with
    ``NO_CALL_FEEDBACK`` (call if a function serves the request, else abstain again) instead of
    psi1's "answer with a call", and in both the loop ends when the agent makes no call twice in a
    row: its abstention is final.
    """

    spec: str
    informative: bool
    max_repairs: int | None = None

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """No reviewer; repair k happens after k failed checks (``max_repairs`` None = the default budget)."""
        budget = DEFAULT_MAX_REPAIRS if self.max_repairs is None else self.max_repairs
        return 0.0, _geometric(reject_rate, 1, budget)

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Check, repair, repeat; the last revision is final even if it still fails."""
        base = ctx.propose_initial(agent, example)
        budget = ctx.max_repairs if self.max_repairs is None else self.max_repairs
        current, seconds, rounds, notes = base.prediction, base.seconds, [], []
        history: list[FeedbackTurn] = []
        for index in range(budget):
            if current.declined and history and history[-1].previous.declined:
                notes.append("the agent made no call twice in a row: its abstention is final")
                break
            report = blind_cascade(current, example, ctx.grounding)
            if report.passed:
                rounds.append(ReviewRound(index, current, "saag_pass", "saag"))
                break
            text = self.feedback(current, report)
            history.append(FeedbackTurn(current, text))
            revision = agent.propose(example, feedback=history)
            seconds += revision.seconds
            rounds.append(ReviewRound(index, current, "saag_fail", "saag", text, revision.prediction))
            current = revision.prediction
        return MechanismOutcome(self.spec, base, current, tuple(rounds), agent_calls=len(history),
                                seconds=seconds, notes=tuple(notes))

    def feedback(self, tentative: Prediction, report: PredictionReport) -> str:
        """``binary``: the content-free signal; ``saag``: ``NO_CALL_FEEDBACK`` for an abstention, else psi."""
        if not self.informative:
            return BINARY_FEEDBACK
        if tentative.declined:
            return NO_CALL_FEEDBACK
        return correction_for(report) or BINARY_FEEDBACK


def _need(reviewer: Reviewer | None, spec: str) -> Reviewer:
    if reviewer is None:
        raise ConfigError(f"mechanism {spec!r} needs a reviewer model (--reviewer)")
    return reviewer


@dataclass(frozen=True)
class Progressive(MechanismFacts):
    """``r<N>``: review; on rejection inject the feedback and revise; at most N reviews.

    Stops at the first approval. The revision after the N-th rejection is executed unreviewed
    (our reading of the paper, as AgentLTL does). A revision that makes no call (the reviewer found
    that no function fits) is a revision like any other: reviewed if reviews are left, else
    executed, i.e. an abstention. A review still unreadable after its retry is
    recorded (``reviewer_failed``, counted in ``reviewer_unusable``) and then treated as
    ``ctx.on_unusable`` says: an approval (default) or a rejection with ``DEFAULT_REJECTION``.
    """

    n: int
    components = ("review",)

    @property
    def spec(self) -> str:
        """``r<N>``."""
        return f"r{self.n}"

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """Review k+1 happens only after k rejections; every rejection costs one revision."""
        return _geometric(reject_rate, 0, self.n - 1), _geometric(reject_rate, 1, self.n)

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Review-revise loop."""
        rev = _need(reviewer, self.spec)
        base = ctx.propose_initial(agent, example)
        current, seconds, history, rounds, unusable = base.prediction, base.seconds, [], [], 0
        for index in range(self.n):
            with lm_clock() as clock:
                verdict = rev.review_call(example, current)
            seconds += clock.seconds
            unusable += verdict.failed is not None
            if verdict.failed and ctx.on_unusable == "approve":
                rounds.append(ReviewRound(index, current, "reviewer_failed", "llm", note=verdict.failed))
                break
            if not verdict.failed and not verdict.error:
                rounds.append(ReviewRound(index, current, "approve", "llm", verdict.feedback or None))
                break
            text = verdict.feedback or DEFAULT_REJECTION
            history.append(FeedbackTurn(current, text))
            revision = agent.propose(example, feedback=history)
            seconds += revision.seconds
            rounds.append(ReviewRound(index, current, "reviewer_failed" if verdict.failed else "reject", "llm",
                                      text, revision.prediction, note=verdict.failed))
            current = revision.prediction
        return MechanismOutcome(self.spec, base, current, tuple(rounds), reviewer_calls=len(rounds),
                                agent_calls=len(history), seconds=seconds, reviewer_unusable=unusable)


def spread_temperatures(n: int, low: float = TEMPERATURE_RANGE[0], high: float = TEMPERATURE_RANGE[1]) -> list[float]:
    """``n`` temperatures evenly spaced over [low, high] (one candidate: ``low``)."""
    if n <= 1:
        return [low]
    return [round(low + (high - low) * i / (n - 1), 6) for i in range(n)]


def sample_candidates(example: Example, agent: BaseAgent, ctx: MechanismContext, n: int) -> list[Candidate]:
    """The N round-0 candidates of s<N>/g<N>/saag+s<N>, lowest temperature first (cached)."""
    out = []
    for index, temperature in enumerate(spread_temperatures(n)):
        proposal = ctx.propose_initial(agent, example, temperature)
        out.append(Candidate(index, temperature, proposal.prediction, seconds=proposal.seconds))
    return out


@dataclass(frozen=True)
class Selection(MechanismFacts):
    """``s<N>``: N candidates at temperatures over 0.3-1.0; the selector picks one index.

    When no candidate abstains the selector also sees a "(no function call)" option
    (``options_with_no_call``); picking it ends in an abstention (``selected`` None), so a
    reviewer that finds no function fitting can say so. An invalid or unreadable index (after one
    retry) falls back to the first (lowest-temperature) candidate, noted and counted in
    ``reviewer_unusable``.
    """

    n: int
    components = ("select",)

    @property
    def spec(self) -> str:
        """``s<N>``."""
        return f"s{self.n}"

    @property
    def candidates(self) -> int:
        """N candidates."""
        return self.n

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """One selector call; N-1 extra base candidates (the first is the cached base call)."""
        return 1.0, float(max(self.n - 1, 0))

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Generate, select once."""
        rev = _need(reviewer, self.spec)
        base = ctx.propose_initial(agent, example)
        cands = sample_candidates(example, agent, ctx, self.n)
        shown = options_with_no_call([c.prediction for c in cands])
        with lm_clock() as clock:
            index, failure = rev.select_candidate(example, shown)
        seconds = sum(c.seconds for c in cands) + clock.seconds
        if failure is not None or index is None or not 0 <= index < len(shown):
            note = f"selector returned {index!r}{f' ({failure})' if failure else ''}; using candidate 0"
            return MechanismOutcome(self.spec, base, cands[0].prediction, candidates=tuple(cands), selected=0,
                                    reviewer_calls=1, agent_calls=len(cands), seconds=seconds, notes=(note,),
                                    reviewer_unusable=1)
        if index == len(cands):
            return MechanismOutcome(self.spec, base, NO_CALL, candidates=tuple(cands), selected=None,
                                    reviewer_calls=1, agent_calls=len(cands), seconds=seconds,
                                    notes=("the selector chose no call: abstention",))
        return MechanismOutcome(self.spec, base, cands[index].prediction, candidates=tuple(cands), selected=index,
                                reviewer_calls=1, agent_calls=len(cands), seconds=seconds)


@dataclass(frozen=True)
class Grading(MechanismFacts):
    """``g<N>``: the grader scores each candidate (one call each); the best is executed.

    Ties go to the lowest temperature; unreadable grades (after one retry each, counted in
    ``reviewer_unusable``) rank last; all unreadable -> candidate 0. When no candidate abstains and
    the best grade is below 1.0, the grader also scores "(no function call)" (one more call); it
    is executed (an abstention, ``selected`` None) only when it scores above every candidate, so a
    tie keeps the agent's call, and a 1.0 needs no such check.
    """

    n: int
    components = ("grade",)

    @property
    def spec(self) -> str:
        """``g<N>``."""
        return f"g{self.n}"

    @property
    def candidates(self) -> int:
        """N candidates."""
        return self.n

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """One grader call per candidate plus the no-call option (the upper end); N-1 extra base candidates."""
        return float(self.n + 1), float(max(self.n - 1, 0))

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Generate, grade each, keep the best."""
        rev = _need(reviewer, self.spec)
        base = ctx.propose_initial(agent, example)
        graded, seconds, notes = [], 0.0, []
        for cand in sample_candidates(example, agent, ctx, self.n):
            with lm_clock() as clock:
                grade = rev.grade_candidate(example, cand.prediction)
            seconds += clock.seconds + cand.seconds
            if grade.failed:
                notes.append(f"candidate {cand.index}: grade unusable ({grade.failed})")
            graded.append(Candidate(cand.index, cand.temperature, cand.prediction, grade.score,
                                    grade.rationale or None, cand.seconds))
        scored = [c for c in graded if c.score is not None]
        best = max(scored, key=lambda c: (c.score, -c.temperature)) if scored else graded[0]
        final = best.prediction
        selected: int | None = best.index
        calls, unusable = len(graded), sum(c.score is None for c in graded)
        if best.score is not None and best.score < 1.0 and not any(c.prediction.declined for c in graded):
            with lm_clock() as clock:
                grade = rev.grade_candidate(example, NO_CALL)
            seconds += clock.seconds
            calls += 1
            unusable += grade.score is None
            why = f": {grade.rationale}" if grade.rationale else ""
            notes.append(f"no-call option: grade unusable ({grade.failed})" if grade.score is None
                         else f"no-call option graded {grade.score:.2f}{why}")
            if grade.score is not None and grade.score > best.score:
                final, selected = NO_CALL, None
                notes.append("the grader scored no call above every candidate: abstention")
        return MechanismOutcome(self.spec, base, final, candidates=tuple(graded), selected=selected,
                                reviewer_calls=calls, agent_calls=len(graded), seconds=seconds, notes=tuple(notes),
                                reviewer_unusable=unusable)


@dataclass(frozen=True)
class Gate:
    """``gate+<mech>`` (experimental): skip the LLM reviewer when the cascade vouches for the base call.

    Vouched (``PredictionReport.vouched``) = every call passes the gold-free cascade with no
    correction (not even drift), and every call with arguments has a value found in the request: a
    call built only of assumptions (say, invented numbers for a request without digits) is how a
    call to a function that fits nothing looks, so the reviewer sees it. An abstention never passes
    (FNEM = -1), so the inner mechanism handles every abstention (``r<N>`` reviews it;
    ``guard+r<N>`` lets it through unreviewed, as the runtime guard does).
    """

    inner: Mechanism
    experimental: bool = True
    gated: bool = True

    @property
    def spec(self) -> str:
        """``gate+<inner>``."""
        return f"gate+{self.inner.spec}"

    @property
    def components(self) -> tuple[str, ...]:
        """What the inner mechanism calls."""
        return self.inner.components

    @property
    def needs_reviewer(self) -> bool:
        """As the inner mechanism."""
        return self.inner.needs_reviewer

    @property
    def candidates(self) -> int:
        """As the inner mechanism."""
        return self.inner.candidates

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """The inner mechanism's: assume every example reaches the reviewer (the upper end)."""
        return self.inner.calls_per_example(reject_rate)

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Gate on the cascade, else delegate."""
        base = ctx.propose_initial(agent, example)
        if blind_cascade(base.prediction, example, ctx.grounding).vouched:
            return MechanismOutcome(self.spec, base, base.prediction,
                                    (ReviewRound(0, base.prediction, "saag_pass", "saag"),),
                                    seconds=base.seconds, gated=True)
        return replace(self.inner.run(example, agent, reviewer, ctx=ctx), mechanism=self.spec, gated=False)


# -- registry --------------------------------------------------------------------------------------

MechanismFactory = Callable[..., Mechanism]
"""Builds a mechanism: ``factory(n=N, max_repairs=D)`` for numbered names, ``factory(max_repairs=D)`` else."""


@dataclass(frozen=True)
class _Registration:
    factory: MechanismFactory
    description: str
    numbered: bool


_MECHANISMS: dict[str, _Registration] = {}
_WORDS = r"[a-z][a-z_-]*(?:\+[a-z][a-z_-]*)*"
_NAME = re.compile(rf"^{_WORDS}$")
_SPEC = re.compile(rf"^(?P<name>{_WORDS})(?P<n>\d*)$")
GATE_PREFIX = "gate+"
"""``gate+<spec>`` wraps any mechanism that calls the reviewer in a ``Gate``."""
_BUILT_IN_MODULES = ("saag_opt.agents.mechanisms.guarded", "saag_opt.agents.mechanisms.verified")
"""Built-in mechanisms that live (and register) in their own module, which imports this one; the
registry imports them on first use so that every reader sees them, whichever module was imported."""


def _load_built_ins() -> None:
    for module in _BUILT_IN_MODULES:
        importlib.import_module(module)


def register_mechanism(name: str, factory: MechanismFactory, description: str, *, numbered: bool = False) -> None:
    """Make ``name`` (``name<N>`` when ``numbered``) a mechanism spec; a new mechanism is a class plus this call.

    A name is lowercase words joined by ``+`` (``guard+r``); ``gate+`` is the gate's prefix.

    Raises:
        ConfigError: a name that is not lowercase letters, ``_``, ``-`` and inner ``+`` (digits belong to
            the grammar), or one that starts with ``gate+``.
    """
    if not _NAME.match(name) or name.startswith(GATE_PREFIX):
        raise ConfigError(f"mechanism name {name!r}: use lowercase letters, '_' or '-' (words joined by '+'), "
                          f"not starting with {GATE_PREFIX!r}")
    _MECHANISMS[name] = _Registration(factory, description, numbered)


def _form(name: str) -> str:
    return f"{name}<N>" if _MECHANISMS[name].numbered else name


def _sample(name: str) -> Mechanism:
    entry = _MECHANISMS[name]
    return entry.factory(n=1, max_repairs=None) if entry.numbered else entry.factory(max_repairs=None)


def mechanism_names(*, reviewer_only: bool = False) -> list[str]:
    """The accepted spec forms (gate+ forms last), for help texts and error messages."""
    _load_built_ins()
    forms = [_form(name) for name in _MECHANISMS if not reviewer_only or _sample(name).needs_reviewer]
    gated = [GATE_PREFIX + _form(name) for name in _MECHANISMS if _sample(name).needs_reviewer]
    return forms + gated


def describe_mechanisms() -> dict[str, str]:
    """Spec form -> one-line description."""
    _load_built_ins()
    out = {_form(name): f"{_form(name)}: {entry.description}" for name, entry in _MECHANISMS.items()}
    out[GATE_PREFIX + "<mechanism>"] = "experimental: LLM reviewer only when the SAAG cascade does not vouch for the call"
    return out


def parse_mechanism(spec: str, *, max_repairs: int | None = None) -> Mechanism:
    """Parse a registered spec (``mechanism_names()``: ``none``, ``r2``, ``guard+r2``, ...), optionally ``gate+``.

    Raises:
        ConfigError: unknown form, N < 1, or a gate around a mechanism without an LLM reviewer.
    """
    _load_built_ins()
    text = (spec or "").strip().lower()
    gate = text.startswith(GATE_PREFIX)
    match = _SPEC.match(text.removeprefix(GATE_PREFIX))
    entry = _MECHANISMS.get(match["name"]) if match else None
    if match is None or entry is None or entry.numbered != bool(match["n"]):
        raise ConfigError(f"unknown mechanism {spec!r}. Available: {mechanism_names()}")
    if max_repairs is not None and max_repairs < 0:
        raise ConfigError(f"max_repairs must be >= 0, got {max_repairs}")
    if entry.numbered:
        n = int(match["n"])
        if n < 1:
            raise ConfigError(f"mechanism {spec!r}: N must be >= 1")
        mechanism = entry.factory(n=n, max_repairs=max_repairs)
    else:
        mechanism = entry.factory(max_repairs=max_repairs)
    if gate and not mechanism.needs_reviewer:
        raise ConfigError(f"mechanism {spec!r}: gate+ wraps an LLM-reviewer mechanism "
                          f"({', '.join(mechanism_names(reviewer_only=True)[:3])}, ...)")
    return Gate(mechanism) if gate else mechanism


register_mechanism("none", lambda max_repairs: NoReview(), "base agent alone")
register_mechanism("binary", lambda max_repairs: SelfRepair("binary", informative=False, max_repairs=max_repairs),
                   "SAAG-triggered self-repair with 'incorrect, try again'")
register_mechanism("saag", lambda max_repairs: SelfRepair("saag", informative=True, max_repairs=max_repairs),
                   "SAAG self-repair with psi corrections")
register_mechanism("r", lambda n, max_repairs: Progressive(n), "progressive review, at most N reviews",
                   numbered=True)
register_mechanism("s", lambda n, max_repairs: Selection(n), "best-of-N selection", numbered=True)
register_mechanism("g", lambda n, max_repairs: Grading(n), "best-of-N grading", numbered=True)


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
