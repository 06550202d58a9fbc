"""The scripted OpenAI-compatible server itself, over plain HTTP (no dspy)."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request

import pytest

from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration


def _post(url: str, body: dict, timeout: float = 5.0) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_models_and_openai_shaped_reply(scripted_server: ScriptedOpenAIServer) -> None:
    with urllib.request.urlopen(scripted_server.url + "/models", timeout=5) as resp:
        assert json.load(resp)["data"][0]["id"] == "scripted"
    scripted_server.handler = lambda req: Reply(text="hi", tool_calls=[{"name": "f", "arguments": {"a": 1}}],
                                                prompt_tokens=9, completion_tokens=3)
    status, _, raw = _post(scripted_server.url, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
    data = json.loads(raw)
    assert status == 200 and data["object"] == "chat.completion" and data["model"] == "m"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "hi"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("f", {"a": 1})
    assert data["usage"] == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def test_faults_are_served_in_order_then_normal_replies(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.inject([Fault(429, retry_after=2), Fault(500, retry_after=None), Fault("garbage"), Fault("empty")])
    assert scripted_server.pending_faults == 4
    status, headers, body = _post(scripted_server.url, {"messages": []})
    assert status == 429 and headers["Retry-After"] == "2" and json.loads(body)["error"]["type"] == "rate_limit_error"
    status, headers, _ = _post(scripted_server.url, {"messages": []})
    assert status == 500 and "Retry-After" not in headers
    status, _, body = _post(scripted_server.url, {"messages": []})
    assert status == 200 and body.startswith(b"<html>")
    status, _, body = _post(scripted_server.url, {"messages": []})
    assert "choices" not in json.loads(body)
    status, _, body = _post(scripted_server.url, {"messages": [{"role": "user", "content": "again"}]})
    assert json.loads(body)["choices"][0]["message"]["content"] == "echo: again"
    assert [r.outcome for r in scripted_server.requests] == ["429", "500", "garbage", "empty", "ok"]


def test_timeout_and_reset_faults(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.inject([Fault("timeout", delay=1.0), Fault("reset")])
    with pytest.raises(OSError):  # socket timeout (URLError/TimeoutError are OSErrors)
        _post(scripted_server.url, {"messages": []}, timeout=0.3)
    with pytest.raises(OSError):
        _post(scripted_server.url, {"messages": []})


def test_handler_faults_errors_and_plain_strings(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = lambda req: Fault(503) if req.get("fail") else "plain"
    assert _post(scripted_server.url, {"fail": True})[0] == 503
    assert json.loads(_post(scripted_server.url, {})[2])["choices"][0]["message"]["content"] == "plain"
    scripted_server.handler = lambda req: 1 / 0
    status, _, body = _post(scripted_server.url, {})
    assert status == 500 and "ZeroDivisionError" in json.loads(body)["error"]["message"]
    assert scripted_server.requests[-1].outcome == "handler-error"


def test_reset_clears_log_and_faults_and_close_is_idempotent() -> None:
    server = ScriptedOpenAIServer().start()
    server.inject([500])
    _post(server.url, {})
    server.inject([500])
    server.reset(lambda req: "new")
    assert server.requests == [] and server.pending_faults == 0
    assert json.loads(_post(server.url, {})[2])["choices"][0]["message"]["content"] == "new"
    server.close()
    server.close()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url


def test_jitter_waits_a_seeded_random_share_per_request_and_reads_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    draws = [0.05 + rng.uniform(0.0, 0.4) for _ in range(4)]  # latency + the seed's draws, in request order
    with ScriptedOpenAIServer(latency=0.05, jitter=0.4, jitter_seed=7) as server:
        waited = []
        for _ in draws:
            started = time.monotonic()
            _post(server.url, {})
            waited.append(time.monotonic() - started)
    assert all(w >= d for w, d in zip(waited, draws)), (waited, draws)
    assert max(draws) - min(draws) > 0.1  # the waits differ, so concurrent answers change order
    monkeypatch.setenv("SAAG_OPT_SCRIPTED_JITTER", "0.25")
    assert ScriptedOpenAIServer().jitter == 0.25 and ScriptedOpenAIServer(jitter=0).jitter == 0
    monkeypatch.setenv("SAAG_OPT_SCRIPTED_JITTER", "fast")
    with pytest.raises(ValueError, match="SAAG_OPT_SCRIPTED_JITTER: expected seconds as a number, got 'fast'"):
        ScriptedOpenAIServer()
    monkeypatch.delenv("SAAG_OPT_SCRIPTED_JITTER")
    assert ScriptedOpenAIServer().jitter == 0.0


def test_latency_applies_per_request_and_close_wakes_sleepers() -> None:
    with ScriptedOpenAIServer(latency=0.2) as server:
        started = time.monotonic()
        _post(server.url, {})
        assert time.monotonic() - started >= 0.2
        server.inject([Fault("timeout")])  # 30 s by default; closing must not wait for it
        with pytest.raises(OSError):
            _post(server.url, {}, timeout=0.3)
        closing = time.monotonic()
    assert time.monotonic() - closing < 2.0
