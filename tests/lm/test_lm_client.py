"""open_lm / chat_completion against the scripted server: keys, guards, costs, cache, retries."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import warnings

import dspy
import pytest

from saag_opt.errors import ModelUnavailableError
from saag_opt.lm import CostLedger, LMCallError, ModelSpec, SaagLM, chat_completion, open_lm
from saag_opt.lm.backends import Endpoint
from saag_opt.lm.embedded.server import free_port
from saag_opt.lm.retry import RetryPolicy
from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer, dspy_reply

pytestmark = pytest.mark.integration
USER = [{"role": "user", "content": "What's the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def fixed(text: str = "hello", prompt: int = 1000, completion: int = 100):  # noqa: ANN201 - handler factory
    return lambda request: Reply(text=text, prompt_tokens=prompt, completion_tokens=completion)


def test_missing_key_is_one_clear_line_and_no_network(monkeypatch: pytest.MonkeyPatch, no_network: None) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelUnavailableError) as info:
        open_lm("gpt-4o", role="base")
    assert str(info.value) == "OPENAI_API_KEY is not set: export it, or run offline with --base local --reviewer local"


def test_openai_model_with_key_builds_without_network(monkeypatch: pytest.MonkeyPatch, no_network: None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    lm = open_lm("gpt-4o", role="base", max_tokens=2000)
    assert lm.model == "openai/gpt-4o" and lm.kwargs["temperature"] == 0.0 and lm.kwargs["max_tokens"] == 2000
    assert "api_base" not in lm.kwargs and lm.num_retries == 0  # we retry, not dspy
    assert "sk-test-not-real" not in json.dumps(lm.dump_state(), default=str)


def test_reasoning_model_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    with pytest.warns(UserWarning, match=r"gpt-5-mini is a reasoning model: temperature=0.3 is ignored"):
        lm = open_lm("gpt-5-mini", role="reviewer", temperature=0.3, max_tokens=4000)
    assert lm.kwargs["temperature"] is None and lm.kwargs["max_completion_tokens"] == 16000

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per (model, temperature), not on every open
        again = open_lm("gpt-5-mini", role="reviewer", temperature=0.3, max_tokens=32000)
    assert again.kwargs["max_completion_tokens"] == 32000
    # temperature 0.0 is what dspy wrongly accepts; we still drop it
    with pytest.warns(UserWarning, match="temperature=0.0 is ignored"):
        zero = open_lm("o4-mini", role="reviewer")
    assert zero.kwargs["temperature"] is None


def test_reasoning_guard_reaches_the_wire(scripted_server: ScriptedOpenAIServer) -> None:
    lm = open_lm(f"openai/gpt-5-mini@{scripted_server.url}", role="reviewer", temperature=None, cache=False)
    lm(messages=USER)
    body = scripted_server.chat_requests[-1].body
    assert "temperature" not in body or body["temperature"] in (None, 1.0)
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 16000


def test_compatible_server_uses_key_or_none(scripted_server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lm = open_lm(f"openai/my-model@{scripted_server.url}", role="base")
    assert lm.kwargs["api_base"] == scripted_server.url and lm.kwargs["api_key"] == "none"
    assert lm(messages=USER) == ["echo: What's the weather in Paris?"]
    assert scripted_server.chat_requests[-1].body["model"] == "my-model"


def test_ledger_books_real_calls_and_free_cache_hits(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = fixed()
    ledger = CostLedger()
    # An OpenAI-priced spec pointed at the scripted server: the whole real cost path, offline.
    lm = SaagLM(Endpoint("openai/gpt-4o", scripted_server.url, "sk-test", 12345), spec=ModelSpec("openai", "gpt-4o"),
                role="base", ledger=ledger, retry=RetryPolicy(attempts=1), temperature=0.0)
    first = chat_completion(lm, USER)
    second = chat_completion(lm, USER)
    assert (first.cached, second.cached) == (False, True)
    assert first.usage == {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    assert first.dollars == pytest.approx(0.0035) and second.dollars == 0.0
    acct = ledger.account("base")
    assert (acct.calls, acct.cache_hits, acct.prompt_tokens, acct.completion_tokens) == (2, 1, 1000, 100)
    assert acct.dollars == pytest.approx(0.0035)
    assert len(scripted_server.chat_requests) == 1
    assert "sk-test" not in json.dumps(ledger.to_dict())


def test_compatible_and_local_cost_zero_but_count_tokens(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = fixed()
    lm = open_lm(f"openai/gpt-4o@{scripted_server.url}", role="reviewer", cache=False)
    lm(messages=USER)
    acct = lm.ledger.account("reviewer")
    assert (acct.prompt_tokens, acct.dollars, acct.unpriced_calls) == (1000, 0.0, 0)
    assert acct.seconds > 0


def test_dspy_programs_book_into_the_ledger_and_track_usage_still_works(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = lambda req: dspy_reply({"answer": "Paris"}, prompt_tokens=40, completion_tokens=6)
    lm = open_lm(f"openai/m@{scripted_server.url}", role="reviewer", cache=False)
    with dspy.context(lm=lm), dspy.track_usage() as tracker:
        pred = dspy.Predict("question -> answer")(question="Capital of France?")
    assert pred.answer == "Paris"
    assert lm.ledger.account("reviewer").prompt_tokens == 40
    assert tracker.get_total_tokens()["openai/m"]["prompt_tokens"] == 40


def test_cache_is_separated_per_server() -> None:
    with ScriptedOpenAIServer(fixed("from A")) as a, ScriptedOpenAIServer(fixed("from B")) as b:
        assert open_lm(f"openai/same@{a.url}", role="base")(messages=USER) == ["from A"]
        assert open_lm(f"openai/same@{b.url}", role="base")(messages=USER) == ["from B"]


def test_a_later_server_on_a_reused_port_does_not_replay_the_earlier_ones_answers() -> None:
    # The OS may hand a new server the port of a closed one (CI saw a test read another test's replies).
    with ScriptedOpenAIServer(fixed("from A")) as a:
        port = a.port
        assert open_lm(f"openai/same@{a.url}", role="base")(messages=USER) == ["from A"]
    with ScriptedOpenAIServer(fixed("from B"), port=port) as b:
        assert b.port == port
        assert open_lm(f"openai/same@{b.url}", role="base")(messages=USER) == ["from B"]


def test_native_tool_calls_and_request_options(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = lambda req: Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    result = chat_completion(f"openai/m@{scripted_server.url}", USER, tools=TOOLS, tool_choice="auto",
                             response_format=fmt, role="base")
    assert result.text == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in result.tool_calls] == [("get_weather", {"city": "Paris"})]
    body = scripted_server.chat_requests[-1].body
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["tool_choice"] == "auto"
    assert body["response_format"]["type"] == "json_schema"


def test_transient_faults_are_retried_and_logged(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = fixed("finally")
    scripted_server.inject([Fault(429, retry_after=0), Fault(500), Fault("timeout", delay=2.0), Fault("garbage"),
                            Fault("reset"), Fault("empty")])
    lm = open_lm(f"openai/m@{scripted_server.url}", role="base", retries=6, retry_base_delay=0.01, timeout=0.5)
    assert lm(messages=USER) == ["finally"]
    assert [r.outcome for r in scripted_server.chat_requests] == ["429", "500", "timeout", "garbage", "reset", "empty", "ok"]
    acct = lm.ledger.account("base")
    assert (acct.calls, acct.retries, acct.errors, acct.prompt_tokens) == (1, 6, 0, 1000)


def test_persistent_failure_is_a_per_call_error(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.inject([Fault(503, message="overloaded")] * 3)
    lm = open_lm(f"openai/m@{scripted_server.url}", role="base", retries=2, retry_base_delay=0.01)
    with pytest.raises(LMCallError, match=r"^m-at-127\.0\.0\.1-\d+: .*overloaded \(after 3 attempt\(s\)\)$") as info:
        lm(messages=USER)
    assert info.value.attempts == 3 and len(scripted_server.chat_requests) == 3
    assert lm.ledger.account("base").errors == 1


def test_rejected_key_is_model_unavailable_without_retries(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.inject([Fault(401, message="invalid key")])
    lm = open_lm(f"openai/m@{scripted_server.url}", role="base", retry_base_delay=0.01)
    with pytest.raises(ModelUnavailableError, match=r"rejected the API key"):
        lm(messages=USER)
    assert len(scripted_server.chat_requests) == 1


@pytest.mark.parametrize(("status", "text", "message"), [
    (404, "The model `m` does not exist", r"no such model or URL path \(.*The model `m` does not exist\)"),
    (404, "Not Found", r"no such model or URL path \(.*Not Found\); check the model name and that the URL ends in /v1"),
    (402, "insufficient_quota", r"refused the call for billing or quota"),
])
def test_wrong_model_or_quota_is_model_unavailable_without_retries(
        scripted_server: ScriptedOpenAIServer, status: int, text: str, message: str) -> None:
    """Every later call would fail the same way: systemic, not a per-example error."""
    scripted_server.inject([Fault(status, message=text)])
    lm = open_lm(f"openai/m@{scripted_server.url}", role="base", retry_base_delay=0.01)
    with pytest.raises(ModelUnavailableError, match=message):
        lm(messages=USER)
    assert len(scripted_server.chat_requests) == 1


def test_a_key_echoed_by_the_server_is_masked(scripted_server: ScriptedOpenAIServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Error texts end up in records.jsonl and logs; a proxy that quotes the key must not leak it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-echoed-secret-123456")
    scripted_server.inject([Fault(400, message="bad request from key sk-echoed-secret-123456")])
    lm = open_lm(f"openai/m@{scripted_server.url}", role="base", retries=0, retry_base_delay=0.01)
    with pytest.raises(LMCallError) as info:
        lm(messages=USER)
    assert "sk-echoed-secret-123456" not in str(info.value) and "from key ***" in str(info.value)


def test_dead_server_is_one_clean_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    lm = open_lm(f"openai/m@{url}", role="base", retry_base_delay=0.01)
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError) as info:
        lm(messages=USER)
    assert str(info.value) == f"cannot reach {url}: connection refused"
    assert time.monotonic() - started < 5  # refused connections get two retries, not the full ladder


def test_concurrent_clients_are_served_in_parallel(scripted_server: ScriptedOpenAIServer) -> None:
    # Structural, not timed: every handler waits at a barrier that opens only when all 16 requests are
    # inside the server at once; a serial server would break the barrier (timeout) and answer 500s.
    barrier = threading.Barrier(16, timeout=20)

    def together(req: dict) -> Reply:
        barrier.wait()
        return Reply(text="ok")

    scripted_server.handler = together
    lm = open_lm(f"openai/m@{scripted_server.url}", role="base", cache=False, retries=0)
    results: list[object] = []

    def one(i: int) -> None:
        results.append(lm(messages=[{"role": "user", "content": f"q{i}"}]))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not barrier.broken, "the server did not hold 16 requests at once: it is not concurrent"
    assert results == [["ok"]] * 16 and len(scripted_server.chat_requests) == 16
    assert lm.ledger.account("base").calls == 16


def test_fake_spec_runs_an_in_process_echo_server() -> None:
    result = chat_completion("fake", USER, tools=TOOLS, role="base")
    assert result.tool_calls[0]["name"] == "get_weather"
    assert chat_completion("fake", USER, role="base").text == "echo: What's the weather in Paris?"


def test_async_calls_retry_and_book_too(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = fixed("async ok", prompt=10, completion=2)
    scripted_server.inject([Fault(500), Fault("garbage")])
    lm = open_lm(f"openai/m@{scripted_server.url}", role="reviewer", retry_base_delay=0.01)
    assert asyncio.run(lm.acall(messages=USER)) == ["async ok"]
    assert asyncio.run(lm.acall(messages=USER)) == ["async ok"]  # cached now
    acct = lm.ledger.account("reviewer")
    assert (acct.calls, acct.cache_hits, acct.retries, acct.prompt_tokens) == (2, 1, 2, 10)
    assert [r.outcome for r in scripted_server.chat_requests] == ["500", "garbage", "ok"]


def test_n_candidates_come_back_as_choices(scripted_server: ScriptedOpenAIServer) -> None:
    counter = iter(range(100))
    scripted_server.handler = lambda req: Reply(text=f"candidate {next(counter)}", prompt_tokens=5, completion_tokens=1)
    result = chat_completion(f"openai/m@{scripted_server.url}", USER, n=3, temperature=0.7, role="base")
    assert [c.text for c in result.choices] == ["candidate 0", "candidate 1", "candidate 2"]
    assert result.text == "candidate 0" and result.usage["prompt_tokens"] == 15
