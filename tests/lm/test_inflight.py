"""In-flight locks: an identical LM request waits for the one being sent and is answered by the cache."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from saag_opt.lm import CostLedger, ModelSpec, SaagLM, chat_completion, inflight
from saag_opt.lm.backends import Endpoint
from saag_opt.lm.inflight import lock_dir, one_at_a_time
from saag_opt.lm.retry import RetryPolicy
from saag_opt.testing import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["ofd", "file"] if inflight.OFD_LOCKS else ["file"])
def locks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs with the byte locks of one shared file (Linux) and with a lock file per request."""
    monkeypatch.setattr(inflight, "OFD_LOCKS", request.param == "ofd")
    yield request.param


def _lm(server: ScriptedOpenAIServer) -> SaagLM:
    return SaagLM(Endpoint("openai/gpt-4o", server.url, "sk-test", 12345), spec=ModelSpec("openai", "gpt-4o"),
                  role="reviewer", ledger=CostLedger(), retry=RetryPolicy(attempts=1), temperature=0.0)


def test_two_identical_requests_at_once_are_sent_once(scripted_server: ScriptedOpenAIServer, locks: str) -> None:
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
    left = {p.name for p in (lock_dir() or Path("/nonexistent")).rglob("*.lock")}
    assert left <= {inflight.LOCK_FILE}  # no lock file per request is left behind (the shared one stays)

    other = [{"role": "user", "content": f"another {uuid.uuid4()}"}]
    started = time.monotonic()
    threads = [threading.Thread(target=lambda m=m: chat_completion(_lm(scripted_server), m)) for m in (messages, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started < 0.75 and len(scripted_server.chat_requests) == 2  # distinct: not serialised


def _holder(key: str, directory: Path, locks: str) -> subprocess.Popen[str]:
    """Another process holding the lock of ``key`` (as a worker sending the request would), by the module's own rule."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom saag_opt.lm import inflight\n"
            "inflight.OFD_LOCKS = sys.argv[3] == 'ofd'\n"
            "with inflight.one_at_a_time(sys.argv[1], Path(sys.argv[2])) as held:\n"
            "    print('held' if held else 'not held', flush=True)\n    time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen([sys.executable, "-c", code, key, str(directory), locks], stdout=subprocess.PIPE,
                              text=True, env=env)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_dead_holder_never_blocks_and_a_hung_one_only_until_the_wait_ends(tmp_path: Path, locks: str) -> None:
    key = "ab" + "0" * 62
    holder = _holder(key, tmp_path, locks)
    try:
        threading.Timer(0.3, holder.kill).start()  # kill -9 mid-request: the kernel drops its lock
        started = time.monotonic()
        with one_at_a_time(key, tmp_path, wait=30) as held:
            assert held and 0.25 < time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()

    hung = _holder(key, tmp_path, locks)
    try:
        started = time.monotonic()
        with one_at_a_time(key, tmp_path, wait=0.3) as held:
            assert not held and time.monotonic() - started < 5  # gave up waiting: the request goes out anyway
        other = "ab" + "1" * 62  # same first hex digits, another request: never waits for it
        started = time.monotonic()
        with one_at_a_time(other, tmp_path, wait=5) as held:
            assert held and time.monotonic() - started < 1
    finally:
        hung.kill()
        hung.wait()


def test_threads_of_one_process_exclude_each_other_and_a_lock_costs_no_file(tmp_path: Path, locks: str) -> None:
    """Two threads, same request: the second waits for the first (each thread has its own handle)."""
    key = "cd" + "2" * 62
    order: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with one_at_a_time(key, tmp_path) as held:
            assert held
            order.append("first in")
            inside.set()
            time.sleep(0.3)
            order.append("first out")

    def second() -> None:
        inside.wait()
        with one_at_a_time(key, tmp_path) as held:
            assert held
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert order == ["first in", "first out", "second in"]
    for n in range(20):  # many distinct requests: no file per request, none left behind
        with one_at_a_time(f"{n:02x}" + "3" * 62, tmp_path) as held:
            assert held
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == (["requests.lock"] if locks == "ofd" else [])


def test_a_request_hash_that_is_not_hex_still_gets_a_stable_byte() -> None:
    assert inflight.request_offset("f" * 64) == 2**60 - 1
    assert inflight.request_offset("not hex") == inflight.request_offset("not hex") < 2**60
