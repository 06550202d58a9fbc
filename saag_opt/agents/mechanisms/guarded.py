"""``guard+r<N>``: the runtime guard's review-revise loop, as a mechanism ``evaluate`` can measure.

The loop is ``r<N>`` (review; on rejection revise with the feedback; at most N reviews; the revision
after the N-th rejection runs unreviewed) plus the rules a live guard keeps whatever the reviewer says:

- a call failing SAAG stage 1 or 2 (unknown function, missing required or spurious parameter,
  unreadable arguments) never runs as proposed: it is revised with the psi feedback (joined to the
  reviewer's, if it rejected too), or blocked;
- a revision runs only if it makes a call and passes stages 1-2, else the turn is blocked; a revision
  that makes no call ends the loop at once (a block: nothing runs, which is the abstention the
  reviewer asked for when no function fits), rather than being reviewed again as a stage-1 failure;
- with tool results in view (a conversation step's ``sources``, or the live guard's), a side-effecting
  call that an instruction inside a tool result drives is blocked, as proposed or as revised (the
  injection rule, ``saag.injection``; ``Ruling.provenance`` says which value came from where). A
  single-turn example has no tool result, so nothing changes there;
- without a reviser (``agent`` None) a rejection blocks, with its feedback;
- a reply without calls is not reviewed (the guard only ever sees tool calls); an unreadable reply
  (``status="unparsable"``) is a stage-1 failure, like malformed arguments.

``runtime.Guard`` runs this class on every decision that needs an LM (its gate and its cascade-only
shortcuts apply the same rules without one), so the prompt GEPA tuned and ``evaluate --mechanism
guard+r<N>`` measured is the loop a live agent gets. ``gate+guard+r<N>`` is the ``Gate`` around it:
the guard's ``gate=True``. ``reviewer`` None is the cascade-only guard (stage 1-2 rules alone).

Two worlds, one loop; the context decides which:

- ``evaluate`` / ``compare`` / ``tune`` / ``optimize`` (a plain ``MechanismContext``): round 0 is the
  cached base call; LM failures propagate (the runner records them per example); an unusable review
  follows ``ctx.on_unusable`` like ``r<N>``: ``approve`` = the runtime's ``on_error="allow"`` (the
  call runs unreviewed), ``reject`` = a rejection with ``DEFAULT_REJECTION``. A block is scored as
  an abstention: the final prediction makes no call, which is what the live agent executes.
- the runtime guard (``LiveTurn``): round 0 is the calls the live agent proposed; a reviewer that
  raises or replies unusably is data, and ``on_error`` (allow | block) decides, as documented on
  ``runtime.guard``; a revision that raises blocks. ``CostCapReached`` (a capped ledger the guard's
  LMs book on) is no failure of the review: it leaves the loop in both worlds.

Either way the outcome carries a ``Ruling`` (allow | revise | block, the reason, the feedback) that
the guard turns into its ``Decision``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from saag_opt.agents.base import BaseAgent, FeedbackTurn, Proposal
from saag_opt.agents.conversation import NO_SOURCES, sources_of, traced_step
from saag_opt.agents.mechanisms.base import (
    NO_CALL,
    MechanismContext,
    MechanismFacts,
    MechanismOutcome,
    ReviewRound,
    RoundVerdict,
)
from saag_opt.agents.mechanisms.progressive import DEFAULT_REJECTION, Progressive
from saag_opt.agents.mechanisms.rules import (
    Ruling,
    describe_error,
    failed_review,
    hard_failure,
    injection_report,
    stage_summary,
)
from saag_opt.agents.reviewer import Reviewer, Verdict, blind_cascade
from saag_opt.choices import OnError
from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example, Prediction, Registry
from saag_opt.saag import check_calls, correction_for
from saag_opt.saag.injection import InjectionReport, Sources

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Mechanism
    from saag_opt.saag import PredictionReport
    from saag_opt.saag.flow import FlowReport

@dataclass(kw_only=True)
class LiveTurn(MechanismContext):
    """The runtime guard's context: round 0 is what a live agent proposed, and failures are data."""

    proposed: Prediction
    """The calls as proposed (``runtime.inputs.GuardInput.tentative``)."""
    report: PredictionReport
    """The cascade report of the proposed calls as received (malformed arguments included)."""
    registry: Registry
    """The tools the calls are checked against."""
    grounding_text: str
    """What arguments are grounded in: the user messages and the tool results."""
    on_error: OnError = "allow"
    """What a failed review of the proposed calls does (stage 1-2 failures are revised or blocked anyway)."""
    why: Callable[[BaseException], str] = field(default=describe_error)
    """How a reviewer exception reads in ``error`` (the guard names its timeout)."""
    sources: Sources = NO_SOURCES
    """The user's messages and the tool results, apart (the guard checked the proposal; revisions are checked here)."""
    flow: FlowReport | None = None
    """The data-flow trace of the proposed calls the guard's injection rule made (the reviewer is shown it,
    not a second one)."""

    def propose_initial(self, agent: BaseAgent | None, example: Example, temperature: float | None = None) -> Proposal:
        """The proposed calls: the live agent already made its round-0 call."""
        return Proposal(self.proposed)

    def check(self, prediction: Prediction) -> PredictionReport:
        """The gold-free cascade of a revision, grounded like the proposal."""
        return check_calls(list(prediction.calls), self.registry, self.grounding_text, grounding=self.grounding)


@dataclass(frozen=True)
class GuardedReview(MechanismFacts):
    """``guard+r<N>``: the runtime guard's loop (module docstring); at most N reviews."""

    n: int
    components = ("review",)
    experimental = True

    @property
    def spec(self) -> str:
        """``guard+r<N>``."""
        return f"guard+r{self.n}"

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """As ``r<N>``: the stage 1-2 rule adds revisions only where a call cannot run anyway."""
        return Progressive(self.n).calls_per_example(reject_rate)

    def run(self, example: Example, agent: BaseAgent | None, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """Review, revise, apply the stage 1-2 rules; ``agent`` None = no reviser, ``reviewer`` None = cascade only."""
        loop = _Loop(self.n, example, agent, reviewer, ctx)
        ruling, final = loop.decide()
        notes = (f"blocked: {ruling.reason} (nothing runs: scored as an abstention)",) if ruling.action == "block" else ()
        return MechanismOutcome(self.spec, loop.base, final, tuple(loop.rounds), reviewer_calls=loop.reviews,
                                agent_calls=len(loop.history), seconds=loop.seconds, notes=notes,
                                reviewer_unusable=loop.unusable, ruling=ruling)


class _Loop:
    """One run's state: the current calls and their report, the feedback history, the rounds."""

    def __init__(self, n: int, example: Example, agent: BaseAgent | None, reviewer: Reviewer | None,
                 ctx: MechanismContext) -> None:
        self.n, self.example, self.agent, self.reviewer, self.ctx = n, example, agent, reviewer, ctx
        self.live = ctx if isinstance(ctx, LiveTurn) else None
        if self.live is not None:
            self.base = self.live.propose_initial(agent, example)
        elif agent is None:
            raise ConfigError("guard+r<N> needs a base agent outside the runtime guard")
        else:
            self.base = ctx.propose_initial(agent, example)
        self.current = self.base.prediction
        self.report = self.live.report if self.live is not None else self.check(self.current)
        self.sources = self.live.sources if self.live is not None else sources_of(example)
        self.registry = self.live.registry if self.live is not None else example.registry
        self.given = example
        self.found: InjectionReport | None = None
        """The injection rule's report on the current calls (the live guard checked the proposal itself)."""
        if self.live is not None:
            self.example = traced_step(example, ctx.injection_policy, self.current.calls, self.live.flow)
        else:
            self.retrace()
        self.history: list[FeedbackTurn] = []
        self.rounds: list[ReviewRound] = []
        self.error: str | None = None
        self.reviewed, self.text = False, ""
        self.seconds, self.reviews, self.unusable = self.base.seconds, 0, 0

    @property
    def on_error(self) -> OnError:
        """The live guard's ``on_error``; evaluate's ``on_unusable=approve`` reads as ``allow``."""
        return self.live.on_error if self.live is not None else "allow"

    def check(self, prediction: Prediction) -> PredictionReport:
        if self.live is not None:
            return self.live.check(prediction)
        return blind_cascade(prediction, self.example, self.ctx.grounding)

    def decide(self) -> tuple[Ruling, Prediction]:
        """The ruling and what runs (the loop of the module docstring)."""
        if self.current.declined:
            return Ruling("allow", "no tool calls to review"), self.current
        found = self.found if self.found is not None and self.found.blocked else None
        if found is not None:  # the live guard checked the proposal before its gate
            return Ruling("block", found.reason(), found.feedback(), provenance=found.to_dict()), NO_CALL
        for index in range(self.n):
            hard = hard_failure(self.report)
            verdict, failure = self.ask()
            if failure is not None:
                self.error = failure
                if self.live is None and self.ctx.on_unusable == "reject":
                    verdict = Verdict(True, "")  # evaluate's --on-unusable reject, as in r<N>
                elif not hard:
                    self.rounds.append(ReviewRound(index, self.current, "reviewer_failed", "llm", note=failure))
                    if index == 0:
                        ruling = failed_review(self.report, failure, self.on_error)
                        return ruling, (self.current if ruling.action == "allow" else NO_CALL)
                    break  # a revision that passed stages 1-2 runs, as after the N-th review
            elif verdict is None and not hard:  # no LLM reviewer: what passes stages 1-2 runs
                if index == 0:
                    return Ruling("allow", "passed SAAG stages 1-2 (no LLM reviewer; any notes in feedback)",
                                  correction_for(self.report)), self.current
                break
            if verdict is not None and not verdict.error and not hard:
                self.rounds.append(ReviewRound(index, self.current, "approve", "llm", verdict.feedback or None))
                if index == 0:
                    return Ruling("allow", "the reviewer approved", verdict.feedback or None, reviewed=True), self.current
                return self.revised("the reviewer approved the revision")
            ended = self.feed_back(index, verdict, failure, hard)
            if ended is not None:
                return ended
            if self.current.declined:  # the revision abstains: nothing to review again, nothing runs
                break
        return self.revised(f"revised after {len(self.history)} rejection(s)")

    def ask(self) -> tuple[Verdict | None, str | None]:
        """The reviewer's usable verdict, or why there is none (None, None: no reviewer)."""
        if self.reviewer is None:
            return None, None
        self.reviews += 1
        verdict: Verdict | None = None
        with lm_clock() as clock:
            try:
                verdict = self.reviewer.review_call(self.example, self.current)
                failure = f"unusable reviewer reply ({verdict.failed})" if verdict.failed else None
            except Exception as exc:
                if self.live is None or isinstance(exc, CostCapReached):
                    raise  # evaluate records an LM failure per example; a spent cap stops any run
                failure = self.live.why(exc)
        self.seconds += clock.seconds
        if failure is not None:
            self.unusable += 1
            return None, failure
        self.reviewed = True
        return verdict, None

    def feed_back(self, index: int, verdict: Verdict | None, failure: str | None,
                  hard: bool) -> tuple[Ruling, Prediction] | None:
        """Revise with the rejection and/or the psi text; a ruling when that ends the turn."""
        rejected = verdict is not None and verdict.error
        parts = [(verdict.feedback if verdict is not None else "") or DEFAULT_REJECTION] if rejected else []
        if hard:
            parts.append(correction_for(self.report) or "")
        text = self.text = "\n".join(p for p in parts if p)
        why = ("the review was unusable (on_unusable=reject)" if rejected and failure is not None
               else "the reviewer rejected it" if rejected else "")
        if hard:
            why = " and ".join(filter(None, [why, stage_summary(self.report)]))
        verdict_name: RoundVerdict = "reviewer_failed" if failure is not None else "reject" if rejected else "saag_fail"
        tentative = self.current

        def record(revised: Prediction | None = None) -> None:
            self.rounds.append(ReviewRound(index, tentative, verdict_name,
                                           "saag" if verdict_name == "saag_fail" else "llm", text, revised, failure))

        if self.agent is None:
            record()
            return Ruling("block", f"{why}; no reviser (revise=False)", text, self.reviewed, self.error), NO_CALL
        try:
            revision = self.agent.propose(self.example, feedback=[*self.history, FeedbackTurn(tentative, text)])
        except Exception as exc:
            if self.live is None or isinstance(exc, CostCapReached):
                raise  # evaluate records an LM failure per example; a spent cap stops any run
            record()
            return Ruling("block", f"{why}; the revision failed: {describe_error(exc)}", text, self.reviewed,
                          self.error or describe_error(exc), cacheable=False), NO_CALL
        record(revision.prediction)
        self.seconds += revision.seconds
        self.history.append(FeedbackTurn(tentative, text))
        self.current, self.report = revision.prediction, self.check(revision.prediction)
        self.retrace()
        return None

    def retrace(self) -> None:
        """The injection rule on the current calls, once: its report decides, its trace is what the reviewer sees."""
        self.found = injection_report(self.current.calls, self.registry, self.sources, self.ctx.injection_policy)
        self.example = traced_step(self.given, self.ctx.injection_policy, self.current.calls,
                                   self.found.flow if self.found is not None else None)

    def revised(self, why: str) -> tuple[Ruling, Prediction]:
        """A revision runs only if it makes a call and passes stages 1-2; else block."""
        text, report = self.text, self.report
        if not self.current.calls:
            return Ruling("block", f"{why}, but the revision makes no call", text, self.reviewed, self.error), NO_CALL
        if hard_failure(report):
            feedback = "\n".join(filter(None, [text, correction_for(report) or ""]))
            return Ruling("block", f"{why}, but the revision {stage_summary(report)}", feedback, self.reviewed,
                          self.error, report), NO_CALL
        found = self.found if self.found is not None and self.found.blocked else None
        if found is not None:
            return Ruling("block", f"{why}, but the revision is an {found.reason()}", found.feedback(), self.reviewed,
                          self.error, report, provenance=found.to_dict()), NO_CALL
        return Ruling("revise", why, text or None, self.reviewed, self.error, report), self.current


if TYPE_CHECKING:
    _g: Mechanism = GuardedReview(2)

__all__ = ["NO_CALL", "GuardedReview", "LiveTurn"]
