"""``none``: the base agent alone, the baseline every mechanism is measured against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.mechanisms.base import MechanismContext, MechanismFacts, MechanismOutcome
from saag_opt.agents.reviewer import Reviewer
from saag_opt.model import Example

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism


@dataclass(frozen=True)
class NoReview(MechanismFacts):
    """``none``: the base prediction is final."""

    spec: str = "none"

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Return the (cached) base prediction."""
        base = ctx.propose_initial(agent, example)
        return MechanismOutcome(self.spec, base, base.prediction, seconds=base.seconds)



if TYPE_CHECKING:
    _a: Mechanism = NoReview()
