"""In-flight locks: an identical LM request waits for the one being sent and is answered by the cache."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from saag_opt.lm import CostLedger, ModelSpec, SaagLM, chat_completion
from saag_opt.lm.backends import Endpoint
from saag_opt.lm.inflight import lock_dir, one_at_a_time
from saag_opt.lm.retry import RetryPolicy
from saag_opt.testing import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration


def _lm(server: ScriptedOpenAIServer) -> SaagLM:
    return SaagLM(Endpoint("openai/gpt-4o", server.url, "sk-test", 12345), spec=ModelSpec("openai", "gpt-4o"),
                  role="reviewer", ledger=CostLedger(), retry=RetryPolicy(attempts=1), temperature=0.0)


def test_two_identical_requests_at_once_are_sent_once(scripted_server: ScriptedOpenAIServer) -> None:
    scripted_server.handler = lambda request: Reply(text="answer", prompt_tokens=100, completion_tokens=10)
    scripted_server.latency = 0.4
    messages = [{"role": "user", "content": f"review this {uuid.uuid4()}"}]  # never cached before
    results: list = []

    def ask() -> None:
        results.append(chat_completion(_lm(scripted_server), messages))  # a worker of its own: own LM, own ledger

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(scripted_server.chat_requests) == 1
    assert sorted(r.cached for r in results) == [False, True] and {r.text for r in results} == {"answer"}
    assert sorted(r.dollars for r in results)[0] == 0.0
    assert not any((lock_dir() or Path("/nonexistent")).rglob("*.lock"))  # holders remove their lock files

    other = [{"role": "user", "content": f"another {uuid.uuid4()}"}]
    started = time.monotonic()
    threads = [threading.Thread(target=lambda m=m: chat_completion(_lm(scripted_server), m)) for m in (messages, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started < 0.75 and len(scripted_server.chat_requests) == 2  # distinct: not serialised


def _holder(path: Path) -> subprocess.Popen[str]:
    """Another process holding the lock file (as a worker sending the request would)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    code = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_dead_holder_never_blocks_and_a_hung_one_only_until_the_wait_ends(tmp_path: Path) -> None:
    key = "ab" + "0" * 62
    holder = _holder(tmp_path / key[:2] / f"{key}.lock")
    try:
        threading.Timer(0.3, holder.kill).start()  # kill -9 mid-request: the kernel drops its lock
        started = time.monotonic()
        with one_at_a_time(key, tmp_path, wait=30) as held:
            assert held and 0.25 < time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()

    hung = _holder(tmp_path / key[:2] / f"{key}.lock")
    try:
        started = time.monotonic()
        with one_at_a_time(key, tmp_path, wait=0.3) as held:
            assert not held and time.monotonic() - started < 5  # gave up waiting: the request goes out anyway
    finally:
        hung.kill()
        hung.wait()
