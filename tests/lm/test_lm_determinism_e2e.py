"""The embedded server answers a greedy request the same way cold or warm (README, Models).

Upstream llama-cpp-python reuses any matching prefix, so a warm server decodes a prompt in other
batches than a cold one and the logits differ in the last bits. On this prompt pair that flipped the
greedy reply of the old server (measured with the 0.5B: cold " tool_12\\nExplanation: ...", warm after
OTHER " tool_10(arg3: int) returns v19"). ``saag_opt.lm.embedded.prompt_cache`` reuses only whole-batch
prefixes, which makes the decode identical: whole batches, or (tuned) the finer grid measured to
leave every logit as it was (``saag_opt.lm.embedded.reuse_grid``).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from saag_opt.agents.base import BaseAgent, registry_json_schema
from saag_opt.data import load_dataset
from saag_opt.lm.embedded.model_file import ensure_model_file, get_local_model
from saag_opt.lm.embedded.server import REUSE_GRID_RECORD, TRACE_ENV, EmbeddedServer, default_cache_dir

pytestmark = pytest.mark.e2e

SHARED = "Tools: " + " ".join(f"tool_{i}(arg{i % 7}: int) returns v{i * 31 % 97}" for i in range(90))
PROMPT = SHARED + "\nUser: call the tool whose index is the number of letters in 'parallel' and explain why. Answer:"
OTHER = SHARED + "\nOther user: something else entirely, list three tools. Answer:"
SERIAL = PROMPT.replace("'parallel'", "'serial'")


def _reply(server: EmbeddedServer, prompt: str) -> str:
    body = {"model": server.model.alias, "temperature": 0, "max_tokens": 40, "prompt": prompt}
    req = urllib.request.Request(server.url + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as resp:
        return str(json.loads(resp.read())["choices"][0]["text"])


def _cold_reply(model: object, path: Path, prompt: str) -> str:
    server = EmbeddedServer(model, path).start()  # type: ignore[arg-type]
    try:
        return _reply(server, prompt)
    finally:
        server.stop()


def test_same_prompt_same_reply_on_a_cold_and_a_warm_server(local_spec: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """On the reuse grid measured for this build (tuned): a kept prefix off the batch boundaries too."""
    name = local_spec.split(":", 1)[1]
    model, path = get_local_model(name), ensure_model_file(name)
    cold_reply, cold_serial = _cold_reply(model, path, PROMPT), _cold_reply(model, path, SERIAL)
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    warm = EmbeddedServer(model, path).start()
    try:
        _reply(warm, OTHER)  # the live context and the prompt cache now hold a long prefix of PROMPT
        warm_reply = _reply(warm, PROMPT)
        warm_serial = _reply(warm, SERIAL)  # keeps PROMPT's prefix up to its last word
        again = _reply(warm, PROMPT)
    finally:
        warm.stop()
    assert cold_reply.strip() and cold_serial.strip(), "an empty reply proves nothing"
    assert (warm_reply, warm_serial, again) == (cold_reply, cold_serial, cold_reply)
    reused = [json.loads(line)["reused_tokens"] for line in trace.read_text().splitlines()]
    grids = json.loads((default_cache_dir() / REUSE_GRID_RECORD).read_text())
    granule = next(grid for key, grid in grids.items() if path.name in key)[0]
    assert all(n % granule == 0 for n in reused) and reused[1] > 0 and reused[2] > reused[1], reused
    if granule < 128:  # the measured grid is finer than a batch: SERIAL kept a prefix off the boundaries
        assert reused[2] % 128, reused


def _post(server: EmbeddedServer, path: str, body: dict) -> dict:
    req = urllib.request.Request(server.url + path, data=json.dumps({"model": server.model.alias, **body}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as resp:
        return dict(json.loads(resp.read()))


def test_tuned_server_gives_the_legacy_servers_greedy_replies(local_spec: str) -> None:
    """Grammar-first sampling and the short barrier spin change the speed, not one token (README, Models)."""
    name = local_spec.split(":", 1)[1]
    model, path = get_local_model(name), ensure_model_file(name)
    example = load_dataset("shipped:bfcl", split="test", limit=2)[1]  # a registry of two tools
    agent = BaseAgent.__new__(BaseAgent)
    agent.mode = "json"
    call = {"temperature": 0, "messages": agent.build_messages(example), "response_format": {
        "type": "json_schema", "json_schema": {"name": "calls", "schema": registry_json_schema(example)}}}
    replies = {}
    for speed in ("legacy", "tuned"):
        server = EmbeddedServer(model, path, speed=speed).start()
        try:
            chat = _post(server, "/chat/completions", call)["choices"][0]["message"]["content"]
            text = _post(server, "/completions", {"temperature": 0, "max_tokens": 40, "prompt": PROMPT})
            replies[speed] = (chat, text["choices"][0]["text"])
        finally:
            server.stop()
    assert json.loads(replies["legacy"][0])["calls"], "a reply without a call proves little"
    assert replies["tuned"] == replies["legacy"]


def test_a_conversations_next_turn_restores_its_state_after_another_role_and_replies_as_cold(
        local_spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Superseded states (tuned): turn 2 finds turn 1's prefix after another prompt, and replies as a cold server."""
    name = local_spec.split(":", 1)[1]
    model, path = get_local_model(name), ensure_model_file(name)
    monkeypatch.delenv(TRACE_ENV, raising=False)
    first = EmbeddedServer(model, path, speed="tuned").start()
    try:
        turn2 = PROMPT + _reply(first, PROMPT) + "\nUser: now the tool for 'serial', and why. Answer:"
    finally:
        first.stop()
    cold = EmbeddedServer(model, path, speed="tuned").start()
    try:
        cold_reply = _reply(cold, turn2)
    finally:
        cold.stop()
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    warm = EmbeddedServer(model, path, speed="tuned").start()
    try:
        _reply(warm, PROMPT)  # turn 1
        _reply(warm, "Reviewer: is this call right? " + OTHER)  # another role replaces the live context
        warm_reply = _reply(warm, turn2)
    finally:
        warm.stop()
    last = json.loads(trace.read_text().splitlines()[-1])
    assert cold_reply.strip() and warm_reply == cold_reply
    assert last["cache_loaded"] and last["reused_tokens"] >= 512, last  # turn 1's state came back from the cache
