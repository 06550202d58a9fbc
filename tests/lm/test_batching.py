"""The Batch API route of ``SaagLM`` (``--batch``) against the scripted server's ``/v1/files`` and ``/v1/batches``.

Everything runs through the real stack: dspy builds the request, the batch transport hands it to a
round, the openai SDK uploads it and polls, the scripted server answers the batch's lines with the
same handler that answers direct calls.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from saag_opt.errors import CostCapReached
from saag_opt.lm import CostLedger, open_lm
from saag_opt.lm.batch.api import INTENT_KEY, BatchClient, request_line
from saag_opt.lm.batch.rounds import BATCHES_FILE, BatchRounds, custom_id
from saag_opt.lm.spend.accounting import BATCH_PRICE_FACTOR, ModelPrice
from saag_opt.lm.spend.cap import SpendCap
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
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)
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
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)
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


# -- created once, found again: the intent in batches.json and in the batch's metadata -------------------------


@pytest.fixture
def quick_creates(monkeypatch: pytest.MonkeyPatch) -> None:
    """A create asked again waits 5-15 ms, not 0.5-1.5 s."""
    monkeypatch.setattr("saag_opt.lm.batch.api.CREATE_DELAY", 0.01)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / BATCHES_FILE).read_text())["batches"]


def test_the_scripted_server_lists_its_batches_newest_first_by_pages(server: ScriptedOpenAIServer) -> None:
    client = BatchClient(server.url, "sk-test")
    made = [client.submit([request_line(custom_id({"n": n}), {"model": "m", "messages": []})], intent=f"i-{n}")
            for n in range(5)]
    sdk = openai.OpenAI(api_key="sk-test", base_url=server.url)
    listed = list(sdk.batches.list(limit=2))  # the SDK follows ``after`` over three pages
    assert [b.id for b in listed] == made[::-1]
    assert [(b.metadata or {}).get(INTENT_KEY) for b in listed] == [f"i-{n}" for n in range(4, -1, -1)]
    assert [r.path.rsplit("/", 1)[-1] for r in server.requests if r.method == "GET"][-3:] == [
        "batches?limit=2", f"batches?limit=2&after={made[3]}", f"batches?limit=2&after={made[1]}"]
    assert client.find("i-1", since=time.time() - 60) == made[1]
    assert client.find("i-9", since=time.time() - 60) is None
    assert client.find("i-1", since=time.time() + 3600) is None, "no batch older than the intent is read"


def test_a_create_whose_answer_is_lost_is_looked_up_not_made_twice(server: ScriptedOpenAIServer, tmp_path: Path,
                                                                  quick_creates: None) -> None:
    server.batch_desk.lose_replies = 1  # the batch is made, the connection reset before its id comes back
    rounds = BatchRounds(tmp_path)
    lm = open_lm(f"fake@{server.url}", role="base", batch=rounds)
    out = _together(rounds, lm, ["Oslo", "Rome"])
    assert all(isinstance(v, list) for v in out.values()), out
    [batch] = server.batches
    creates = [r.outcome for r in server.requests if r.method == "POST" and r.path.endswith("/batches")]
    assert creates == ["reset"], "the lost create was found by its intent, not sent again"
    [row] = _rows(tmp_path)
    assert row["id"] == batch["id"] and row["intent"] == batch["metadata"][INTENT_KEY]
    assert row["status"] == "completed"


def test_without_an_intent_the_sdk_retries_a_lost_create_into_a_second_batch(server: ScriptedOpenAIServer) -> None:
    """What the intent is for: the SDK's own retry cannot know the first create worked."""
    server.batch_desk.lose_replies = 1
    BatchClient(server.url, "sk-test").submit([request_line("x", {"model": "m", "messages": []})])
    assert len(server.batches) == 2


def _dying_submit(monkeypatch: pytest.MonkeyPatch, *, after_create: bool) -> None:
    """The process dies inside ``submit``: right after the server made the batch, or before."""
    real = BatchClient.submit

    def submit(self: BatchClient, lines: list[dict[str, Any]], **kwargs: Any) -> str:
        if after_create:
            real(self, lines, **kwargs)
        raise RuntimeError("the process was killed")

    monkeypatch.setattr(BatchClient, "submit", submit)


def test_a_batch_made_just_before_the_run_died_is_found_on_resume_and_not_paid_twice(
        server: ScriptedOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cities = ["Oslo", "Rome", "Lima"]
    with monkeypatch.context() as patch:
        _dying_submit(patch, after_create=True)
        rounds = BatchRounds(tmp_path)
        died = _together(rounds, open_lm(f"fake@{server.url}", role="base", batch=rounds), cities)
    assert all(isinstance(v, Exception) for v in died.values())
    assert "--resume looks for it on the server before sending its requests again" in str(died["Oslo"])
    [row] = _rows(tmp_path)
    [made] = server.batches
    assert row["id"] is None and row["status"] == "creating" and made["metadata"][INTENT_KEY] == row["intent"]

    events: list[Any] = []
    resumed = BatchRounds(tmp_path, on_event=events.append)
    out = _together(resumed, open_lm(f"fake@{server.url}", role="base", batch=resumed), cities)
    assert {city: _calls(v) for city, v in out.items()} == {c: [("get_weather", {"city": c})] for c in cities}
    assert [b["id"] for b in server.batches] == [made["id"]], "no second batch"
    assert server.chat_requests == []
    [row] = _rows(tmp_path)
    assert row["id"] == made["id"] and row["status"] == "completed"
    assert any(e.data.get("status") == "found" and made["id"] in e.message for e in events)


def test_an_intent_the_run_died_before_creating_is_dropped_and_its_requests_sent_once(
        server: ScriptedOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cities = ["Oslo", "Rome"]
    with monkeypatch.context() as patch:
        _dying_submit(patch, after_create=False)
        rounds = BatchRounds(tmp_path)
        _together(rounds, open_lm(f"fake@{server.url}", role="base", batch=rounds), cities)
    assert server.batches == [] and _rows(tmp_path)[0]["status"] == "creating"

    events = _resume_dropping(server, tmp_path, cities)
    [batch] = server.batches
    old, new = _rows(tmp_path)
    assert (old["status"], old["dropped"]) == ("dropped", "was never created") and old["id"] is None
    assert new["id"] == batch["id"] and sorted(new["custom_ids"]) == sorted(old["custom_ids"])
    assert any("was never created: dropped" in e.message for e in events)


def test_a_recorded_batch_the_server_no_longer_knows_is_dropped_and_its_requests_sent_again(
        server: ScriptedOpenAIServer, tmp_path: Path) -> None:
    cities = ["Oslo", "Rome"]
    server.batch_desk.delay = 30.0  # in flight until the server forgets it
    rounds = BatchRounds(tmp_path)
    lm = open_lm(f"fake@{server.url}", role="base", batch=rounds)
    forgetter = threading.Thread(target=lambda: (_wait_for(lambda: server.batches),
                                                 server.batch_desk.forget(server.batches[0]["id"])))
    forgetter.start()
    lost = _together(rounds, lm, cities)
    forgetter.join(60)
    message = str(lost["Oslo"])
    assert "does not know batch" in message and "--resume drops it and sends its requests again" in message
    assert "--resume polls it" not in message
    [gone] = _rows(tmp_path)
    assert gone["id"] and server.batches == []

    server.batch_desk.delay = 0.05
    events = _resume_dropping(server, tmp_path, cities)
    [batch] = server.batches
    old, new = _rows(tmp_path)
    assert old["id"] == gone["id"] and old["status"] == "dropped" and "is unknown to" in old["dropped"]
    assert new["id"] == batch["id"] and new["status"] == "completed"
    [said] = [e.message for e in events if e.data.get("status") == "dropped"]
    assert said.startswith(f"batch {gone['id']} (") and "its 2 requests are sent again in new batches" in said
    assert BatchRounds(tmp_path)._recorded.keys() == {(server.url, "fake", cid) for cid in new["custom_ids"]}, \
        "a later resume polls only the new batch"


def _resume_dropping(server: ScriptedOpenAIServer, tmp_path: Path, cities: list[str]) -> list[Any]:
    """Resume, every city answered; the events. A dropped batch's waiting requests count in the open round:
    it goes out when they are all there, not after ``max_wait`` (60 s here)."""
    events: list[Any] = []
    resumed = BatchRounds(tmp_path, on_event=events.append, max_wait=60.0)
    started = time.monotonic()
    out = _together(resumed, open_lm(f"fake@{server.url}", role="base", batch=resumed), cities)
    assert all(isinstance(v, list) for v in out.values()) and time.monotonic() - started < 20, out
    return events


def _wait_for(condition: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
