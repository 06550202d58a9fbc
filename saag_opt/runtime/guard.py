"""``Guard``: a tuned reviewer in front of a live agent's tool calls (docs/design.md §14).

One decision per set of proposed calls (an assistant turn, or one call in frameworks that guard
call by call):

1. The gold-free SAAG cascade (``check_calls``) runs on the calls. With ``gate=True`` a call set
   that passes cleanly (no correction, not even drift) with a value from the request in every call
   that has arguments (``PredictionReport.vouched``) is allowed without an LLM call.
2. Otherwise the guard runs the registered mechanism ``guard+r<N>`` (``agents/mechanisms/guarded.py``;
   ``guard.mechanism``), the loop ``evaluate --mechanism guard+r<N>`` measures (``guard.spec``
   names it, with ``gate+`` when the gate is on). The reviewer (at most N reviews) judges the
   calls. A rejection is revised: the reviser (the base agent's code path, by default on the
   reviewer's model) rewrites the calls with the feedback as a system message, as GEPA tuned the
   prompt (agents/base.py). The revision after the N-th rejection is not reviewed again (the
   ``r<N>`` reading of agents/mechanisms/registry.py).
3. Rules that hold whatever the reviewer says (the loop's own): a call that fails stage 1 or 2
   (unknown function, missing required or spurious parameter, unreadable arguments) never runs as
   is; it is revised with the psi feedback, or blocked. A revision must pass stages 1-2 and make a
   call, else block. Without a reviser (``revise=False``, or no model) every rejection is a block
   with feedback.
4. ``on_error`` decides what a reviewer failure does (timeout, unreachable server, unusable
   reply): ``allow`` runs the proposed calls unreviewed, ``block`` runs nothing; ``decision.error``
   and ``decision.reason`` say so. A call failing stage 1-2 is still revised from the psi feedback
   alone, or blocked: ``on_error="allow"`` never lets it through. The one exception that leaves
   ``review``: ``CostCapReached`` from a capped ledger the caller handed to ``Guard.load`` (its run
   is out of budget, which no ruling can answer).
5. Indirect prompt injection (``injection=True``, the default; ``saag.injection`` and ``saag.flow``):
   when the conversation holds tool results, a side-effecting call is blocked with feedback before the
   gate and the reviewer when a decisive argument (recipient, account, address, link, id, title,
   secret) comes from the text of a tool result the user's request does not name as its source, when
   its kind of effect is one the request's verbs do not ask for (none of its values from the user),
   or when an argument comes only from text that addresses the model with instructions, or is an id
   or a date such text names and the user did not give (the marker rules, kept as evidence);
   ``decision.provenance`` says which value came from where and which rule.
   A call set that runs only because the request hands the task over to tool text carries
   ``decision.exception`` (counted, never silent). Without tool results nothing changes.
6. Bad input (unreadable tools, messages or calls) is a block whose reason names the problem; no
   exception reaches the agent loop.
7. ``mechanism="saag+abstain"`` (experimental, no LLM): a call set the cascade verifies (passed, a
   value from the request or a tool result in each call; ``agents/mechanisms/verified.py``) runs, any other is
   blocked with the cascade's reason and feedback, as ``evaluate --mechanism saag+abstain`` scores it.

``timeout`` bounds the LM part of one decision (reviews and revisions together); the work runs on
a small thread pool so that the caller gets its decision on time even if a request hangs.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, get_args

from saag_opt import telemetry
from saag_opt.agents.mechanisms.rules import (
    Ruling,
    describe_error,
    failed_review,
    hard_failure,
    injection_report,
    stage_summary,
)
from saag_opt.choices import OnError
from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.lm import price_call, usage_numbers
from saag_opt.lm.latency import lm_clock
from saag_opt.lm.retry import call_options
from saag_opt.model import Prediction
from saag_opt.paths import cache_dir
from saag_opt.runtime.cache import ReviewCache, review_key
from saag_opt.runtime.decision import Decision
from saag_opt.runtime.inputs import (
    GuardInput,
    GuardInputError,
    RegistryMemo,
    read_input,
)
from saag_opt.runtime.prompt import load_prompt
from saag_opt.saag import check_calls, correction_for
from saag_opt.saag.modes import INTERVENTION_GROUNDING, ModeName
from saag_opt.saag.policy import DEFAULT_POLICY, Policy

if TYPE_CHECKING:
    from saag_opt.agents import BaseAgent, Reviewer, ReviewRound
    from saag_opt.agents.mechanisms.guarded import GuardedReview
    from saag_opt.artifacts import PromptVersion
    from saag_opt.lm.latency import LatencyClock
    from saag_opt.lm.spend.accounting import CostLedger
    from saag_opt.saag import PredictionReport
    from saag_opt.saag.flow import FlowReport


class _Ruled(NamedTuple):
    """What the LM part decided, before costs and timing are added."""

    ruling: Ruling
    final: Prediction
    """What runs on ``revise`` (the revised calls); the proposed calls on ``allow``."""
    rounds: list[dict[str, Any]]
    """``Decision.rounds``."""


def decision_attributes(decision: Decision) -> dict[str, Any]:
    """A decision as span attributes: what was done, by which rule, at which SAAG stage, at what cost."""
    report = decision.report or {}
    return {"saag_opt.guard.action": decision.action, "saag_opt.guard.reason": decision.reason,
            "saag_opt.guard.reviewed": decision.reviewed, "saag_opt.guard.cached": decision.cached,
            "saag_opt.guard.saag_stage": report.get("stage_reached"),
            "saag_opt.guard.saag_passed": report.get("passed"), "saag_opt.guard.error": decision.error,
            "saag_opt.guard.latency_s": decision.latency_s, "saag_opt.cost_usd": decision.cost_usd,
            "saag_opt.guard.feedback": telemetry.content(decision.feedback) if decision.feedback else None}


def decided_by(decision: Decision) -> str:
    """Which rule decided, low-cardinality (``saag.s1``-``s3``, ``saag.gate``, ``saag.injection``, ``llm_review``, ...)."""
    if decision.provenance:
        return "saag.injection"
    if decision.reason.startswith("bad input"):
        return "input"
    if decision.error:
        return "on_error"
    if decision.reviewed:
        return "llm_review"
    if decision.reason.startswith("gate"):
        return "saag.gate"
    stage = (decision.report or {}).get("stage_reached")
    return f"saag.s{stage}" if stage else "saag"


def _record(current: Any, decision: Decision) -> None:
    """The decision on its span, and OpenTelemetry's ``gen_ai.guardrail.result`` event (our own action as its value)."""
    telemetry.set_attributes(current, decision_attributes(decision))
    rule = decided_by(decision)
    telemetry.add_event(current, "gen_ai.guardrail.result", {
        "gen_ai.guardrail.source": "tool_input", "gen_ai.guardrail.policy.rule.id": rule,
        "gen_ai.guardrail.result.type": "decision", "gen_ai.guardrail.result.value": decision.action,
        "gen_ai.guardrail.result.reason": rule})


class Guard:
    """Reviews proposed tool calls before they run; build it with ``Guard.load``.

    ``review(messages, tools, tool_calls)`` and ``await areview(...)`` return a ``Decision`` and
    never raise for bad input or a failing reviewer. ``close()`` (or ``with``) stops the pool.
    """

    def __init__(self, *, reviewer: Reviewer | None = None, reviser: BaseAgent | None = None,
                 prompt_sha256: str | None = None, prompt_label: str | None = None, reviews: int = 1,
                 gate: bool = True, on_error: OnError = "allow", timeout: float | None = 20.0,
                 revise: bool = True, grounding: str | None = None, cache: ReviewCache | None = None,
                 models: dict[str, Any] | None = None, labels: tuple[str | None, str | None] = (None, None),
                 injection: bool = True, abstain: bool = False, policy: Policy | None = DEFAULT_POLICY) -> None:
        if on_error not in ("allow", "block"):
            raise ConfigError(f"on_error must be 'allow' or 'block', got {on_error!r}")
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds (or None), got {timeout!r}")
        if reviews < 1:
            raise ConfigError(f"reviews must be >= 1, got {reviews}")
        self.reviewer, self.reviser = reviewer, (reviser if revise else None)
        self.prompt_sha256, self.prompt_label = prompt_sha256, prompt_label
        self.reviews, self.gate, self.on_error, self.timeout = reviews, gate, on_error, timeout
        self.grounding = _cascade_options(grounding)["grounding"]
        self.cache = cache if cache is not None else ReviewCache()
        self.models = dict(models or {})
        self.reviewer_label, self.reviser_label = labels
        self.injection, self.policy = injection, policy
        self.abstain = abstain
        if abstain and (reviewer is not None or self.reviser is not None):
            raise ConfigError("abstain (saag+abstain) is a guard without reviewer or reviser: the cascade decides")
        self._cascade_options = _cascade_options(grounding)
        self._pool: ThreadPoolExecutor | None = None
        self.registries = RegistryMemo()

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def load(cls, prompt: str | os.PathLike[str] | PromptVersion = "reviewer@v2", *,
             reviewer: Any = None, mechanism: str = "r1", gate: bool = True, on_error: OnError = "allow",
             timeout: float | None = 20.0, reviser: Any = None, revise: bool = True,
             store: str | os.PathLike[str] | None = None, cache: bool | str | os.PathLike[str] = True,
             grounding: str | None = None, retries: int = 2, saag_informed: bool = False,
             injection: bool = True, ledger: CostLedger | None = None,
             policy: Policy | None = DEFAULT_POLICY) -> Guard:
        """A guard running prompt ``prompt`` on model ``reviewer``.

        Args:
            prompt: ``reviewer@v2``, ``reviewer@best`` (the CLI's store, or ``store``), a version
                JSON, or an exported prompt file (txt, dspy, openai, mlflow).
            reviewer: model spec (``gpt-5-mini``, ``local``, ``openai/<m>@URL``) or a ``dspy.LM``;
                None = a cascade-only guard (mechanism ``none``).
            mechanism: ``r<N>`` or ``guard+r<N>`` (the guard's loop, at most N reviews), ``gate+r<N>`` /
                ``gate+guard+r<N>`` (same, gate on), ``none``, or ``saag+abstain`` (no LLM: an unverified
                call set is blocked; ``reviewer`` and ``reviser`` are not used). Either spelling runs
                ``guard+r<N>``.
            gate: skip the LLM when the cascade vouches for the calls (``PredictionReport.vouched``).
            on_error: ``allow`` or ``block`` on a reviewer timeout, dead server or unusable reply.
            timeout: seconds for the LM part of one decision (None = no bound).
            reviser: model that rewrites rejected calls (default: the reviewer's model).
            revise: False = a rejection blocks with feedback (the host model proposes again).
            store: the prompt store root (default: ``$SAAG_OPT_PROMPTS``, else ``./prompts``).
            cache: True = review cache under the saag-opt cache dir; a path = there; False = memory.
            grounding: stage-3 mode of the gold-free cascade (None = ``INTERVENTION_GROUNDING``, calibrated).
            retries: extra attempts per LM request (backoff), within ``timeout``.
            saag_informed: the reviewer also sees the SAAG report (experimental reviewer).
            injection: block calls driven by instructions inside tool results (module docstring, rule 5).
            policy: the data-flow policy of that rule (``saag.policy``: which sources may fill which
                argument roles of which effects); ``Policy.from_dict(json.load(f))`` reads your own;
                None = the marker rules alone.
            ledger: book the reviewer's and reviser's calls here (roles ``reviewer``, ``reviser``), e.g. a
                run's ledger, so its ``--max-cost`` caps them with the rest; None = each LM its own. A
                capped ledger's ``CostCapReached`` leaves ``review`` (module docstring, rule 4).

        Raises:
            ConfigError: a bad mechanism, model spec or option. ArtifactError: unknown prompt.
            ModelUnavailableError: a missing key or model runtime (checked here, not per review).
        """
        from saag_opt.agents import Gate, GuardedReview, NoReview, Progressive, parse_mechanism  # noqa: PLC0415 - heavy: dspy; importing the guard stays light
        from saag_opt.agents.mechanisms.verified import VerifiedOrAbstain  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

        parsed = parse_mechanism(mechanism)
        abstain = isinstance(parsed, VerifiedOrAbstain)
        if isinstance(parsed, Gate) and isinstance(parsed.inner, (Progressive, GuardedReview)):
            gate, reviews = True, parsed.inner.n
        elif isinstance(parsed, (Progressive, GuardedReview)):
            reviews = parsed.n
        elif isinstance(parsed, NoReview) or abstain:
            reviews, reviewer = 1, None
            if abstain:
                reviser, revise = None, False
        else:
            raise ConfigError(f"mechanism {mechanism!r}: a runtime guard runs r<N>, gate+r<N>, none or saag+abstain "
                              "(guard+r<N> and gate+guard+r<N> name the same loops)")
        _cascade_options(grounding)  # fail here, not per review
        ledger_models: dict[str, Any] = {}
        labels: list[str | None] = [None, None]
        review_module, loaded = None, None
        if reviewer is not None:
            from saag_opt.agents.setup import bind_reviewer  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

            loaded = load_prompt(prompt, store)
            review_lm = _open(reviewer, "reviewer", timeout, retries, ledger)
            review_module = bind_reviewer(loaded.instructions, review_lm, saag_informed=saag_informed,
                                          grounding=_cascade_options(grounding)["grounding"])
            ledger_models[str(review_lm.model)] = getattr(review_lm, "spec", None)
            labels[0] = _label(review_lm)
        reviser_agent = None
        reviser_model = reviser if reviser is not None else reviewer
        if revise and reviser_model is not None:
            from saag_opt.agents import BaseAgent  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

            reviser_lm = _open(reviser_model, "reviser", timeout, retries, ledger)
            reviser_agent = BaseAgent(reviser_lm, ledger=getattr(reviser_lm, "ledger", None))
            ledger_models[str(reviser_lm.model)] = getattr(reviser_lm, "spec", None)
            labels[1] = _label(reviser_lm)
        return cls(reviewer=review_module, reviser=reviser_agent,
                   prompt_sha256=loaded.sha256 if loaded else None, prompt_label=loaded.label if loaded else None,
                   reviews=reviews, gate=gate, on_error=on_error, timeout=timeout, revise=revise,
                   grounding=grounding, cache=_cache(cache), models=ledger_models, labels=(labels[0], labels[1]),
                   injection=injection, abstain=abstain, policy=policy)

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker pool (running reviews finish in the background)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    @property
    def config(self) -> dict[str, Any]:
        """What decides a review besides its input (part of every cache key); no secrets."""
        return {"prompt": self.prompt_sha256, "reviewer": self.reviewer_label, "reviser": self.reviser_label,
                "reviews": self.reviews, "gate": self.gate, "grounding": self.grounding,
                "saag_informed": bool(getattr(self.reviewer, "experimental", False))} | (
                    {"abstain": True} if self.abstain else {}) | (  # earlier guards' cache keys unchanged
                    {} if self.policy is DEFAULT_POLICY else {"policy": None if self.policy is None else
                                                                 review_key(self.policy.to_dict())}) | (
                    {} if self.injection else {"injection": False})

    @cached_property
    def mechanism(self) -> GuardedReview:
        """The loop this guard runs once the gate has not settled a decision: ``guard+r<reviews>``."""
        from saag_opt.agents.mechanisms.guarded import GuardedReview  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

        return GuardedReview(self.reviews)

    @property
    def spec(self) -> str:
        """What ``evaluate --mechanism`` measures this guard with: ``[gate+]guard+r<N>``, or ``saag+abstain``."""
        if self.abstain:
            return "saag+abstain"
        return ("gate+" if self.gate else "") + self.mechanism.spec

    # -- reviewing ---------------------------------------------------------------------------------

    def review(self, messages: Any, tools: Any, tool_calls: Any) -> Decision:
        """Decide on ``tool_calls`` (see the module docstring); never raises for bad input.

        One ``saag_opt.guard.review`` span per decision (``telemetry``): action, reason, stage, latency, cost.
        """
        with telemetry.span("saag_opt.guard.review", self._span_attributes(tool_calls)) as current:
            decision = self._review(messages, tools, tool_calls)
            _record(current, decision)
        return decision

    def _span_attributes(self, tool_calls: Any) -> dict[str, Any]:
        return {"saag_opt.guard.mechanism": self.spec, "gen_ai.guardrail.component.name": "saag-opt guard",
                "gen_ai.guardrail.policy.id": self.prompt_label, "gen_ai.guardrail.policy.version": self.prompt_sha256,
                "gen_ai.tool.call.arguments": telemetry.content(tool_calls)}

    def _review(self, messages: Any, tools: Any, tool_calls: Any) -> Decision:
        with lm_clock() as clock:
            early = self._prepare(messages, tools, tool_calls, clock)
            if isinstance(early, Decision):
                return early
            inp, report, key, note, flow = early
            if self.timeout is None:
                outcome, cost = self._run_lm(inp, report, flow)
            else:  # the worker runs in a copy of this context, so its cache hits reach the clock
                future = self._executor().submit(contextvars.copy_context().run, self._run_lm, inp, report, flow)
                try:
                    outcome, cost = future.result(timeout=self.timeout)
                except FutureTimeout:
                    outcome, cost = self._failed(inp, report, f"review timed out after {self.timeout:g} s"), 0.0
            return self._finish(inp, report, key, outcome, cost, clock).noted(note)

    async def areview(self, messages: Any, tools: Any, tool_calls: Any) -> Decision:
        """Async twin of ``review``: the gate and cache hits answer inline, LM work on the pool; the same span."""
        with telemetry.span("saag_opt.guard.review", self._span_attributes(tool_calls)) as current:
            decision = await self._areview(messages, tools, tool_calls)
            _record(current, decision)
        return decision

    async def _areview(self, messages: Any, tools: Any, tool_calls: Any) -> Decision:
        with lm_clock() as clock:
            early = self._prepare(messages, tools, tool_calls, clock)
            if isinstance(early, Decision):
                return early
            inp, report, key, note, flow = early
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(self._executor(), contextvars.copy_context().run, self._run_lm, inp, report,
                                        flow)
            try:
                outcome, cost = await asyncio.wait_for(work, timeout=self.timeout)
            except asyncio.TimeoutError:
                outcome, cost = self._failed(inp, report, f"review timed out after {self.timeout:g} s"), 0.0
            return self._finish(inp, report, key, outcome, cost, clock).noted(note)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="saag-guard")
        return self._pool

    def _prepare(self, messages: Any, tools: Any, tool_calls: Any, clock: LatencyClock
                 ) -> Decision | tuple[GuardInput, PredictionReport, str, dict[str, Any] | None, FlowReport | None]:
        """Read the input, run the cascade, the injection rule and the gate; a Decision when no LM is needed.

        A call set the injection rule lets run only under its counted exception carries it
        (``Decision.exception``) whatever decides next. The rule's data-flow trace goes on to the
        reviewer (``LiveTurn.flow``): traced once per decision.
        """
        try:
            inp = read_input(messages, tools, tool_calls, self.registries)
        except GuardInputError as exc:
            return Decision("block", None, f"The tool calls could not be checked: {exc}.", f"bad input: {exc}",
                            latency_s=clock.seconds)
        if not inp.calls:
            return Decision("allow", [], None, "no tool calls to review", latency_s=clock.seconds)
        report = self._check(inp, [c.for_cascade() for c in inp.calls])
        note: dict[str, Any] | None = None
        flow: FlowReport | None = None
        if self.injection and inp.sources.tools:
            found = injection_report([c.as_tool_call() for c in inp.calls], inp.registry, inp.sources, self.policy)
            if found is not None and found.blocked:
                return Decision("block", None, found.feedback(), found.reason(), report.to_dict(),
                                latency_s=clock.seconds, provenance=found.to_dict())
            note = found.exception_note() if found is not None else None
            flow = found.flow if found is not None else None
        early = self._without_injection(inp, report, clock)
        return early.noted(note) if isinstance(early, Decision) else (*early, note, flow)

    def _without_injection(self, inp: GuardInput, report: PredictionReport,
                           clock: LatencyClock) -> Decision | tuple[GuardInput, PredictionReport, str]:
        """The gate, the cascade-only and abstaining paths and the review cache, once no injection blocks."""
        if self.gate and report.vouched:
            return Decision.deferred("allow", [c.to_dict() for c in inp.calls],
                                     "gate: the SAAG cascade passed cleanly, values from the request",
                                     lambda: (None, report.to_dict()), latency_s=clock.seconds)
        if self.abstain:  # saag+abstain: the cascade alone decides, no reviser
            return self._verified_or_blocked(inp, report, clock)
        if self.reviewer is None:  # cascade-only: stage 1-2 failures are revised or blocked, the rest runs

            def psi_and_report() -> tuple[str | None, dict[str, Any]]:
                return correction_for(report), report.to_dict()

            if not hard_failure(report):
                return Decision.deferred("allow", [c.to_dict() for c in inp.calls],
                                         "passed SAAG stages 1-2 (no LLM reviewer; any notes in feedback)",
                                         psi_and_report, latency_s=clock.seconds)
            if self.reviser is None:
                return Decision.deferred("block", None, f"{stage_summary(report)}; no reviser to revise it",
                                         psi_and_report, latency_s=clock.seconds)
        key = review_key(self.config, inp.messages, inp.tools, [c.to_dict() for c in inp.calls])
        hit = self.cache.get(key)
        if hit is not None:
            data = dict(hit, cached=True, cost_usd=0.0, latency_s=clock.seconds)
            try:
                return Decision.from_dict(data)
            except (TypeError, ValueError):
                pass  # an entry from another version: review again
        return inp, report, key

    def _verified_or_blocked(self, inp: GuardInput, report: PredictionReport, clock: LatencyClock) -> Decision:
        """``saag+abstain``: allow a call set the cascade verifies, block any other with its reason."""
        from saag_opt.agents.mechanisms.verified import verified, withheld_because  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

        if verified(report):
            return Decision.deferred("allow", [c.to_dict() for c in inp.calls],
                                     "saag+abstain: the SAAG cascade verified the calls",
                                     lambda: (None, report.to_dict()), latency_s=clock.seconds)
        reason, feedback = withheld_because(report)
        return Decision.deferred("block", None, f"saag+abstain: {reason}", lambda: (feedback, report.to_dict()),
                                 latency_s=clock.seconds)

    def _check(self, inp: GuardInput, calls: Any) -> PredictionReport:
        return check_calls(calls, inp.registry, inp.grounding_text, **self._cascade_options)

    def _run_lm(self, inp: GuardInput, report: PredictionReport, flow: FlowReport | None = None) -> tuple[_Ruled, float]:
        """``guard.mechanism`` on the proposed calls, with its cost; an exception becomes an ``on_error`` ruling.

        ``flow``: the injection rule's data-flow trace of the proposed calls, shown to the reviewer as it is.
        """
        import dspy  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

        from saag_opt.agents.mechanisms.guarded import LiveTurn  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

        with dspy.track_usage() as usage:
            try:
                turn = LiveTurn(proposed=inp.tentative, report=report, registry=inp.registry,
                                grounding_text=inp.grounding_text, on_error=self.on_error, why=self._why,
                                grounding=self.grounding, sources=inp.sources,
                                injection_policy=self.policy, flow=flow)
                out = self.mechanism.run(inp.example, self.reviser, self.reviewer, ctx=turn)
                if out.ruling is None:
                    raise TypeError(f"{self.mechanism.spec} returned no ruling")
                ruled = _Ruled(out.ruling, out.final, _decision_rounds(out.rounds))
            except CostCapReached:
                raise  # the caller's run is out of budget: not a reviewer failure on_error could answer
            except Exception as exc:  # noqa: BLE001 - a guard never throws into the agent loop
                ruled = self._failed(inp, report, self._why(exc))
        return ruled, self._dollars(usage.get_total_tokens())

    def _why(self, exc: BaseException) -> str:
        """A request timeout reads like the decision timeout it raced (the client's bound is the same)."""
        if self.timeout is not None and _is_timeout(exc):
            return f"review timed out after {self.timeout:g} s"
        return describe_error(exc)

    def _failed(self, inp: GuardInput, report: PredictionReport, error: str) -> _Ruled:
        """``on_error`` outside the loop (a timeout, an unexpected failure): the loop's own rule."""
        return _Ruled(failed_review(report, error, self.on_error), inp.tentative, [])

    def _finish(self, inp: GuardInput, report: PredictionReport, key: str, outcome: _Ruled, cost: float,
                clock: LatencyClock) -> Decision:
        ruling = outcome.ruling
        calls = None
        if ruling.action == "allow":
            calls = [c.to_dict() for c in inp.calls]
        elif ruling.action == "revise":
            calls = _with_ids(outcome.final, inp)
        revision = ruling.revision_report.to_dict() if ruling.revision_report is not None else None
        decision = Decision(ruling.action, calls, ruling.feedback, ruling.reason, report.to_dict(),
                            ruling.reviewed, round(cost, 10), clock.seconds, ruling.error,
                            False, revision, outcome.rounds, provenance=ruling.provenance)
        if ruling.cacheable and ruling.error is None:
            self.cache.put(key, decision.to_dict())
        return decision

    def _dollars(self, totals: dict[str, Any]) -> float:
        dollars = 0.0
        for model, usage in (totals or {}).items():
            spec = self.models.get(model)
            if spec is None:
                continue
            prompt, completion, cached = usage_numbers(usage)
            dollars += price_call(spec, prompt, completion, cached) or 0.0
        return dollars

    # -- adapters (each imports its framework lazily) ----------------------------------------------

    def openai_turn(self, messages: Any, tools: Any, message: Any) -> Any:
        """Plain OpenAI loop: see ``saag_opt.runtime.openai_loop.guard_turn``."""
        from saag_opt.runtime.openai_loop import guard_turn  # noqa: PLC0415 - facade: docs/design.md §1.2

        return guard_turn(self, messages, tools, message)

    def openai_agents_guardrail(self, **options: Any) -> Any:
        """OpenAI Agents SDK ``tool_input_guardrail``: see ``saag_opt.runtime.openai_agents``."""
        from saag_opt.runtime.openai_agents import tool_input_guardrail  # noqa: PLC0415 - facade: docs/design.md §1.2

        return tool_input_guardrail(self, **options)

    def wrap_react(self, react: Any) -> Any:
        """dspy.ReAct with every tool reviewed before it runs: see ``saag_opt.runtime.dspy_react``."""
        from saag_opt.runtime.dspy_react import wrap_react  # noqa: PLC0415 - facade: docs/design.md §1.2

        return wrap_react(self, react)

    def langchain_middleware(self, tools: Any = None) -> Any:
        """LangChain v1 ``wrap_tool_call`` middleware: see ``saag_opt.runtime.langchain``."""
        from saag_opt.runtime.langchain import guard_middleware  # noqa: PLC0415 - facade: docs/design.md §1.2

        return guard_middleware(self, tools)


def _with_ids(prediction: Prediction, inp: GuardInput) -> list[dict[str, Any]]:
    """Revised calls keep the id of the proposed call at their position; extra ones get a suffix."""
    ids = [c.id for c in inp.calls]
    base = next((i for i in ids if i), "call")
    out = []
    for index, call in enumerate(prediction.calls):
        call_id = ids[index] if index < len(ids) and ids[index] else f"{base}_rev{index}"
        out.append({"id": call_id, "name": call.name, "arguments": dict(call.arguments)})
    return out


def _is_timeout(exc: BaseException | None) -> bool:
    """A timeout anywhere in the chain (openai, litellm and httpx name theirs ``*Timeout*``)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _decision_rounds(rounds: tuple[ReviewRound, ...]) -> list[dict[str, Any]]:
    """``Decision.rounds``: each verdict the turn was revised or allowed on (a bare reviewer failure is none)."""
    return [{"calls": [c.to_dict() for c in r.tentative.calls], "verdict": "approve" if r.verdict == "approve" else "reject",
             "feedback": r.feedback}
            for r in rounds if r.verdict != "reviewer_failed" or r.feedback is not None]


def _label(lm: Any) -> str:
    """The model a cache key names: the spec text, else the dspy model string."""
    spec = getattr(lm, "spec", None)
    return str(spec.text if spec is not None else getattr(lm, "model", type(lm).__name__))


def _cascade_options(grounding: str | None) -> dict[str, Any]:
    """``grounding=`` for ``check_calls``: the intervention default (calibrated) unless a mode is named."""
    mode = INTERVENTION_GROUNDING if grounding is None else grounding
    if mode not in get_args(ModeName):
        raise ConfigError(f"grounding must be one of {', '.join(get_args(ModeName))}, got {grounding!r}")
    return {"grounding": mode}


def _open(model: Any, role: str, timeout: float | None, retries: int, ledger: CostLedger | None = None) -> Any:
    """An LM for a spec string (booked in ``ledger``, else its own), or the given ``dspy.LM`` as is."""
    import dspy  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

    if isinstance(model, dspy.LM):
        return model
    from saag_opt.lm import open_lm, parse_model_spec  # noqa: PLC0415 - heavy: dspy; importing the guard stays light

    return open_lm(parse_model_spec(model), role=role, ledger=ledger,
                   **call_options(retries=retries, retry_base_delay=0.5, request_timeout=timeout))


def _cache(cache: bool | str | os.PathLike[str]) -> ReviewCache:
    if cache is False:
        return ReviewCache()
    if cache is True:
        return ReviewCache(cache_dir() / "guard-reviews")
    return ReviewCache(Path(cache))


__all__ = ["Guard", "OnError"]
