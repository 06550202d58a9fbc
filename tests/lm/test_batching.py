"""The Batch API route of ``SaagLM`` (``--batch``) against the scripted server's ``/v1/files`` and ``/v1/batches``.

Everything runs through the real stack: dspy builds the request, the batch transport hands it to a
round, the openai SDK uploads it and polls, the scripted server answers the batch's lines with the
same handler that answers direct calls.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.errors import CostCapReached
from saag_opt.lm import CostLedger, open_lm
from saag_opt.lm.accounting import BATCH_PRICE_FACTOR, ModelPrice
from saag_opt.lm.batch_api import BatchClient
from saag_opt.lm.batching import BATCHES_FILE, BatchRounds, custom_id
from saag_opt.lm.spendcap import SpendCap
from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration

PRICE = ModelPrice(input=2.5e-6, output=1e-5, cached_input=1.25e-6, max_output_tokens=400)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]


def handler(request: dict) -> Reply | Fault:
    """A deterministic world: the city is read from the last user message; "broken" fails."""
    text = str(request["messages"][-1]["content"])
    if "broken" in text:
        return Fault(503)
    return Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": text.split()[-1]}}],
                 prompt_tokens=1000, completion_tokens=100)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(handler, batch_delay=0.05) as running:
        yield running


def _ask(lm: Any, city: str) -> list[Any]:
    return lm(messages=[{"role": "user", "content": f"weather in {city}"}], tools=TOOLS, tool_choice="auto")


def _together(rounds: BatchRounds, lm: Any, cities: list[str]) -> dict[str, Any]:
    """One call per city, each on its own worker of the rounds, so they form one round."""
    out: dict[str, Any] = {}
    rounds.expect(len(cities), len(cities))

    def work(city: str) -> None:
        with rounds.worker():
            try:
                out[city] = _ask(lm, city)
            except Exception as exc:  # noqa: BLE001 - the test reads it
                out[city] = exc

    threads = [threading.Thread(target=work, args=(c,)) for c in cities]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_the_scripted_batch_api_moves_through_its_statuses_and_answers_like_chat(
        server: ScriptedOpenAIServer) -> None:
    server.batch_desk.delay = 0.5  # long enough for this machine's polls to see each stage
    client = BatchClient(server.url, "sk-test")
    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"weather in {c}"}]} for c in ("Oslo", "Rome")]
    bodies.append({"model": "m", "messages": [{"role": "user", "content": "broken"}]})
    batch_id = client.submit([{"custom_id": custom_id(b), "method": "POST", "url": "/v1/chat/completions", "body": b}
                              for b in bodies])
    seen = []
    while not (status := client.status(batch_id)).done:
        seen.append(status.status)
    assert seen[0] == "validating" and "in_progress" in seen and status.status == "completed"
    assert (status.total, status.completed, status.failed) == (3, 2, 1)
    results = client.results(status)
    oslo = results[custom_id(bodies[0])].body
    assert oslo is not None and json.loads(oslo["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) \
        == {"city": "Oslo"}
    assert results[custom_id(bodies[2])].body is None and "HTTP 503" in str(results[custom_id(bodies[2])].error)

    server.script_batches(["expire", "fail"])
    expired = client.submit([{"custom_id": custom_id(b), "method": "POST", "url": "/v1/chat/completions", "body": b}
                             for b in bodies[:2]])
    failed = client.submit([{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": bodies[0]}])
    while not (status := client.status(expired)).done:
        pass
    assert status.status == "expired"
    answers = client.results(status)
    assert answers[custom_id(bodies[0])].body is not None and "batch_expired" in str(answers[custom_id(bodies[1])].error)
    while not (status := client.status(failed)).done:
        pass
    assert status.status == "failed" and status.errors and client.results(status) == {}


def test_a_batched_call_is_the_direct_call_and_shares_its_cache_entry(server: ScriptedOpenAIServer) -> None:
    uncached = open_lm(f"fake@{server.url}", role="base", cache=False)
    expected = _ask(uncached, "Oslo")
    batched = open_lm(f"fake@{server.url}", role="base", batch=BatchRounds())
    got = _ask(batched, "Oslo")
    assert _calls(got) == _calls(expected) == [("get_weather", {"city": "Oslo"})]
    assert server.batch_line_bodies == [server.chat_requests[0].body], \
        "the batch line must be exactly the request a direct call sends"
    direct = open_lm(f"fake@{server.url}", role="base")
    assert _ask(direct, "Oslo") == got and _ask(batched, "Oslo") == got  # one cache entry for both routes
    assert len(server.chat_requests) == 1 and len(server.batches) == 1
    assert batched.ledger.account("base").batch_calls == 1 and batched.ledger.account("base").cache_hits == 1


def _calls(outputs: list[Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for out in outputs for c in (out.get("tool_calls") or [])]


def test_ledger_and_cap_book_the_batch_at_half_price(server: ScriptedOpenAIServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.accounting.model_price", lambda spec: PRICE)
    full = 1000 * PRICE.input + 100 * PRICE.output
    rounds = BatchRounds()
    batched = open_lm(f"fake@{server.url}", role="base", batch=rounds)
    direct = open_lm(f"fake@{server.url}", role="base")
    _ask(batched, "Oslo")
    _ask(direct, "Rome")
    assert batched.ledger.account("base").dollars == pytest.approx(full * BATCH_PRICE_FACTOR)
    assert direct.ledger.account("base").dollars == pytest.approx(full)
    assert BATCH_PRICE_FACTOR == 0.5
    # The worst case of one call here is ~$0.0045 in full and half that in a batch: a cap between the two
    # lets the batched call through and refuses the direct one before it is sent.
    worst = _worst(direct, "Lima")
    cap = SpendCap(worst * 0.75)
    capped = open_lm(f"fake@{server.url}", role="base", ledger=CostLedger(cap=cap), batch=BatchRounds())
    _ask(capped, "Lima")
    assert cap.spent == pytest.approx(full * BATCH_PRICE_FACTOR) and cap.held == 0
    refused = open_lm(f"fake@{server.url}", role="base", ledger=CostLedger(cap=SpendCap(worst * 0.75)))
    with pytest.raises(CostCapReached):
        _ask(refused, "Quito")


def _worst(lm: Any, city: str) -> float:
    """What ``lm`` reserves under a cap for one direct call (a recorder in the cap's place refuses it)."""
    hold = []

    class Recorder:
        def reserve(self, dollars: float, *, what: str = "") -> Any:
            hold.append(dollars)
            raise CostCapReached("measured")

    lm.ledger._cap = Recorder()
    with pytest.raises(CostCapReached):
        _ask(lm, city)
    lm.ledger._cap = None
    return hold[0]


def test_a_failed_line_falls_back_for_that_request_only(server: ScriptedOpenAIServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.accounting.model_price", lambda spec: PRICE)
    server.batch_desk.failing = lambda body: "Rome" in str(body["messages"][-1]["content"])
    rounds = BatchRounds()
    lm = open_lm(f"fake@{server.url}", role="base", batch=rounds, retry_base_delay=0.01)
    out = _together(rounds, lm, ["Oslo", "Rome", "Lima"])
    assert len(server.batches) == 1 and server.batches[0]["request_counts"]["failed"] == 1
    assert all(isinstance(v, list) for v in out.values()), out
    direct = [json.dumps(r.body) for r in server.chat_requests]
    assert len(direct) == 1 and "Rome" in direct[0], "only the failed line is sent again directly"
    acct = lm.ledger.account("base")
    assert (acct.calls, acct.batch_calls, acct.retries) == (3, 2, 0)
    full = 1000 * PRICE.input + 100 * PRICE.output
    assert acct.dollars == pytest.approx(2 * full * BATCH_PRICE_FACTOR + full)


def test_the_batch_and_its_requests_are_recorded_without_the_key(server: ScriptedOpenAIServer, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-proj-secret-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    rounds = BatchRounds(tmp_path)
    lm = open_lm(f"openai/scripted@{server.url}", role="base", batch=rounds)  # the key comes from the environment
    _together(rounds, lm, ["Oslo", "Rome"])
    recorded = json.loads((tmp_path / BATCHES_FILE).read_text())["batches"]
    assert [row["id"] for row in recorded] == [b["id"] for b in server.batches]
    assert sorted(recorded[0]["custom_ids"]) == sorted(custom_id(b) for b in server.batch_line_bodies)
    uploaded = server.batch_desk.file_text(server.batches[0]["input_file_id"])
    assert uploaded.count("\n") == 2 and "Oslo" in uploaded
    assert secret not in uploaded and secret not in (tmp_path / BATCHES_FILE).read_text()
