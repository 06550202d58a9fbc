"""``saag+s<N>`` (SAAG-verified best-of-N) and ``saag+abstain`` (its no-LLM limit); docs/design.md §25.

N round-0 candidates are sampled exactly as ``s<N>`` samples them (temperatures over 0.3-1.0,
through the base-prediction cache, so ``s<N>`` and ``saag+s<N>`` on one dataset share them). Each
goes through the gold-free cascade with the context's grounding (calibrated by default); it
*passes* when the cascade passes it and each of its calls has a value from the request
(``verified``: a call made only of assumptions is no evidence that the function fits). The rule
is "first", not "best": the LLM reviewer is only asked when the cascade cannot decide.

1. Every candidate makes no call: the first abstention (else candidate 0, unreadable) is final; no
   reviewer call.
2. Some candidate passes and none abstains: the first passing one (lowest temperature) wins; no
   reviewer call.
3. Some pass and some abstain: the cascade cannot check an abstention (FNEM = -1 without gold), so
   the two stances tie; the selector picks between the first passing candidate and the first
   abstention (BFCL irrelevance: making no call may be the right answer).
4. None passes: the selector picks among all candidates plus, when none of them abstains, an
   explicit "(no function call)" option; picking it ends in an abstention (``selected`` None).

An unusable selector reply (after its retry) falls back to the first candidate, noted and counted
in ``reviewer_unusable``, as in ``s<N>``. ``Candidate.passed`` records which candidates passed.

``saag+abstain`` asks no LLM at all: the base call stands when the cascade verifies it (the same
``verified`` test) and is withheld, a block ruling with the cascade's reason, when it does not. Why:
a call to a function that fits nothing (BFCL irrelevance) is one no value of the request anchors.
The price is every right call the cascade cannot verify (a value it does not find in the request),
so its help and its harm are two numbers to read per category. In a conversation the block ends the
step as the runtime guard's does (tau2's agent is told why and may propose again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.mechanisms.base import (
    NO_CALL,
    Candidate,
    MechanismContext,
    MechanismFacts,
    MechanismOutcome,
    ReviewRound,
)
from saag_opt.agents.mechanisms.rules import Ruling, stage_summary
from saag_opt.agents.mechanisms.selection import options_with_no_call, sample_candidates
from saag_opt.agents.reviewer import UNANCHORED_NOTE, Reviewer, blind_cascade
from saag_opt.errors import ConfigError
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example
from saag_opt.saag import correction_for

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism
    from saag_opt.saag import PredictionReport

NO_CALL_OPTION = NO_CALL
"""The selector's extra option when no candidate abstains (``mechanisms.base.NO_CALL``): "(no function call)"."""


@dataclass(frozen=True)
class VerifiedSelection(MechanismFacts):
    """``saag+s<N>``: the first candidate the cascade passes wins; the selector decides the rest (module docstring)."""

    n: int
    components = ("select",)
    experimental = True

    @property
    def spec(self) -> str:
        """``saag+s<N>``."""
        return f"saag+s{self.n}"

    @property
    def candidates(self) -> int:
        """N candidates."""
        return self.n

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """At most one selector call (``reject_rate`` read as the share the cascade cannot decide); N-1 extra candidates."""
        return float(reject_rate), float(max(self.n - 1, 0))

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Sample, verify in order, ask the selector only when the cascade cannot decide."""
        if reviewer is None:
            raise ConfigError(f"mechanism {self.spec!r} needs a reviewer model (--reviewer)")
        base = ctx.propose_initial(agent, example)
        cands = [replace(c, passed=verified(blind_cascade(c.prediction, example, ctx.grounding)))
                 for c in sample_candidates(example, agent, ctx, self.n)]
        seconds = sum(c.seconds for c in cands)
        passing = [c for c in cands if c.passed]
        abstaining = [c for c in cands if c.prediction.declined]

        def done(chosen: Candidate | None, *notes: str, calls: int = 0, took: float = 0.0,
                 unusable: int = 0) -> MechanismOutcome:
            final = chosen.prediction if chosen is not None else NO_CALL
            return MechanismOutcome(self.spec, base, final, candidates=tuple(cands),
                                    selected=chosen.index if chosen is not None else None, reviewer_calls=calls,
                                    agent_calls=len(cands), seconds=seconds + took, notes=notes,
                                    reviewer_unusable=unusable)

        if all(not c.prediction.calls for c in cands):
            return done(abstaining[0] if abstaining else cands[0],
                        "every candidate makes no call (abstains or is unreadable): no reviewer call")
        if passing and not abstaining:
            return done(passing[0], f"candidate {passing[0].index} is the first the SAAG cascade passes")
        if passing:
            options, why = [passing[0], abstaining[0]], "some candidates pass SAAG, some abstain"
        else:
            options, why = list(cands), "no candidate passes SAAG"
        shown = options_with_no_call([c.prediction for c in options])
        with lm_clock() as clock:
            index, failure = reviewer.select_candidate(example, shown)
        if failure is not None or index is None or not 0 <= index < len(shown):
            return done(cands[0], f"{why}; selector returned {index!r}{f' ({failure})' if failure else ''}; "
                        "using candidate 0", calls=1, took=clock.seconds, unusable=1)
        if index == len(options):
            return done(None, f"{why}; the selector chose no call: abstention", calls=1, took=clock.seconds)
        return done(options[index], f"{why}; the selector chose candidate {options[index].index}", calls=1,
                    took=clock.seconds)


def verified(report: PredictionReport) -> bool:
    """The cascade passes the candidate and finds a value from the request in each of its calls (``anchored``).

    A pass built only of assumptions is no evidence that the function fits (BFCL irrelevance), so such a
    candidate is left to the selector, with the no-call option, like a failing one.
    """
    return report.passed is True and report.anchored


@dataclass(frozen=True)
class VerifiedOrAbstain(MechanismFacts):
    """``saag+abstain``: the base call if the cascade verifies it, else no call (module docstring)."""

    spec: str = "saag+abstain"
    experimental = True

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Verify the base call; withhold it with the cascade's reason when it is not verified."""
        base = ctx.propose_initial(agent, example)
        if not base.prediction.calls:  # an abstention or an unreadable reply: nothing to verify or withhold
            return MechanismOutcome(self.spec, base, base.prediction, seconds=base.seconds)
        report = blind_cascade(base.prediction, example, ctx.grounding)
        if verified(report):
            return MechanismOutcome(self.spec, base, base.prediction,
                                    (ReviewRound(0, base.prediction, "saag_pass", "saag"),), seconds=base.seconds)
        reason, feedback = withheld_because(report)
        return MechanismOutcome(self.spec, base, NO_CALL,
                                (ReviewRound(0, base.prediction, "saag_fail", "saag", feedback),),
                                seconds=base.seconds, notes=(f"withheld: {reason}",),
                                ruling=Ruling("block", reason, feedback=feedback))


def withheld_because(report: PredictionReport) -> tuple[str, str]:
    """(reason, feedback for the agent) for a call the cascade does not verify; never names gold."""
    if report.passed is not True:
        return stage_summary(report, (1, 2, 3)), correction_for(report) or "The call does not pass the automatic checks."
    return "no value of the request is in its arguments", f"The call: {UNANCHORED_NOTE}."


if TYPE_CHECKING:
    _v: Mechanism = VerifiedSelection(3)
    _w: Mechanism = VerifiedOrAbstain()

__all__ = ["NO_CALL_OPTION", "VerifiedOrAbstain", "VerifiedSelection", "verified", "withheld_because"]
