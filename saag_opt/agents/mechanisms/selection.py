"""``s<N>`` / ``g<N>``: best-of-N, N round-0 candidates the selector picks from (``s``) or the grader scores (``g``).

Both sample the same cached candidates (``sample_candidates``, shared with ``saag+s<N>``) and both
offer the reviewer a "(no function call)" option, so one run's candidates serve the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.mechanisms.base import (
    NO_CALL,
    Candidate,
    MechanismContext,
    MechanismFacts,
    MechanismOutcome,
    require_reviewer,
)
from saag_opt.agents.reviewer import Reviewer
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example, Prediction

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism

TEMPERATURE_RANGE = (0.3, 1.0)
"""Candidate temperatures for s<N>/g<N> (Reinforced Agent paper §2.1; evenly spaced is our reading)."""


def options_with_no_call(candidates: Sequence[Prediction]) -> list[Prediction]:
    """The candidates, plus ``NO_CALL`` when none abstains: the selector or grader may always pick "no call"."""
    return list(candidates) if any(c.declined for c in candidates) else [*candidates, NO_CALL]



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
        rev = require_reviewer(reviewer, self.spec)
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
        rev = require_reviewer(reviewer, self.spec)
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



if TYPE_CHECKING:
    _d: Mechanism = Selection(5)
    _e: Mechanism = Grading(5)
