"""Retries for transient LM failures, with exponential backoff and jitter.

Why not dspy's ``num_retries``: measured against the scripted server (dspy 3.4.1, lm15 engine), dspy
retries 429/5xx/timeouts/resets but not a garbage (non-JSON) 200 body, and its delays
(1, 2, 4 ... s, no jitter) make 16 threads retry in lock-step. So ``open_lm`` sets
``num_retries=0`` and wraps each call with ``with_retries``; callers may reuse it for unparsable
replies.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import Field

from saag_opt import stopping
from saag_opt.errors import SaagOptError

T = TypeVar("T")


class LMCallError(SaagOptError, RuntimeError):
    """An LM call still failed after its retries (per-example data, not a systemic fault)."""

    def __init__(self, message: str, *, attempts: int, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.cause = cause


class ContextOverflowError(LMCallError):
    """The request does not fit the model's context window; never retried, since it would fail the same way.

    A review that does not fit is an unusable review (``on_unusable`` decides it); a base agent's request
    that does not fit is that example's error.
    """


CONTEXT_OVERFLOW = re.compile(r"maximum context length|context[ _](?:window|length)[ _]?(?:is )?exceeded|"
                              r"exceeds? (?:the |its )?(?:model'?s? )?(?:maximum )?context", re.IGNORECASE)
"""How servers word it: OpenAI and vLLM ("maximum context length"), llama.cpp ("exceeds the available context
size" / "context length exceeded"), dspy's ``ContextWindowExceededError`` text."""


class MalformedReplyError(RuntimeError):
    """The server answered 200 but without a usable choice; retried like a transient fault."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. ``attempts`` counts the first try."""

    attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0


RequestTimeout = Annotated[float | None, Field(gt=0.0)]
"""Seconds one LM request may take (each retry gets as long again); None = the HTTP client's own bound.
The type of every config's ``request_timeout`` (evaluate, compare, optimize, tune's ``[fixed]``), so
all mean the same by it; ``call_options`` turns it into ``open_lm``'s ``timeout``."""


def call_options(*, retries: int | None = None, retry_base_delay: float | None = None,
                 request_timeout: float | None = None) -> dict[str, Any]:
    """``open_lm`` keyword arguments for a run's retry settings; None leaves ``open_lm``'s (the client's) default."""
    given = {"retries": retries, "retry_base_delay": retry_base_delay, "timeout": request_timeout}
    return {key: value for key, value in given.items() if value is not None}


def is_transient(exc: BaseException) -> bool:
    """Rate limits, 5xx, timeouts, resets, refused connections and malformed 200 bodies (never a context overflow)."""
    from dspy.utils.exceptions import (  # noqa: PLC0415 - heavy: dspy; an import-light module (test_faces)
        LMAuthError,
        LMBillingError,
        LMInvalidRequestError,
        LMProviderError,
        is_retryable_lm_error,
    )

    if CONTEXT_OVERFLOW.search(str(exc)):
        return False  # the same request overflows again, whatever status the server gave it
    if isinstance(exc, MalformedReplyError) or is_retryable_lm_error(exc):
        return True
    # An unclassified provider error is what a garbage/HTML body becomes; the classified ones
    # (auth, billing, bad request) will not heal by waiting.
    return isinstance(exc, LMProviderError) and not isinstance(exc, (LMAuthError, LMBillingError, LMInvalidRequestError))


def backoff_delay(attempt: int, policy: RetryPolicy, hint: float | None = None, rng: random.Random | None = None) -> float:
    """Delay before retry ``attempt`` (0-based): base*2^attempt with +-50% jitter, at least the server's hint."""
    rand = (rng or random).random()
    delay = min(policy.max_delay, policy.base_delay * (2**attempt)) * (0.5 + rand)
    if hint is not None and hint > 0:
        delay = max(delay, min(float(hint), policy.max_delay))
    return delay


def with_retries(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base_delay: float = 1.0,
    max_delay: float = 30.0,
    retry_on: Callable[[BaseException], bool] | tuple[type[BaseException], ...] = is_transient,
    sleep: Callable[[float], object] = stopping.sleep,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds or ``attempts`` are used; re-raise the last error.

    ``retry_on`` is a predicate or a tuple of exception types. ``Retry-After`` hints
    (``exc.retry_after``) are honoured up to ``max_delay``. KeyboardInterrupt is never retried, and
    nothing is retried once a stop was requested (``saag_opt.stopping``): the run is ending.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    policy = RetryPolicy(attempts, base_delay, max_delay)
    should_retry = retry_on if callable(retry_on) and not isinstance(retry_on, tuple) else (
        lambda exc: isinstance(exc, retry_on)  # type: ignore[arg-type]
    )
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if attempt + 1 >= attempts or not should_retry(exc) or stopping.requested():
                raise
            delay = backoff_delay(attempt, policy, getattr(exc, "retry_after", None))
            if on_retry is not None:
                on_retry(attempt + 1, exc, delay)
            sleep(delay)
            if stopping.requested():
                raise
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["LMCallError", "MalformedReplyError", "RequestTimeout", "RetryPolicy", "backoff_delay", "call_options",
           "is_transient", "with_retries"]
