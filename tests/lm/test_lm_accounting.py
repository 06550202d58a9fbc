"""CostLedger: per-role calls, cache hits, tokens, dollars, seconds; thread-safe; no secrets."""

from __future__ import annotations

import copy
import json
import pickle
import threading

import pytest

from saag_opt.lm import CostLedger, ModelSpec, price_call, usage_numbers


def test_record_and_snapshot_per_role() -> None:
    ledger = CostLedger()
    ledger.record("base", prompt_tokens=100, completion_tokens=10, seconds=0.5, dollars=0.01, model="gpt-4o")
    ledger.record("base", cached=True, seconds=0.001, prompt_tokens=999, dollars=5.0)
    ledger.record("reviewer", prompt_tokens=50, completion_tokens=5, dollars=None, error=True, retries=2)
    snap = ledger.snapshot()
    assert snap["base"]["calls"] == 2 and snap["base"]["cache_hits"] == 1
    assert snap["base"]["prompt_tokens"] == 100  # a cache hit books no tokens ...
    assert snap["base"]["dollars"] == pytest.approx(0.01)  # ... and no dollars
    assert snap["reviewer"]["unpriced_calls"] == 1 and snap["reviewer"]["errors"] == 1
    assert snap["reviewer"]["retries"] == 2
    assert snap["total"]["calls"] == 3 and snap["total"]["prompt_tokens"] == 150
    assert ledger.total_dollars() == pytest.approx(0.01)
    assert snap["base"]["models"] == ["gpt-4o"]
    assert json.loads(json.dumps(ledger.to_dict()))["roles"]["total"]["calls"] == 3


def test_a_resumed_ledger_restored_from_costs_json_reports_the_same_totals() -> None:
    """The total is summed from the rounded roles, so restoring ``costs.json`` gives back the same numbers."""
    ledger = CostLedger()
    for role in ("base", "reviewer", "user"):  # each rounds down to 0.000 s; their sum would round up
        ledger.record(role, seconds=0.0004, dollars=0.000000004)
    restored = CostLedger()
    restored.restore(json.loads(json.dumps(ledger.to_dict()))["roles"])
    assert restored.to_dict() == ledger.to_dict()
    assert ledger.snapshot()["total"]["seconds"] == 0.0


def test_ledger_is_thread_safe() -> None:
    ledger = CostLedger()

    def work() -> None:
        for _ in range(500):
            ledger.record("base", prompt_tokens=1, completion_tokens=2, dollars=0.001)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    acct = ledger.account("base")
    assert (acct.calls, acct.prompt_tokens, acct.completion_tokens) == (4000, 4000, 8000)
    assert acct.dollars == pytest.approx(4.0)


def test_ledger_copies_share_the_sink_and_pickle_roundtrips() -> None:
    ledger = CostLedger()
    ledger.record("base", prompt_tokens=3)
    assert copy.deepcopy(ledger) is ledger
    clone = pickle.loads(pickle.dumps(ledger))
    clone.record("base", prompt_tokens=4)
    assert clone.account("base").prompt_tokens == 7 and ledger.account("base").prompt_tokens == 3


def test_price_call_uses_dspy_price_map_and_local_is_free() -> None:
    # gpt-4o: $2.50 in / $10 out per 1M tokens (dspy bundled metadata), cached input $1.25
    assert price_call(ModelSpec("openai", "gpt-4o"), 1000, 100) == pytest.approx(0.0035)
    assert price_call(ModelSpec("openai", "gpt-4o"), 1000, 100, 400) == pytest.approx(0.003)
    assert price_call(ModelSpec("openai", "gpt-5-mini"), 1_000_000, 0) == pytest.approx(0.25)
    assert price_call(ModelSpec("openai", "no-such-model-xyz"), 10, 10) is None
    assert price_call(ModelSpec("local", "qwen2.5-coder-0.5b"), 10**6, 10**6) == 0.0
    assert price_call(ModelSpec("compatible", "gpt-4o", "http://h:1/v1"), 10**6, 10**6) == 0.0


def test_usage_numbers_accepts_openai_and_lm15_shapes() -> None:
    assert usage_numbers({"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}) == (5, 2, 1)
    assert usage_numbers({"input_tokens": 7, "output_tokens": 3}) == (7, 3, 0)
    assert usage_numbers(None) == (0, 0, 0)
