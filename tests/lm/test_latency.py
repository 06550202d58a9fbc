"""A reply replayed from the LM cache counts at the time of its original call in reported latency
(``lm_clock``), while the ledger keeps the time actually spent; the time store keeps no text."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from pathlib import Path

import dspy
import pytest

import saag_opt.lm.client as client
from saag_opt.lm import open_lm
from saag_opt.lm.latency import lm_clock
from saag_opt.testing import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration
LATENCY = 0.3


def _messages() -> list[dict[str, str]]:
    return [{"role": "user", "content": f"secret question {uuid.uuid4().hex}"}]


def _store() -> Path:
    return Path(dspy.cache.disk_cache_dir) / "saag-call-seconds"


@pytest.fixture
def slow_server() -> ScriptedOpenAIServer:
    with ScriptedOpenAIServer(lambda request: Reply(text="ok"), latency=LATENCY) as server:
        yield server


def test_a_cache_hit_counts_at_its_original_time_but_the_ledger_keeps_the_real_time(
        slow_server: ScriptedOpenAIServer) -> None:
    lm = open_lm(f"openai/m@{slow_server.url}", role="reviewer")
    messages = _messages()
    with lm_clock() as real:
        assert lm(messages=messages) == ["ok"]
    with lm_clock() as outer, lm_clock() as replay:  # every open clock hears of the replay, once
        assert lm(messages=messages) == ["ok"]
    assert len(slow_server.chat_requests) == 1
    assert real.seconds >= LATENCY
    # Bounds, not equality: load may stretch either timing, never by a server latency both ways.
    assert LATENCY <= replay.seconds <= real.seconds + LATENCY
    assert replay.seconds <= outer.seconds <= replay.seconds + LATENCY  # the replay is counted once
    assert replay.untimed == 0
    account = lm.ledger.account("reviewer")
    assert (account.calls, account.cache_hits) == (2, 1)
    assert account.seconds < real.seconds + LATENCY  # the hit is booked at its real (~0 s) time
    # Only hashes and seconds are stored: no message text, no key.
    files = [path for path in _store().rglob("*") if path.is_file()]
    assert files
    for path in files:
        text = path.read_text()
        assert "secret" not in text
        if path.suffix == ".json":  # an entry of the one-file-per-request layout (still read)
            assert set(json.loads(text)) == {"seconds"}
        else:
            assert all(re.fullmatch(r"[0-9a-f]{64} \d{10}\.\d{6}", line) for line in text.splitlines() if line)


def test_an_async_cache_hit_counts_at_its_original_time(slow_server: ScriptedOpenAIServer) -> None:
    lm = open_lm(f"openai/m@{slow_server.url}", role="reviewer")
    messages = _messages()

    async def timed() -> float:
        with lm_clock() as clock:
            await lm.acall(messages=messages)
        return clock.seconds

    first, second = asyncio.run(timed()), asyncio.run(timed())
    assert len(slow_server.chat_requests) == 1
    assert first >= LATENCY and LATENCY <= second <= first + LATENCY


def test_a_hit_without_a_known_time_keeps_the_replay_time_and_is_counted(
        slow_server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = open_lm(f"openai/m@{slow_server.url}", role="reviewer")
    messages = _messages()
    lm(messages=messages)
    # As for a cache entry made before the time store existed: no time anywhere.
    monkeypatch.setattr(client, "_CALL_TIMES", {})
    for path in [p for p in _store().rglob("*") if p.is_file()]:
        path.unlink()
    with lm_clock() as clock:
        lm(messages=messages)
    assert len(slow_server.chat_requests) == 1
    assert clock.untimed == 1 and clock.seconds < LATENCY / 2


def test_the_time_survives_the_process_memory(slow_server: ScriptedOpenAIServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    lm = open_lm(f"openai/m@{slow_server.url}", role="reviewer")
    messages = _messages()
    lm(messages=messages)
    monkeypatch.setattr(client, "_CALL_TIMES", {})  # a new process: only the disk store is left
    with lm_clock() as clock:
        lm(messages=messages)
    assert clock.untimed == 0 and clock.seconds >= LATENCY


def test_a_different_request_is_not_timed_as_another(slow_server: ScriptedOpenAIServer) -> None:
    lm = open_lm(f"openai/m@{slow_server.url}", role="reviewer")
    messages = _messages()
    lm(messages=messages)
    slow_server.latency = 0.0
    started = time.perf_counter()
    with lm_clock() as clock:
        lm(messages=messages, temperature=0.7)  # another cache entry: a real, fast call
    wall = time.perf_counter() - started
    # No replayed time is added: the clock says no more than the wall time around it (load-proof).
    assert len(slow_server.chat_requests) == 2 and clock.untimed == 0 and clock.seconds <= wall
