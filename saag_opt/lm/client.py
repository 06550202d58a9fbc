"""``open_lm`` and ``chat_completion``: every LM call of saag-opt goes through one ``dspy.LM`` subclass.

Design (docs/design.md §5, §9, §10):

* One path. Base-agent calls (native tools, schema-constrained JSON) and reviewer/reflection calls
  all use ``dspy.LM``, so one dspy disk cache covers all of them and one hook counts their cost.
  ``dspy.LM`` accepts ``tools=``, ``tool_choice=``, ``response_format=`` and returns
  ``{"text", "tool_calls"}`` dicts (measured with dspy 3.4.1 on the lm15 engine).
* The hook. ``SaagLM.__call__`` runs dspy's own call inside ``dspy.context(usage_tracker=probe)``.
  dspy adds usage to the tracker only for real (non-cached) calls, so the probe tells spend from
  cache hits without private APIs; it forwards to any outer tracker (``dspy.track_usage`` keeps
  working). ``forward`` is *not* overridden: that would switch dspy to its deprecated legacy path.
* Retries. dspy's ``num_retries`` is set to 0 and ``with_retries`` wraps each call (retry.py says why).
* Batches. With ``batch=`` (``evaluate --batch``) a call goes through the rounds of ``batching``
  (the Batch API, at ``BATCH_PRICE_FACTOR`` of the price, reserved and booked so); a request its
  batch did not answer is sent again directly, at the full price, within the same attempt.
* Latency. A real call's wall time is remembered by request hash (``latency.CallTimes``, beside the
  LM cache); a cache hit reports it to the open ``lm_clock`` blocks, so reported latency does not
  depend on what an earlier run cached. The ledger keeps the real (~0 s) time of a hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import (
    ContextWindowExceededError,
    LMAuthError,
    LMBillingError,
    LMTransportError,
    LMUnsupportedModelError,
)
from dspy.utils.usage_tracker import UsageTracker

from saag_opt import telemetry
from saag_opt.errors import ConfigError, ModelUnavailableError, SaagOptError
from saag_opt.lm.backends import MISSING_KEY_MESSAGE, Endpoint, get_backend, parse_model_spec
from saag_opt.lm.batch.api import BatchClient
from saag_opt.lm.batch.rounds import BatchFallback, BatchRounds, BatchRoute, batch_failure
from saag_opt.lm.dspy_call_path import lighten_dspy_call_path
from saag_opt.lm.inflight import lock_dir, one_at_a_time
from saag_opt.lm.latency import CallTimes, note_replay
from saag_opt.lm.request_rules import REASONING_MIN_TOKENS, is_reasoning_model, shape_request
from saag_opt.lm.retry import (
    CONTEXT_OVERFLOW,
    ContextOverflowError,
    LMCallError,
    MalformedReplyError,
    RetryPolicy,
    backoff_delay,
    is_transient,
    with_retries,
)
from saag_opt.lm.specs import ModelSpec
from saag_opt.lm.spend.accounting import (
    CostLedger,
    price_call,
    prompt_token_bound,
    usage_numbers,
    worst_case_dollars,
)
from saag_opt.lm.spend.cap import Hold

_RETRY_MARK = "#retry"  # in the rollout id of a caller's retry; see SaagLM._salted
# lm15 says "failed to connect to host:port: [Errno 111] Connection refused"; DNS failures look alike.
_CONNECT_FAILURE = re.compile(r"failed to connect|connection refused|name or service not known|nodename", re.I)
log = logging.getLogger(__name__)
_TRANSPORT_KEYS = ["api_key", "api_base", "base_url", "cache", "num_retries", "timeout", "headers", "extra_headers"]
"""Call options that do not change the reply: left out of the request hash (and never stored)."""
_CALL_TIMES: dict[Path | None, CallTimes] = {}
_CALL_TIMES_LOCK = threading.Lock()


@dataclass(frozen=True)
class CallInfo:
    """What one logical call cost: usage summed over retries, cache hit or not, wall seconds."""

    usage: dict[str, int]
    cached: bool
    seconds: float
    dollars: float | None
    attempts: int


class _UsageProbe(UsageTracker):
    """Sees usage only for real calls (dspy skips the tracker on cache hits); forwards to an outer tracker."""

    def __init__(self, parent: UsageTracker | None) -> None:
        super().__init__()
        self.parent = parent
        self.called = False

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        self.called = True
        super().add_usage(lm, usage_entry)
        if self.parent is not None:
            self.parent.add_usage(lm, usage_entry)

    def numbers(self) -> tuple[int, int, int]:
        totals = [usage_numbers(entry) for entries in self.usage_data.values() for entry in entries]
        return tuple(sum(col) for col in zip(*totals)) if totals else (0, 0, 0)  # type: ignore[return-value]


class SaagLM(dspy.LM):
    """A ``dspy.LM`` that retries transient faults and books every call in a ``CostLedger``."""

    def __init__(self, endpoint: Endpoint, *, spec: ModelSpec, role: str, ledger: CostLedger,
                 retry: RetryPolicy, batch: BatchRounds | None = None, **kwargs: Any) -> None:
        self.cache_namespace = endpoint.cache_namespace
        client = {"api_base": endpoint.api_base, "api_key": endpoint.api_key}
        super().__init__(endpoint.model, num_retries=0, **{k: v for k, v in client.items() if v}, **kwargs)
        self.spec, self.role, self.ledger, self.retry = spec, role, ledger, retry
        if endpoint.cache_namespace is not None:
            # dspy's cache key ignores api_base; rollout_id is part of the key and stripped before sending.
            self.kwargs["rollout_id"] = endpoint.cache_namespace
        self.batch_route: BatchRoute | None = None
        if batch is not None:  # after the options are final: the twin must make the same cache keys
            self.batch_route = BatchRoute(self, batch, BatchClient(endpoint.api_base, endpoint.api_key or ""))

    def _warn_zero_temp_rollout(self, temperature: float | None, rollout_id: Any) -> None:
        """Our cache namespace is not a rollout; keep dspy's warning for user-set rollout ids only."""
        ours = rollout_id == getattr(self, "cache_namespace", None) or _RETRY_MARK in str(rollout_id)
        if not ours:
            super()._warn_zero_temp_rollout(temperature, rollout_id)

    def _salted(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Make ``saag_retry=N`` (a caller's retry of an unreadable answer) part of the cache key.

        The retry is a new request the first time, and replays from the cache on a re-run.
        """
        retry = kwargs.pop("saag_retry", None)
        if not retry:
            return kwargs
        namespace = self.kwargs.get("rollout_id")
        return {**kwargs, "rollout_id": f"{'' if namespace is None else namespace}{_RETRY_MARK}{retry}"}

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        """The completions only (dspy's ``LM.__call__`` contract)."""
        return self.call_with_info(prompt, messages=messages, **kwargs)[0]

    def call_with_info(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> tuple[Any, CallInfo]:
        """Like ``__call__`` but also returns the ``CallInfo`` booked in the ledger, in a ``chat {model}`` span.

        Raises:
            ModelUnavailableError, LMCallError, ConfigError: see ``_call_with_info``.
        """
        with telemetry.span(f"chat {self.spec.model}", self._span_attributes(prompt, messages)) as current:
            outputs, info = self._call_with_info(prompt, messages=messages, **kwargs)
            self._span_outcome(current, outputs, info)
        return outputs, info

    def _span_attributes(self, prompt: Any, messages: Any) -> dict[str, Any]:
        """OpenTelemetry GenAI attributes known before the call (the prompt only with content capture on)."""
        return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai" if self.spec.kind == "openai"
                else self.spec.kind, "gen_ai.request.model": self.spec.model, "saag_opt.role": self.role,
                "gen_ai.input.messages": telemetry.content(messages if messages is not None else prompt)}

    @staticmethod
    def _span_outcome(current: Any, outputs: Any, info: CallInfo) -> None:
        telemetry.set_attributes(current, {
            "gen_ai.usage.input_tokens": info.usage.get("prompt_tokens", 0),
            "gen_ai.usage.output_tokens": info.usage.get("completion_tokens", 0),
            "saag_opt.cost_usd": info.dollars, "saag_opt.cached": info.cached, "saag_opt.attempts": info.attempts,
            "gen_ai.output.messages": telemetry.content(outputs)})

    def _call_with_info(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> tuple[Any, CallInfo]:
        """The call itself: shaped for the model, retried, booked.

        Raises:
            ModelUnavailableError: server unreachable or key rejected (systemic).
            LMCallError: still failing after the retry policy (per-example failure).
            ConfigError: an option the model does not take (``request_rules``), before any call.
        """
        kwargs = shape_request(self.spec, self._salted(kwargs))
        probes: list[_UsageProbe] = []
        batched: list[bool] = []  # per probe: answered through a batch
        started = time.monotonic()
        key = _OnceKey(self, prompt, messages, kwargs)  # the in-flight lock and the time store share one hash

        def attempt() -> Any:
            call_kwargs = dict(kwargs)
            if probes and isinstance(errors[-1], MalformedReplyError):
                call_kwargs["cache"] = False  # do not replay a cached empty reply
            if self.batch_route is not None:
                try:
                    return send(call_kwargs, batch=True)
                except Exception as exc:
                    failure = batch_failure(exc)
                    if failure is not None and not isinstance(failure, BatchFallback):
                        raise failure from exc  # systemic (no Batch API, cannot poll) or a stop
                    if failure is None:
                        raise
                    log.info("%s: sent directly: %s", self.spec.label, failure)
            return send(call_kwargs, batch=False)

        def send(call_kwargs: dict[str, Any], *, batch: bool) -> Any:
            hold = self._reserve(prompt, messages, call_kwargs, batch=batch)  # before the probe: a refused call is no call
            probe = _UsageProbe(dspy.settings.usage_tracker)
            probes.append(probe)
            batched.append(batch)
            with _settled(hold, probe, self.spec, batch=batch), dspy.context(usage_tracker=probe):
                if batch and self.batch_route is not None:  # rounds dedupe identical requests: no in-flight lock
                    outputs = self.batch_route.call(prompt, messages, **call_kwargs)
                else:
                    with self._one_at_a_time(call_kwargs, key):
                        outputs = super(SaagLM, self).__call__(prompt, messages=messages, **call_kwargs)
            if isinstance(outputs, list) and not any(map(_has_content, outputs)):
                raise MalformedReplyError(f"{self.spec.label}: the reply had no text and no tool calls")
            return outputs

        errors: list[BaseException] = []
        try:
            outputs = with_retries(attempt, attempts=self.retry.attempts, base_delay=self.retry.base_delay,
                                   max_delay=self.retry.max_delay, retry_on=lambda exc: _should_retry(exc, errors),
                                   on_retry=lambda n, exc, delay: errors.append(exc))
        except Exception as exc:
            if probes:
                self._book(probes, started, error=True, batched=batched)
            raise self._translate(exc, len(probes)) from exc
        info = self._book(probes, started, error=False, batched=batched)
        self._time(info, kwargs, key)
        return outputs, info

    def _one_at_a_time(self, call_kwargs: dict[str, Any], key: _OnceKey) -> Any:
        """While a cacheable request is sent, an identical one elsewhere waits for its cached reply (``inflight``)."""
        directory = lock_dir() if call_kwargs.get("cache", self.cache) else None
        digest = key() if directory is not None else None
        return one_at_a_time(digest, directory) if digest is not None else contextlib.nullcontext()

    def _reserve(self, prompt: Any, messages: Any, call_kwargs: dict[str, Any], *, batch: bool = False) -> Any:
        """Hold this attempt's worst-case price under the ledger's spend cap (None when uncapped).

        ``batch``: the attempt goes through the Batch API, so its worst case is at the batch price.

        Raises:
            CostCapReached: the cap has no room for this call.
        """
        cap = self.ledger.cap
        if cap is None:
            return None
        options = {**self.kwargs, **call_kwargs}
        max_tokens = options.get("max_tokens") or options.get("max_completion_tokens")
        tokens = prompt_token_bound(prompt, messages, options.get("tools"), options.get("tool_choice"),
                                    options.get("response_format"))
        worst = worst_case_dollars(self.spec, tokens, max_tokens, int(options.get("n") or 1), batch=batch)
        if worst is None:  # open_lm refuses such a model under a cap; this guards direct SaagLM users
            raise ConfigError(f"max_cost: the price of {self.spec.label} is unknown, so its calls cannot be capped")
        return cap.reserve(worst, what=f"a {self.role} call to {self.spec.label}")

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        """Async twin of ``__call__`` (same retries, booking and span) for ``Predict.acall`` users."""
        with telemetry.span(f"chat {self.spec.model}", self._span_attributes(prompt, messages)) as current:
            outputs, info = await self._acall(prompt, messages=messages, **kwargs)
            self._span_outcome(current, outputs, info)
        return outputs

    async def _acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> tuple[Any, CallInfo]:
        kwargs = shape_request(self.spec, self._salted(kwargs))
        probes: list[_UsageProbe] = []
        errors: list[BaseException] = []
        started = time.monotonic()
        for attempt in range(self.retry.attempts):
            call_kwargs = dict(kwargs, cache=False) if errors and isinstance(errors[-1], MalformedReplyError) else kwargs
            try:
                hold = self._reserve(prompt, messages, dict(call_kwargs))
                probe = _UsageProbe(dspy.settings.usage_tracker)
                probes.append(probe)
                with _settled(hold, probe, self.spec), dspy.context(usage_tracker=probe):
                    outputs = await super().acall(prompt, messages=messages, **call_kwargs)
                if isinstance(outputs, list) and not any(map(_has_content, outputs)):
                    raise MalformedReplyError(f"{self.spec.label}: the reply had no text and no tool calls")
                info = self._book(probes, started, error=False)
                self._time(info, kwargs, _OnceKey(self, prompt, messages, kwargs))
                return outputs, info
            except Exception as exc:
                if attempt + 1 >= self.retry.attempts or not _should_retry(exc, errors):
                    if probes:
                        self._book(probes, started, error=True)
                    raise self._translate(exc, len(probes)) from exc
                errors.append(exc)
                await asyncio.sleep(backoff_delay(attempt, self.retry, getattr(exc, "retry_after", None)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _book(self, probes: list[_UsageProbe], started: float, *, error: bool,
              batched: list[bool] | None = None) -> CallInfo:
        """Book the call: every attempt priced by its route (a batch answer at the batch price)."""
        seconds = time.monotonic() - started
        cached = not error and bool(probes) and not probes[-1].called
        routes = batched if batched is not None else [False] * len(probes)
        totals = [p.numbers() for p in probes]
        prompt, completion, cached_tokens = (sum(col) for col in zip(*totals)) if totals else (0, 0, 0)
        prices = [price_call(self.spec, *p.numbers(), batch=b) for p, b in zip(probes, routes)]
        dollars = 0.0 if cached else None if None in prices else sum(p for p in prices if p is not None)
        batch = not cached and not error and bool(routes) and routes[-1]
        falls_back = sum(1 for b, nxt in zip(routes, routes[1:]) if b and not nxt)  # a re-route is no retry
        self.ledger.record(self.role, prompt_tokens=prompt, completion_tokens=completion,
                           cached_prompt_tokens=cached_tokens, seconds=seconds, dollars=dollars, cached=cached,
                           error=error, model=self.spec.label, retries=max(0, len(probes) - 1 - falls_back),
                           batch=batch)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return CallInfo(usage, cached, seconds, dollars, len(probes))

    def _time(self, info: CallInfo, kwargs: dict[str, Any], request: _OnceKey) -> None:
        """Remember a real call's wall time; report a cache hit's original time to the open latency clocks."""
        if not info.cached and not {**self.kwargs, **kwargs}.get("cache", self.cache):
            return  # caching off: no entry will replay this call, so its time is not needed
        key = request()
        times = _call_times()
        if not info.cached:
            if key is not None:
                times.put(key, info.seconds)
            return
        note_replay(times.get(key) if key is not None else None, info.seconds)

    def _request_hash(self, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> str | None:
        """A hash of what decides dspy's cache entry (model, prompt/messages, options incl. the salted rollout id).

        Computed with dspy's own canonical hashing (``Cache.cache_key``); None if the request does not encode.
        """
        request = {"model": self.model, "model_type": self.model_type, "prompt": prompt, "messages": messages,
                   **{k: v for k, v in {**self.kwargs, **kwargs}.items() if v is not None}}
        try:
            return str(dspy.cache.cache_key({"saag_call_times": 1, **request}, _TRANSPORT_KEYS))
        except Exception:  # an option dspy cannot encode: the time stays unknown, as before
            return None

    def _translate(self, exc: Exception, attempts: int) -> Exception:
        """Systemic faults become ModelUnavailableError (one line); the rest LMCallError.

        Systemic: the key is rejected, the server is unreachable, the model or URL path does not
        exist (404), or billing refuses the call; retrying the next example cannot help. The
        provider's text is quoted with the API key masked, since a server may echo it.
        """
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = _mask_key(first, self.kwargs.get("api_key"))
        if isinstance(exc, LMAuthError):
            hint = MISSING_KEY_MESSAGE.split(": ", 1)[1] if self.spec.kind == "openai" else "check the server's key"
            return ModelUnavailableError(f"{self.spec.text}: the server rejected the API key; {hint}")
        if isinstance(exc, LMUnsupportedModelError) or getattr(exc, "status", None) == 404:
            return ModelUnavailableError(f"{self.spec.text}: the server has no such model or URL path ({first}); "
                                         "check the model name and that the URL ends in /v1")
        if isinstance(exc, LMBillingError):
            return ModelUnavailableError(f"{self.spec.text}: the provider refused the call for billing or quota "
                                         f"({first})")
        if isinstance(exc, LMTransportError) and _CONNECT_FAILURE.search(first):
            reason = "connection refused" if "refused" in first.lower() else first.rsplit(": ", 1)[-1]
            where = self.kwargs.get("api_base") or "https://api.openai.com/v1"
            return ModelUnavailableError(f"cannot reach {where}: {reason}")
        if isinstance(exc, (LMCallError, ModelUnavailableError, SaagOptError)):
            return exc
        if isinstance(exc, ContextWindowExceededError) or CONTEXT_OVERFLOW.search(first):
            return ContextOverflowError(f"{self.spec.label}: the request does not fit the model's context ({first})",
                                        attempts=attempts, cause=exc)
        return LMCallError(f"{self.spec.label}: {first} (after {attempts} attempt(s))", attempts=attempts, cause=exc)


class _OnceKey:
    """``SaagLM._request_hash`` of one call, computed on first use and then reused.

    Why: the in-flight lock (every attempt) and the time store both need it; the hash is a canonical
    JSON dump of the whole request plus a sha256, and the options that differ between attempts
    (``cache``) are not part of it.
    """

    __slots__ = ("_args", "_digest", "_done", "_lm")

    def __init__(self, lm: SaagLM, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> None:
        self._lm, self._args = lm, (prompt, messages, kwargs)
        self._digest: str | None = None
        self._done = False

    def __call__(self) -> str | None:
        if not self._done:  # None (a request that does not encode) is an answer too
            self._digest, self._done = self._lm._request_hash(*self._args), True
        return self._digest


def _call_times() -> CallTimes:
    """The time store beside the active dspy disk cache (in memory only when dspy caches in memory only)."""
    cache = dspy.cache
    where = getattr(cache, "disk_cache_dir", None) if getattr(cache, "enable_disk_cache", False) else None
    directory = Path(where) / "saag-call-seconds" if where else None
    with _CALL_TIMES_LOCK:
        if directory not in _CALL_TIMES:
            _CALL_TIMES[directory] = CallTimes(directory)
        return _CALL_TIMES[directory]


def _mask_key(text: str, key: Any) -> str:
    """``text`` with the API key replaced by ``***`` (placeholder keys of local servers are not secret)."""
    if isinstance(key, str) and len(key) >= 8 and key in text:
        return text.replace(key, "***")
    return text


@contextlib.contextmanager
def _settled(hold: Hold | None, probe: _UsageProbe, spec: ModelSpec, *, batch: bool = False) -> Iterator[None]:
    """Settle a cap hold with what the attempt inside cost (nothing to do when uncapped)."""
    if hold is None:
        yield
        return
    try:
        yield
    except BaseException as exc:
        hold.settle(_billed_if_failed(exc, probe, hold.dollars, spec, batch=batch))
        raise
    hold.settle(price_call(spec, *probe.numbers(), batch=batch) if probe.called else 0.0)


def _billed_if_failed(exc: BaseException, probe: _UsageProbe, worst: float, spec: ModelSpec, *,
                      batch: bool = False) -> float:
    """What a failed attempt may have cost.

    Its usage if the server reported one, nothing for an HTTP error status (providers do not bill
    refused requests) or a request its batch did not answer (nor failed lines), else (timeouts,
    resets, unreadable bodies: the server may have generated the reply) its worst case.
    """
    if probe.called:
        return price_call(spec, *probe.numbers(), batch=batch) or 0.0
    if isinstance(batch_failure(exc), BatchFallback):
        return 0.0
    status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
    return 0.0 if isinstance(status, int) and 400 <= status < 600 else worst


def _has_content(output: Any) -> bool:
    """An empty choice (no text, no tool call) is useless to every caller: treat it as a fault."""
    if isinstance(output, dict):
        return bool(output.get("text") or output.get("tool_calls"))
    return bool(output)


def _should_retry(exc: BaseException, earlier: list[BaseException]) -> bool:
    """Transient faults retry; a refused connection gets two more tries, not the whole backoff ladder."""
    if not is_transient(exc):
        return False
    refused = [e for e in [*earlier, exc] if _CONNECT_FAILURE.search(str(e))]
    return len(refused) <= 2


def open_lm(
    spec: ModelSpec | str,
    *,
    role: str,
    ledger: CostLedger | None = None,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
    cache: bool = True,
    retries: int = 4,
    retry_base_delay: float = 1.0,
    batch: BatchRounds | None = None,
    **kwargs: Any,
) -> SaagLM:
    """Build the ``dspy.LM`` for a model spec, booking its calls under ``role`` in ``ledger``.

    ``retries`` extra attempts follow 429/5xx/timeouts/resets/malformed replies with jittered
    exponential backoff from ``retry_base_delay`` seconds. Extra ``kwargs`` go to ``dspy.LM``
    (e.g. ``timeout=60``, ``reasoning_effort="low"``). Without a ledger the LM gets its own
    (``lm.ledger``). ``batch``: send the calls through these Batch API rounds (``batching``).

    Raises:
        ConfigError: the spec does not parse.
        ModelUnavailableError: missing ``OPENAI_API_KEY`` (no network is touched), missing local
            extra/weights, or the embedded server failed to start.
    """
    parsed = parse_model_spec(spec)
    if batch is not None and parsed.serial:
        raise ConfigError(f"--batch: {parsed.text} answers one request at a time and has no Batch API; "
                          "drop --batch")
    lighten_dspy_call_path()
    endpoint = get_backend(parsed.kind).endpoint(parsed)
    shaped = shape_request(parsed, {"temperature": temperature, "max_tokens": max_tokens, **kwargs})
    temperature = shaped.pop("temperature", None)
    # dspy.LM takes the limit as max_tokens and sends it under each family's name itself
    max_tokens = shaped.pop("max_completion_tokens", shaped.pop("max_tokens", None))
    if max_tokens is None and is_reasoning_model(parsed):  # a given limit was raised to the floor by the rules
        max_tokens = REASONING_MIN_TOKENS
    policy = RetryPolicy(attempts=retries + 1, base_delay=retry_base_delay)
    if ledger is not None and ledger.cap is not None and worst_case_dollars(parsed, 1, max_tokens) is None:
        raise ConfigError(f"max_cost: {parsed.text} has no known price (or no output limit) in dspy's price map, "
                          "so its calls cannot be capped; drop --max-cost or use a priced model")
    return SaagLM(endpoint, spec=parsed, role=role, ledger=ledger if ledger is not None else CostLedger(),
                  retry=policy, batch=batch, temperature=temperature, max_tokens=max_tokens, cache=cache, **shaped)


@dataclass(frozen=True)
class ChatChoice:
    """One choice: text and tool calls as ``{"id", "name", "arguments": <JSON string as sent>}``."""

    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ChatResult:
    """A chat completion: the first choice flattened, all choices, usage and cost facts."""

    text: str
    tool_calls: list[dict[str, Any]]
    usage: dict[str, int]
    cached: bool
    seconds: float
    choices: tuple[ChatChoice, ...] = ()
    dollars: float | None = 0.0


def chat_completion(
    spec_or_lm: ModelSpec | str | dspy.LM,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] | None = None,
    response_format: dict[str, Any] | None = None,
    temperature: float | None = None,
    n: int | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    role: str = "base",
    ledger: CostLedger | None = None,
) -> ChatResult:
    """One raw chat call through dspy (cached, retried, booked); for the base agent's tool calls.

    Pass an LM from ``open_lm`` for repeated calls; a spec string opens one per call. Use
    ``response_format={"type": "json_schema", "json_schema": {"name":..., "schema":...}}`` for
    constrained JSON: OpenAI takes it natively and the embedded server through its shim. ``seed``
    is sent as is (tau2's user simulator sends its trial's seed) and is part of the cache key.

    Raises:
        ModelUnavailableError, LMCallError: as ``SaagLM.call_with_info``.
    """
    lm = spec_or_lm if isinstance(spec_or_lm, dspy.LM) else open_lm(spec_or_lm, role=role, ledger=ledger)
    options: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice, "response_format": response_format,
                               "temperature": temperature, "n": n, "max_tokens": max_tokens, "seed": seed}
    options = {k: v for k, v in options.items() if v is not None}
    if isinstance(lm, SaagLM):  # shaped for its model there (``request_rules``)
        outputs, info = lm.call_with_info(messages=messages, **options)
    else:
        started = time.monotonic()
        outputs = lm(messages=messages, **options)
        info = CallInfo({}, False, time.monotonic() - started, None, 1)
    choices = tuple(_choice(out) for out in outputs)
    first = choices[0] if choices else ChatChoice("")
    return ChatResult(first.text, first.tool_calls, info.usage, info.cached, info.seconds, choices, info.dollars)


def _choice(output: Any) -> ChatChoice:
    if not isinstance(output, dict):
        return ChatChoice("" if output is None else str(output))
    calls = []
    for item in output.get("tool_calls") or []:
        call = item if isinstance(item, dict) else (item.model_dump() if hasattr(item, "model_dump") else dict(item))
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        calls.append({"id": call.get("id"), "name": fn.get("name"),
                      "arguments": args if isinstance(args, str) else json.dumps(args)})
    return ChatChoice(output.get("text") or "", calls)


__all__ = ["CallInfo", "ChatChoice", "ChatResult", "SaagLM", "chat_completion", "open_lm"]
