"""--max-cost is hard: every LM attempt reserves its worst case, spend never passes the cap."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.lm import CostLedger, ModelSpec, SaagLM, chat_completion, open_lm
from saag_opt.lm.backends import Endpoint
from saag_opt.lm.retry import RetryPolicy
from saag_opt.lm.spend.accounting import model_price, prompt_token_bound, worst_case_dollars
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration
GPT4O = ModelSpec("openai", "gpt-4o")


def _priced_lm(server: ScriptedOpenAIServer, ledger: CostLedger, **kwargs: object) -> SaagLM:
    """gpt-4o's real prices, answered by the scripted server (the whole cost path, offline)."""
    return SaagLM(Endpoint("openai/gpt-4o", server.url, "sk-test", 777), spec=GPT4O, role="base", ledger=ledger,
                  retry=RetryPolicy(attempts=1), temperature=0.0, **kwargs)


def test_worst_case_is_prompt_bytes_plus_max_tokens_at_the_models_rates() -> None:
    messages = [{"role": "user", "content": "x" * 400}]
    tokens = prompt_token_bound(None, messages)
    assert tokens >= 400
    price = model_price(GPT4O)
    assert worst_case_dollars(GPT4O, tokens, 100) == pytest.approx(tokens * price.input + 100 * price.output)
    assert worst_case_dollars(GPT4O, tokens, None) == pytest.approx(tokens * price.input + 16384 * price.output)
    assert worst_case_dollars(ModelSpec("local", "qwen2.5-coder-0.5b"), 10**6, None) == 0.0
    assert worst_case_dollars(ModelSpec("openai", "no-such-model-xyz"), 10, 10) is None


def test_capped_calls_stop_before_the_cap_with_zero_overshoot() -> None:
    """Distinct prompts (no cache) from 8 threads: the ledger's spend never passes the cap."""
    with ScriptedOpenAIServer(lambda req: Reply(text="ok " * 30)) as server:
        cap = SpendCap(0.01)
        ledger = CostLedger(cap=cap)
        lm = _priced_lm(server, ledger, max_tokens=50)

        def call(i: int) -> str:
            try:
                chat_completion(lm, [{"role": "user", "content": f"question {i} " + "y" * 300}])
                return "ok"
            except CostCapReached:
                return "capped"

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(call, range(200)))
        spent = ledger.total_dollars()
        assert "ok" in outcomes and "capped" in outcomes
        assert spent <= 0.01  # zero overshoot
        assert cap.spent == pytest.approx(spent) and cap.held == pytest.approx(0.0, abs=1e-12) and cap.reached
        assert outcomes.count("ok") == len(server.chat_requests)  # a refused call never reached the server
        assert ledger.account("base").calls == outcomes.count("ok")  # and is not booked as a call
        # the run used the cap: the next call's worst case did not fit into what was left
        assert 0.01 - spent < worst_case_dollars(GPT4O, prompt_token_bound(None, [{"role": "user",
                                                                                   "content": "q" * 310}]), 50)


def test_cache_hits_are_free_under_the_cap() -> None:
    with ScriptedOpenAIServer(lambda req: Reply(text="ok", prompt_tokens=100, completion_tokens=5)) as server:
        cap = SpendCap(1.0)
        lm = _priced_lm(server, CostLedger(cap=cap), max_tokens=20)
        for _ in range(3):
            chat_completion(lm, [{"role": "user", "content": "same"}])
        assert len(server.chat_requests) == 1
        assert cap.spent == pytest.approx(100 * 2.5e-6 + 5 * 1e-5)


def test_a_child_ledger_books_into_its_parent_and_shares_the_cap() -> None:
    root = CostLedger(cap=SpendCap(5.0))
    child = root.child()
    child.record("reviewer", prompt_tokens=10, dollars=0.5)
    assert child.cap is root.cap
    assert root.account("reviewer").dollars == 0.5 and child.total_dollars() == 0.5
    root.record("base", dollars=1.0)
    assert child.total_dollars() == 0.5 and root.total_dollars() == 1.5


def test_restore_adds_an_earlier_attempts_spend() -> None:
    ledger = CostLedger()
    ledger.record("base", prompt_tokens=3, dollars=0.25)
    ledger.restore(CostLedger().to_dict()["roles"] | {"base": {"calls": 2, "dollars": 0.5, "models": ["m"]}})
    assert ledger.account("base").calls == 3 and ledger.total_dollars() == pytest.approx(0.75)


def test_a_full_cap_refuses_at_once_and_an_unpriced_model_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = SpendCap(1.0, spent=1.0)
    with pytest.raises(CostCapReached, match=r"--max-cost \$1 reached"):
        cap.reserve(0.0)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    with pytest.raises(ConfigError, match="no-such-model-xyz has no known price"):
        open_lm("openai/no-such-model-xyz", role="base", ledger=CostLedger(cap=SpendCap(1.0)))


def test_a_waiting_reservation_gets_room_when_another_settles() -> None:
    cap = SpendCap(1.0)
    first = cap.reserve(0.8)
    got: list[float] = []
    waiter = threading.Thread(target=lambda: got.append(cap.reserve(0.5).dollars))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got  # 0.8 held + 0.5 > 1.0: waits, since the hold may settle lower
    first.settle(0.1)
    waiter.join(5)
    assert got == [0.5] and cap.spent == pytest.approx(0.1) and cap.held == pytest.approx(0.5)


def test_failed_attempts_count_what_they_may_have_cost() -> None:
    """An HTTP error status is not billed; an unreadable 200 body may have been, so it counts its worst case."""
    messages = [{"role": "user", "content": "retry me"}]
    with ScriptedOpenAIServer(lambda req: Reply(text="ok", prompt_tokens=100, completion_tokens=5)) as server:
        for fault, billed_worst in ((Fault(500), False), (Fault("garbage"), True)):
            server.reset()
            server.inject([fault])
            cap = SpendCap(1.0)
            lm = SaagLM(Endpoint("openai/gpt-4o", server.url, "sk-test", id(fault)), spec=GPT4O, role="base",
                        ledger=CostLedger(cap=cap), retry=RetryPolicy(attempts=2, base_delay=0.01), temperature=0.0,
                        max_tokens=50, cache=False)
            chat_completion(lm, messages)
            reply = 100 * 2.5e-6 + 5 * 1e-5
            worst = worst_case_dollars(GPT4O, prompt_token_bound(None, messages, None, None, None), 50)
            assert cap.spent == pytest.approx(reply + (worst if billed_worst else 0.0))
            assert cap.spent >= lm.ledger.total_dollars() and cap.held == pytest.approx(0.0, abs=1e-12)
