"""``binary`` / ``saag``: self-repair while the gold-free SAAG cascade fails (the SAAG paper's loop and its ablation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from saag_opt.agents.base import BaseAgent, FeedbackTurn
from saag_opt.agents.mechanisms.base import (
    DEFAULT_MAX_REPAIRS,
    MechanismContext,
    MechanismFacts,
    MechanismOutcome,
    ReviewRound,
    geometric,
)
from saag_opt.agents.reviewer import Reviewer, blind_cascade
from saag_opt.model import Example, Prediction
from saag_opt.saag import correction_for

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism
    from saag_opt.saag import PredictionReport

BINARY_FEEDBACK = "Your previous function call was incorrect. Try again."
"""The content-free signal of the ``binary`` ablation."""

NO_CALL_FEEDBACK = ("You made no function call. If one of the available functions serves the request, answer "
                    "with the call; if none does, or the request lacks information a call needs, answer again "
                    "without a call.")
"""``saag`` self-repair's feedback on an abstention (psi1 asks for a call, which the cascade cannot know
is wanted without gold); a second abstention in a row ends the loop."""


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
        return 0.0, geometric(reject_rate, 1, budget)

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



if TYPE_CHECKING:
    _b: Mechanism = SelfRepair("saag", informative=True)
