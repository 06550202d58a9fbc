"""with_retries: backoff with jitter, Retry-After hints, what is and is not retried."""

from __future__ import annotations

import random

import pytest
from dspy.utils.exceptions import LMAuthError, LMProviderError, LMRateLimitError, LMServerError, LMTransportError

from saag_opt.lm import RetryPolicy, is_transient, with_retries
from saag_opt.lm.retry import backoff_delay


def _flaky(failures: list[Exception]):  # noqa: ANN202 - test helper
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if failures:
            raise failures.pop(0)
        return "ok"

    return fn, calls


def test_retries_until_success_with_growing_delays() -> None:
    slept: list[float] = []
    fn, calls = _flaky([LMServerError("boom"), LMServerError("boom"), LMTransportError("reset")])
    assert with_retries(fn, attempts=5, base_delay=1.0, sleep=slept.append) == "ok"
    assert calls["n"] == 4
    assert len(slept) == 3
    for i, delay in enumerate(slept):  # base * 2^i with +-50% jitter
        assert 0.5 * 2**i <= delay <= 1.5 * 2**i


def test_gives_up_after_attempts_and_reraises_last_error() -> None:
    fn, calls = _flaky([LMServerError(f"boom {i}") for i in range(10)])
    with pytest.raises(LMServerError, match="boom 2"):
        with_retries(fn, attempts=3, base_delay=0, sleep=lambda s: None)
    assert calls["n"] == 3


def test_non_transient_errors_are_not_retried() -> None:
    fn, calls = _flaky([LMAuthError("bad key")])
    with pytest.raises(LMAuthError):
        with_retries(fn, attempts=5, base_delay=0, sleep=lambda s: None)
    assert calls["n"] == 1


def test_retry_after_hint_is_a_floor_capped_by_max_delay() -> None:
    exc = LMRateLimitError("slow down", retry_after=7.0)
    assert backoff_delay(0, RetryPolicy(base_delay=0.01), exc.retry_after, random.Random(0)) == 7.0
    assert backoff_delay(0, RetryPolicy(base_delay=0.01, max_delay=2.0), 7.0, random.Random(0)) == 2.0


def test_retry_on_accepts_exception_types() -> None:
    fn, calls = _flaky([KeyError("x"), KeyError("y")])
    assert with_retries(fn, attempts=3, base_delay=0, retry_on=(KeyError,), sleep=lambda s: None) == "ok"
    fn, calls = _flaky([ValueError("unparsable")])
    with pytest.raises(ValueError):
        with_retries(fn, attempts=3, base_delay=0, retry_on=(KeyError,), sleep=lambda s: None)
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        with_retries(fn, attempts=0)


def test_is_transient_classification() -> None:
    assert is_transient(LMRateLimitError("429"))
    assert is_transient(LMServerError("500"))
    assert is_transient(LMTransportError("reset"))
    assert is_transient(LMProviderError("the reply is not JSON"))  # garbage body
    assert not is_transient(LMAuthError("401"))
    assert not is_transient(ValueError("x"))
