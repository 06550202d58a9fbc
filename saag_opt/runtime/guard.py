"""``Guard``: a tuned reviewer in front of a live agent's tool calls (DESIGN section 14).

One decision per set of proposed calls (an assistant turn, or one call in frameworks that guard
call by call):

1. The gold-free SAAG cascade (``check_calls``) runs on the calls. With ``gate=True`` a call set
   that passes cleanly (no correction, not even drift) is allowed without an LLM call.
2. Otherwise the reviewer (``r<N>``: at most N reviews) judges the calls. A rejection is revised:
   the reviser (the base agent's code path, by default on the reviewer's model) rewrites the calls
   with the feedback as a system message, as GEPA tuned the prompt (agents/base.py). The revision
   after the N-th rejection is not reviewed again (the ``r<N>`` reading of agents/mechanisms.py).
3. Rules that hold whatever the reviewer says: a call that fails stage 1 or 2 (unknown function,
   missing required or spurious parameter, unreadable arguments) never runs as is; it is revised
   with the psi feedback, or blocked. A revision must pass stages 1-2 and make a call, else block.
   Without a reviser (``revise=False``, or no model) every rejection is a block with feedback.
4. ``on_error`` decides what a reviewer failure does (timeout, unreachable server, unusable
   reply): ``allow`` runs the proposed calls unreviewed, ``block`` runs nothing; ``decision.error``
   and ``decision.reason`` say so. A call failing stage 1-2 is still revised from the psi feedback
   alone, or blocked: ``on_error="allow"`` never lets it through.
5. Bad input (unreadable tools, messages or calls) is a block whose reason names the problem; no
   exception reaches the agent loop.

``timeout`` bounds the LM part of one decision (reviews and revisions together); the work runs on
a small thread pool so that the caller gets its decision on time even if a request hangs.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from saag_opt.errors import ConfigError
from saag_opt.model import Prediction
from saag_opt.runtime.cache import ReviewCache, review_key
from saag_opt.runtime.decision import Action, Decision
from saag_opt.runtime.inputs import (
    GuardInput,
    GuardInputError,
    RegistryMemo,
    read_input,
)
from saag_opt.saag import check_calls, correction_for
from saag_opt.saag.calibration import INTERVENTION_GROUNDING, ModeName

if TYPE_CHECKING:
    from saag_opt.agents import BaseAgent, Reviewer
    from saag_opt.artifacts import PromptVersion
    from saag_opt.lm.latency import LatencyClock
    from saag_opt.saag import PredictionReport

OnError = Literal["allow", "block"]


@dataclass
class _Outcome:
    """What the LM part decided, before costs and timing are added."""

    action: Action
    prediction: Prediction | None
    feedback: str | None
    reason: str
    reviewed: bool = False
    error: str | None = None
    revision_report: dict[str, Any] | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    cacheable: bool = True


def _hard_failure(report: PredictionReport) -> bool:
    """Some call failed stage 1 (registry) or 2 (structure): it cannot run as proposed."""
    return any(call.stage_reached in (1, 2) for call in report.calls)


def _stage_summary(report: PredictionReport) -> str:
    stages = sorted({str(c.stage_reached) for c in report.calls if c.stage_reached in (1, 2)})
    return f"failed SAAG stage {'/'.join(stages)}"


class Guard:
    """Reviews proposed tool calls before they run; build it with ``Guard.load``.

    ``review(messages, tools, tool_calls)`` and ``await areview(...)`` return a ``Decision`` and
    never raise for bad input or a failing reviewer. ``close()`` (or ``with``) stops the pool.
    """

    def __init__(self, *, reviewer: Reviewer | None = None, reviser: BaseAgent | None = None,
                 prompt_sha256: str | None = None, prompt_label: str | None = None, reviews: int = 1,
                 gate: bool = True, on_error: OnError = "allow", timeout: float | None = 20.0,
                 revise: bool = True, grounding: str | None = None, cache: ReviewCache | None = None,
                 models: dict[str, Any] | None = None, labels: tuple[str | None, str | None] = (None, None)) -> None:
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
        self._cascade_options = _cascade_options(grounding)
        self._pool: ThreadPoolExecutor | None = None
        self.registries = RegistryMemo()

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def load(cls, prompt: str | os.PathLike[str] | PromptVersion = "reviewer@v2", *,
             reviewer: Any = None, mechanism: str = "r1", gate: bool = True, on_error: OnError = "allow",
             timeout: float | None = 20.0, reviser: Any = None, revise: bool = True,
             store: str | os.PathLike[str] | None = None, cache: bool | str | os.PathLike[str] = True,
             grounding: str | None = None, retries: int = 2, saag_informed: bool = False) -> Guard:
        """A guard running prompt ``prompt`` on model ``reviewer``.

        Args:
            prompt: ``reviewer@v2``, ``reviewer@best`` (the CLI's store, or ``store``), a version
                JSON, or an exported prompt file (txt, dspy, openai, mlflow).
            reviewer: model spec (``gpt-5-mini``, ``local``, ``openai/<m>@URL``) or a ``dspy.LM``;
                None = a cascade-only guard (mechanism ``none``).
            mechanism: ``r<N>`` (at most N reviews), ``gate+r<N>`` (same, gate on), or ``none``.
            gate: skip the LLM when the cascade passes cleanly.
            on_error: ``allow`` or ``block`` on a reviewer timeout, dead server or unusable reply.
            timeout: seconds for the LM part of one decision (None = no bound).
            reviser: model that rewrites rejected calls (default: the reviewer's model).
            revise: False = a rejection blocks with feedback (the host model proposes again).
            store: the prompt store root (default: ``$SAAG_OPT_PROMPTS``, else ``./prompts``).
            cache: True = review cache under the saag-opt cache dir; a path = there; False = memory.
            grounding: stage-3 mode of the gold-free cascade (None = ``INTERVENTION_GROUNDING``, calibrated).
            retries: extra attempts per LM request (backoff), within ``timeout``.
            saag_informed: the reviewer also sees the SAAG report (experimental reviewer).

        Raises:
            ConfigError: a bad mechanism, model spec or option. ArtifactError: unknown prompt.
            ModelUnavailableError: a missing key or model runtime (checked here, not per review).
        """
        from saag_opt.agents import Gate, NoReview, Progressive, parse_mechanism

        parsed = parse_mechanism(mechanism)
        if isinstance(parsed, Gate) and isinstance(parsed.inner, Progressive):
            gate, reviews = True, parsed.inner.n
        elif isinstance(parsed, Progressive):
            reviews = parsed.n
        elif isinstance(parsed, NoReview):
            reviews, reviewer = 1, None
        else:
            raise ConfigError(f"mechanism {mechanism!r}: a runtime guard runs r<N>, gate+r<N> or none")
        _cascade_options(grounding)  # fail here, not per review
        ledger_models: dict[str, Any] = {}
        labels: list[str | None] = [None, None]
        review_module, loaded = None, None
        if reviewer is not None:
            from saag_opt.agents.setup import bind_reviewer  # evaluate's and GEPA's reviewer, on this LM
            from saag_opt.runtime.prompt import load_prompt

            loaded = load_prompt(prompt, store)
            review_lm = _open(reviewer, "reviewer", timeout, retries)
            review_module = bind_reviewer(loaded.instructions, review_lm, saag_informed=saag_informed,
                                          grounding=_cascade_options(grounding)["grounding"])
            ledger_models[str(review_lm.model)] = getattr(review_lm, "spec", None)
            labels[0] = _label(review_lm)
        reviser_agent = None
        reviser_model = reviser if reviser is not None else reviewer
        if revise and reviser_model is not None:
            from saag_opt.agents import BaseAgent

            reviser_lm = _open(reviser_model, "reviser", timeout, retries)
            reviser_agent = BaseAgent(reviser_lm, ledger=getattr(reviser_lm, "ledger", None))
            ledger_models[str(reviser_lm.model)] = getattr(reviser_lm, "spec", None)
            labels[1] = _label(reviser_lm)
        return cls(reviewer=review_module, reviser=reviser_agent,
                   prompt_sha256=loaded.sha256 if loaded else None, prompt_label=loaded.label if loaded else None,
                   reviews=reviews, gate=gate, on_error=on_error, timeout=timeout, revise=revise,
                   grounding=grounding, cache=_cache(cache), models=ledger_models, labels=(labels[0], labels[1]))

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
                "saag_informed": bool(getattr(self.reviewer, "experimental", False))}

    # -- reviewing ---------------------------------------------------------------------------------

    def review(self, messages: Any, tools: Any, tool_calls: Any) -> Decision:
        """Decide on ``tool_calls`` (see the module docstring); never raises for bad input."""
        from saag_opt.lm.latency import lm_clock  # lazy: importing the guard does not import dspy

        with lm_clock() as clock:
            early = self._prepare(messages, tools, tool_calls, clock)
            if isinstance(early, Decision):
                return early
            inp, report, key = early
            if self.timeout is None:
                outcome, cost = self._run_lm(inp, report)
            else:  # the worker runs in a copy of this context, so its cache hits reach the clock
                future = self._executor().submit(contextvars.copy_context().run, self._run_lm, inp, report)
                try:
                    outcome, cost = future.result(timeout=self.timeout)
                except FutureTimeout:
                    outcome, cost = self._failed(inp, report, f"review timed out after {self.timeout:g} s"), 0.0
            return self._finish(inp, report, key, outcome, cost, clock)

    async def areview(self, messages: Any, tools: Any, tool_calls: Any) -> Decision:
        """Async twin of ``review``: the gate and cache hits answer inline, LM work on the pool."""
        from saag_opt.lm.latency import lm_clock

        with lm_clock() as clock:
            early = self._prepare(messages, tools, tool_calls, clock)
            if isinstance(early, Decision):
                return early
            inp, report, key = early
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(self._executor(), contextvars.copy_context().run, self._run_lm, inp, report)
            try:
                outcome, cost = await asyncio.wait_for(work, timeout=self.timeout)
            except asyncio.TimeoutError:
                outcome, cost = self._failed(inp, report, f"review timed out after {self.timeout:g} s"), 0.0
            return self._finish(inp, report, key, outcome, cost, clock)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="saag-guard")
        return self._pool

    def _prepare(self, messages: Any, tools: Any, tool_calls: Any,
                 clock: LatencyClock) -> Decision | tuple[GuardInput, PredictionReport, str]:
        """Read the input, run the cascade and the gate; a Decision when no LM is needed."""
        try:
            inp = read_input(messages, tools, tool_calls, self.registries)
        except GuardInputError as exc:
            return Decision("block", None, f"The tool calls could not be checked: {exc}.", f"bad input: {exc}",
                            latency_s=clock.seconds)
        if not inp.calls:
            return Decision("allow", [], None, "no tool calls to review", latency_s=clock.seconds)
        report = self._check(inp, [c.for_cascade() for c in inp.calls])
        if self.gate and report.clean:
            return Decision.deferred("allow", [c.to_dict() for c in inp.calls], "gate: the SAAG cascade passed cleanly",
                                     lambda: (None, report.to_dict()), latency_s=clock.seconds)
        if self.reviewer is None:  # cascade-only: stage 1-2 failures are revised or blocked, the rest runs
            def psi_and_report() -> tuple[str | None, dict[str, Any]]:
                return correction_for(report), report.to_dict()

            if not _hard_failure(report):
                return Decision.deferred("allow", [c.to_dict() for c in inp.calls],
                                         "passed SAAG stages 1-2 (no LLM reviewer; any notes in feedback)",
                                         psi_and_report, latency_s=clock.seconds)
            if self.reviser is None:
                return Decision.deferred("block", None, f"{_stage_summary(report)}; no reviser to revise it",
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

    def _check(self, inp: GuardInput, calls: Any) -> PredictionReport:
        return check_calls(calls, inp.registry, inp.grounding_text, **self._cascade_options)

    def _run_lm(self, inp: GuardInput, report: PredictionReport) -> tuple[_Outcome, float]:
        """The reviews and revisions, with their cost; failures become an ``on_error`` outcome."""
        import dspy

        with dspy.track_usage() as usage:
            try:
                outcome = self._lm_rounds(inp, report)
            except Exception as exc:  # noqa: BLE001 - a guard never throws into the agent loop
                outcome = self._failed(inp, report, self._why(exc))
        return outcome, self._dollars(usage.get_total_tokens())

    def _lm_rounds(self, inp: GuardInput, report: PredictionReport) -> _Outcome:
        from saag_opt.agents import FeedbackTurn
        from saag_opt.agents.mechanisms import DEFAULT_REJECTION

        current, current_report = inp.tentative, report
        history: list[FeedbackTurn] = []
        rounds: list[dict[str, Any]] = []
        reviewed, error, text = False, None, ""
        for index in range(self.reviews):
            hard = _hard_failure(current_report)
            verdict, failure = self._verdict(inp, current)
            if verdict is not None:
                reviewed = True
            elif failure is not None:
                error = failure
                if not hard:
                    if index == 0:
                        return self._failed(inp, report, failure, rounds)
                    break  # a revision that passed stages 1-2 runs, as after the N-th review
            elif not hard:
                break  # no LLM reviewer: a revision that passes stages 1-2 runs
            calls_now = [c.to_dict() for c in current.calls]
            if verdict is not None and not verdict.error and not hard:
                rounds.append({"calls": calls_now, "verdict": "approve", "feedback": verdict.feedback or None})
                if index == 0:
                    return _Outcome("allow", current, verdict.feedback or None, "the reviewer approved",
                                    reviewed=True, rounds=rounds)
                return self._revised(current, current_report, text, "the reviewer approved the revision",
                                     reviewed, error, rounds)
            parts = [verdict.feedback or DEFAULT_REJECTION] if verdict is not None and verdict.error else []
            if hard:
                parts.append(correction_for(current_report) or "")
            text = "\n".join(p for p in parts if p)
            why = "the reviewer rejected it" if verdict is not None and verdict.error else ""
            if hard:
                why = " and ".join(filter(None, [why, _stage_summary(current_report)]))
            rounds.append({"calls": calls_now, "verdict": "reject", "feedback": text})
            if self.reviser is None:
                return _Outcome("block", None, text, f"{why}; no reviser (revise=False)", reviewed, error,
                                rounds=rounds)
            try:
                revision = self.reviser.propose(inp.example, feedback=[*history, FeedbackTurn(current, text)])
            except Exception as exc:  # noqa: BLE001 - a failed revision blocks, with its reason
                return _Outcome("block", None, text, f"{why}; the revision failed: {_describe(exc)}", reviewed,
                                error or _describe(exc), rounds=rounds, cacheable=False)
            history.append(FeedbackTurn(current, text))
            current = revision.prediction
            current_report = self._check(inp, list(current.calls))
        return self._revised(current, current_report, text, f"revised after {len(history)} rejection(s)",
                             reviewed, error, rounds)

    def _revised(self, revision: Prediction, report: PredictionReport, text: str, why: str, reviewed: bool,
                 error: str | None, rounds: list[dict[str, Any]]) -> _Outcome:
        """A revision runs only if it makes a call and passes stages 1-2; else block."""
        if not revision.calls:
            return _Outcome("block", None, text, f"{why}, but the revision makes no call", reviewed, error,
                            rounds=rounds)
        if _hard_failure(report):
            more = correction_for(report) or ""
            return _Outcome("block", None, "\n".join(filter(None, [text, more])),
                            f"{why}, but the revision {_stage_summary(report)}", reviewed, error,
                            report.to_dict(), rounds)
        return _Outcome("revise", revision, text or None, why, reviewed, error, report.to_dict(), rounds)

    def _verdict(self, inp: GuardInput, prediction: Prediction) -> tuple[Any, str | None]:
        """The reviewer's verdict, or None and why it could not be had."""
        if self.reviewer is None:
            return None, None
        try:
            verdict = self.reviewer.review_call(inp.example, prediction)
        except Exception as exc:  # noqa: BLE001 - any reviewer failure goes to on_error
            return None, self._why(exc)
        if verdict.failed:
            return None, f"unusable reviewer reply ({verdict.failed})"
        return verdict, None

    def _why(self, exc: BaseException) -> str:
        """A request timeout reads like the decision timeout it raced (the client's bound is the same)."""
        if self.timeout is not None and _is_timeout(exc):
            return f"review timed out after {self.timeout:g} s"
        return _describe(exc)

    def _failed(self, inp: GuardInput, report: PredictionReport, error: str,
                rounds: list[dict[str, Any]] | None = None) -> _Outcome:
        """``on_error``: run the proposed calls unreviewed, or nothing; stage 1-2 failures never run."""
        if _hard_failure(report):
            return _Outcome("block", None, correction_for(report),
                            f"{_stage_summary(report)} and the review failed ({error})", error=error,
                            rounds=rounds or [], cacheable=False)
        if self.on_error == "allow":
            return _Outcome("allow", inp.tentative, None, f"reviewer failed ({error}); on_error=allow: runs unreviewed",
                            error=error, rounds=rounds or [], cacheable=False)
        return _Outcome("block", None, f"The tool call could not be reviewed ({error}); it was not run.",
                        f"reviewer failed ({error}); on_error=block", error=error, rounds=rounds or [],
                        cacheable=False)

    def _finish(self, inp: GuardInput, report: PredictionReport, key: str, outcome: _Outcome, cost: float,
                clock: LatencyClock) -> Decision:
        calls = None
        if outcome.action == "allow":
            calls = [c.to_dict() for c in inp.calls]
        elif outcome.action == "revise" and outcome.prediction is not None:
            calls = _with_ids(outcome.prediction, inp)
        decision = Decision(outcome.action, calls, outcome.feedback, outcome.reason, report.to_dict(),
                            outcome.reviewed, round(cost, 10), clock.seconds, outcome.error,
                            False, outcome.revision_report, outcome.rounds)
        if outcome.cacheable and outcome.error is None:
            self.cache.put(key, decision.to_dict())
        return decision

    def _dollars(self, totals: dict[str, Any]) -> float:
        from saag_opt.lm import price_call, usage_numbers

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
        from saag_opt.runtime.openai_loop import guard_turn

        return guard_turn(self, messages, tools, message)

    def openai_agents_guardrail(self, **options: Any) -> Any:
        """OpenAI Agents SDK ``tool_input_guardrail``: see ``saag_opt.runtime.openai_agents``."""
        from saag_opt.runtime.openai_agents import tool_input_guardrail

        return tool_input_guardrail(self, **options)

    def wrap_react(self, react: Any) -> Any:
        """dspy.ReAct with every tool reviewed before it runs: see ``saag_opt.runtime.dspy_react``."""
        from saag_opt.runtime.dspy_react import wrap_react

        return wrap_react(self, react)

    def langchain_middleware(self, tools: Any = None) -> Any:
        """LangChain v1 ``wrap_tool_call`` middleware: see ``saag_opt.runtime.langchain``."""
        from saag_opt.runtime.langchain import guard_middleware

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


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


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


def _open(model: Any, role: str, timeout: float | None, retries: int) -> Any:
    """An LM for a spec string (booked in its own ledger), or the given ``dspy.LM`` as is."""
    import dspy

    if isinstance(model, dspy.LM):
        return model
    from saag_opt.lm import open_lm, parse_model_spec
    from saag_opt.lm.retry import call_options  # the call options every verb's set-up opens its LMs with

    return open_lm(parse_model_spec(model), role=role,
                   **call_options(retries=retries, retry_base_delay=0.5, request_timeout=timeout))


def _cache(cache: bool | str | os.PathLike[str]) -> ReviewCache:
    if cache is False:
        return ReviewCache()
    if cache is True:
        from saag_opt.paths import cache_dir

        return ReviewCache(cache_dir() / "guard-reviews")
    return ReviewCache(Path(cache))


__all__ = ["Guard", "OnError"]
