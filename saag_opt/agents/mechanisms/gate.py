"""``gate+<mechanism>`` (experimental): the LLM reviewer only when the gold-free cascade does not vouch for the call."""

from __future__ import annotations

from dataclasses import dataclass, replace

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext, MechanismOutcome, ReviewRound
from saag_opt.agents.reviewer import Reviewer, blind_cascade
from saag_opt.model import Example


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
