"""``r<N>``: progressive review, the reviewer's feedback injected and the call revised, at most N reviews."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from saag_opt.agents.base import BaseAgent, FeedbackTurn
from saag_opt.agents.mechanisms.base import (
    MechanismContext,
    MechanismFacts,
    MechanismOutcome,
    ReviewRound,
    geometric,
    require_reviewer,
)
from saag_opt.agents.reviewer import Reviewer
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism

DEFAULT_REJECTION = "The tentative function calls contain an error. Check them against the request and fix them."
"""Sent when a reviewer rejects with empty feedback."""


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
        return geometric(reject_rate, 0, self.n - 1), geometric(reject_rate, 1, self.n)

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Review-revise loop."""
        rev = require_reviewer(reviewer, self.spec)
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


if TYPE_CHECKING:
    _c: Mechanism = Progressive(2)
