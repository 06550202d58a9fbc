"""The compute lock: embedded servers sharing a lock file never compute at once (fake servers, no model).

In-process tests drive ``take_turns`` with a fake ASGI app; the subprocess tests run the real
``shim_server.serve`` and ``EmbeddedServer`` lifecycle around a fake app whose "completion" holds the
CPU for a while and logs when it ran, so overlap, a crashed holder and a stop while waiting are
observed on real processes and a real ``flock``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from saag_opt.lm.embedded import server as embedded
from saag_opt.lm.embedded.compute_lock import ComputeLock, computes, take_turns
from saag_opt.lm.embedded.model_file import LocalModel
from saag_opt.lm.embedded.server import EmbeddedServer
from saag_opt.lm.embedded.shim import Receive, Scope, Send
from tests.conftest import requires

# ------------------------------------------------------------------ in process: the ASGI wrapper


def _scope(path: str, method: str = "POST") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": []}


class FakeApp:
    """An ASGI app whose completions take ``seconds`` and record (start, end)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs: list[tuple[str, float, float]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.monotonic()
        await asyncio.sleep(self.seconds if computes(scope) else 0)
        self.runs.append((scope["path"], start, time.monotonic()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def _call(app: Any, scope: dict[str, Any]) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    await app(scope, receive, send)


def _overlaps(runs: list[tuple[Any, float, float]]) -> int:
    ordered = sorted(runs, key=lambda r: r[1])
    return sum(1 for a, b in zip(ordered, ordered[1:]) if b[1] < a[2])


def test_completions_of_one_server_run_one_at_a_time_and_other_requests_pass(tmp_path: Path) -> None:
    fake = FakeApp(0.2)
    app = take_turns(fake, ComputeLock(tmp_path / "locks" / "compute.lock"))

    async def main() -> float:
        started = time.monotonic()
        calls = [_call(app, _scope(p)) for p in ("/v1/chat/completions", "/v1/completions", "/v1/chat/completions")]
        tasks = [asyncio.ensure_future(c) for c in calls]
        await asyncio.sleep(0.02)
        await _call(app, _scope("/v1/models", "GET"))  # readiness while a completion holds the lock
        ready = time.monotonic() - started
        await asyncio.gather(*tasks)
        return ready

    ready = asyncio.run(main())
    completions = [r for r in fake.runs if r[0].endswith("completions")]
    assert len(completions) == 3 and _overlaps(completions) == 0
    assert ready < 0.15  # /v1/models did not wait for the lock
    assert (tmp_path / "locks" / "compute.lock").exists()  # the folder is made on first use


def _acquired_within(lock: ComputeLock, seconds: float) -> bool:
    """Whether ``lock`` (another open file) can be taken within ``seconds``; released again if so."""
    done = threading.Event()

    def take() -> None:
        lock.acquire()
        done.set()

    threading.Thread(target=take, daemon=True).start()
    if not done.wait(seconds):
        return False
    lock.release()
    return True


def test_two_locks_on_one_file_exclude_each_other_and_a_cancelled_waiter_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "compute.lock"
    other = ComputeLock(path)  # another server's hold (another open file, as in another process)
    other.acquire()
    fake = FakeApp(0.0)
    app = take_turns(fake, ComputeLock(path))

    async def main() -> None:
        waiting = asyncio.ensure_future(_call(app, _scope("/v1/chat/completions")))
        await asyncio.sleep(0.2)
        assert not waiting.done() and fake.runs == []  # it waits for the other server's turn
        waiting.cancel()  # e.g. the server stops
        with pytest.raises(asyncio.CancelledError):
            await waiting
        other.release()
        await asyncio.sleep(0.3)  # its thread gets the lock, then lets go of it and of the queue
        assert await asyncio.get_running_loop().run_in_executor(None, _acquired_within, ComputeLock(path), 2.0), \
            "the cancelled waiter kept the lock"
        await asyncio.wait_for(_call(app, _scope("/v1/completions")), 2.0)  # and this process's queue

    asyncio.run(main())
    assert [r[0] for r in fake.runs] == ["/v1/completions"]  # the cancelled one never ran
    assert _acquired_within(ComputeLock(path), 2.0)


def test_every_embedded_server_gets_the_cache_dirs_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    model = LocalModel("tiny", "tiny.gguf", "tiny-part", "tiny_part", 1, "1.0.0", "0" * 64, "test model")
    servers = [EmbeddedServer(model, tmp_path / "tiny.gguf"), EmbeddedServer(model, tmp_path / "other.gguf")]
    for server in servers:
        server.port = 1234
        command = server.command()
        assert command[command.index("--compute-lock") + 1] == str(tmp_path / "cache" / "compute.lock")
    mine = EmbeddedServer(model, tmp_path / "tiny.gguf", compute_lock=tmp_path / "x.lock")
    mine.port = 1234
    assert str(tmp_path / "x.lock") in mine.command()


# ------------------------------------------------------------------ real processes: serve + EmbeddedServer

_UVICORN = importlib.util.find_spec("uvicorn") is not None

FAKE_SERVER = r'''
import asyncio, json, os, sys, time
from saag_opt.lm.embedded.compute_lock import ComputeLock, computes, take_turns
from saag_opt.lm.embedded.shim_server import serve

port, lock, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if computes(scope):
        seconds = json.loads(body)["seconds"]
        start = time.time()
        await asyncio.get_running_loop().run_in_executor(None, busy, seconds)  # like llama's threadpool call
        with open(log, "a") as out:
            out.write(json.dumps([os.getpid(), start, time.time()]) + "\n")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"object": "list", "data": []}'})

serve(take_turns(app, ComputeLock(lock)), "127.0.0.1", port)
'''

_TINY = LocalModel("tiny", "tiny.gguf", "tiny-part", "tiny_part", 1, "1.0.0", "0" * 64, "test model")
needs_uvicorn = requires(None if _UVICORN else "uvicorn is not installed (pip install 'saag-opt[local]')")


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], EmbeddedServer]]:
    """``start(name, lock file)``: a fake compute server started and stopped as EmbeddedServer does it.

    It logs each completion's (pid, start, end) to ``<tmp_path>/<name>.runs``.
    """
    monkeypatch.setattr(embedded, "require_llama_cpp", lambda: None)
    started: list[EmbeddedServer] = []

    def start(name: str, lock: str) -> EmbeddedServer:
        server = EmbeddedServer(_TINY, tmp_path / "tiny.gguf", compute_lock=tmp_path / lock,
                                log_dir=tmp_path / "logs", startup_timeout=30)
        monkeypatch.setattr(server, "command", lambda: [sys.executable, "-c", FAKE_SERVER, str(server.port),
                                                        str(server.compute_lock), str(tmp_path / f"{name}.runs")])
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


def _complete(server: EmbeddedServer, seconds: float, timeout: float = 60) -> int:
    request = urllib.request.Request(server.url + "/chat/completions", data=json.dumps({"seconds": seconds}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(response.status)


def _runs(folder: Path, *names: str) -> list[tuple[int, float, float]]:
    """Every logged completion of the named fake servers: (pid, start, end)."""
    rows: list[tuple[int, float, float]] = []
    for name in names:
        path = folder / f"{name}.runs"
        rows += [tuple(json.loads(line)) for line in path.read_text().splitlines()] if path.exists() else []
    return rows


def _pid(server: EmbeddedServer) -> int:
    assert server.process is not None
    return server.process.pid


DEAD_SERVER = (urllib.error.URLError, ConnectionError, OSError)
"""What a client of a server that is gone sees (the LM layer retries, then says so)."""


@needs_uvicorn
def test_two_servers_sharing_the_lock_never_compute_at_once(fake_server: Any, tmp_path: Path) -> None:
    base, reviewer = fake_server("base", "compute.lock"), fake_server("reviewer", "compute.lock")
    with ThreadPoolExecutor(6) as pool:  # like evaluate --workers 3: requests to both models at once
        statuses = list(pool.map(lambda s: _complete(s, 0.15), [base, reviewer] * 3))
    assert statuses == [200] * 6
    runs = _runs(tmp_path, "base", "reviewer")
    assert len(runs) == 6 and {pid for pid, _, _ in runs} == {_pid(base), _pid(reviewer)}
    assert _overlaps(runs) == 0


@needs_uvicorn
def test_without_a_shared_lock_the_same_requests_overlap(fake_server: Any, tmp_path: Path) -> None:
    """The check above can fail: two lock files, so the two computations run side by side."""
    base, reviewer = fake_server("base", "a.lock"), fake_server("reviewer", "b.lock")
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda s: _complete(s, 0.5), [base, reviewer])) == [200, 200]
    assert _overlaps(_runs(tmp_path, "base", "reviewer")) == 1


@needs_uvicorn
def test_a_crashed_holder_hands_the_lock_over(fake_server: Any, tmp_path: Path) -> None:
    holder, waiter = fake_server("holder", "compute.lock"), fake_server("waiter", "compute.lock")
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(_complete, holder, 60)
        time.sleep(0.5)
        waiting = pool.submit(_complete, waiter, 0.1)
        time.sleep(0.5)
        assert not waiting.done()  # the holder computes
        os.kill(_pid(holder), signal.SIGKILL)
        killed = time.monotonic()
        assert waiting.result(timeout=10) == 200
        assert time.monotonic() - killed < 5
        with pytest.raises(DEAD_SERVER):
            held.result(timeout=10)
    assert [pid for pid, _, _ in _runs(tmp_path, "holder", "waiter")] == [_pid(waiter)]


@needs_uvicorn
def test_a_stop_while_waiting_or_computing_is_immediate_and_frees_the_lock(fake_server: Any, tmp_path: Path) -> None:
    holder, waiter = fake_server("holder", "compute.lock"), fake_server("waiter", "compute.lock")
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(_complete, holder, 3)
        time.sleep(0.5)
        waiting = pool.submit(_complete, waiter, 0.1)
        time.sleep(0.5)
        process, stopping = waiter.process, time.monotonic()
        waiter.stop(timeout=10)  # SIGTERM; the kill would come only after 10 s
        assert time.monotonic() - stopping < 2
        assert process is not None and process.returncode == 0  # it exited, it was not killed
        with pytest.raises(DEAD_SERVER):
            waiting.result(timeout=10)
        assert held.result(timeout=30) == 200  # the holder was not disturbed
    assert waiter.log_path is not None and "Traceback" not in waiter.log_path.read_text()
    third = fake_server("third", "compute.lock")
    assert _complete(third, 0.1, timeout=10) == 200  # the waiter left nothing locked
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_complete, third, 30)
        time.sleep(0.5)
        process, stopping = third.process, time.monotonic()
        third.stop(timeout=10)
        assert time.monotonic() - stopping < 2 and process is not None and process.returncode == 0
        with pytest.raises(DEAD_SERVER):
            running.result(timeout=10)
    assert _complete(holder, 0.1, timeout=10) == 200  # nor did the stop while computing
