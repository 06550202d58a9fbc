"""One embedded model computes at a time: an ``flock`` every embedded server of a cache dir shares.

Why: each llama.cpp server runs as many threads as the machine has cores, and its threads meet at a
barrier several times per layer. Two servers decoding at once (``--base local:qwen2.5-coder-0.5b
--reviewer local:qwen2.5-coder-1.5b``, or two saag-opt processes) put twice the threads on the cores,
and a thread waiting for its preempted partner wastes its core: two servers on 2 cores made every
call about 10x slower (``tune.workers``), and other load made a base call 2.3-3.5x slower
(``embedded.SPIN_COUNT``). Taking turns gives each completion all the cores.

``take_turns`` wraps the server's ASGI app: a completion waits for its process's turn (an asyncio
lock, so queued requests hold no thread), then for the cache dir's (an exclusive ``flock`` on
``ComputeLock.path``, taken in one executor thread), and holds both until its reply is sent. Other
requests (``GET /v1/models``, tokenize) pass, so a server answers its readiness check while the
other model computes. The kernel drops a ``flock`` when its holder dies, however it dies, and wakes
a waiter when the holder lets go (hand-over measured in docs/design.md §26). The
lock changes *when* a completion runs, never what it computes: each server keeps its own model,
context and prompt cache.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from saag_opt.lm.embedded.shim import ASGIApp, Receive, Scope, Send

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: a server's own requests still queue, servers do not take turns
    fcntl = None  # type: ignore[assignment]

COMPUTE_SUFFIXES = ("/completions", "/embeddings")
"""POST paths that run the model (chat and text completions, embeddings); every other request passes."""


class ComputeLock:
    """An exclusive ``flock`` on ``path`` (created with its folder on first use).

    One holder per instance at a time (``take_turns`` sees to it within a server): ``flock`` belongs
    to the open file, so two threads on one instance would not exclude each other.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Block until this process holds the lock."""
        if fcntl is None:  # pragma: no cover - Windows
            return
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        """Let the next waiter (of any process) compute."""
        if fcntl is not None and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def computes(scope: Scope) -> bool:
    """True for a request that runs the model (``COMPUTE_SUFFIXES``)."""
    return (scope.get("type") == "http" and scope.get("method") == "POST"
            and str(scope.get("path", "")).endswith(COMPUTE_SUFFIXES))


def take_turns(app: ASGIApp, lock: ComputeLock) -> ASGIApp:
    """Wrap ``app`` so each model-running request holds ``lock`` until its reply is sent."""
    turn = asyncio.Lock()  # this process's queue: one request at a time waits for the flock

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if not computes(scope):
            await app(scope, receive, send)
            return
        await _acquire(turn, lock)
        try:
            await app(scope, receive, send)
        finally:
            lock.release()
            turn.release()

    return wrapped


async def _acquire(turn: asyncio.Lock, lock: ComputeLock) -> None:
    """This process's turn, then ``lock.acquire`` in an executor thread.

    A request cancelled while its thread waits keeps both until the thread has the lock, then lets
    go of them: the next request must not wait on the same open file, where ``flock`` would let it in.
    """
    await turn.acquire()
    waiting = asyncio.get_running_loop().run_in_executor(None, lock.acquire)
    try:
        await asyncio.shield(waiting)
    except asyncio.CancelledError:
        def let_go(done: asyncio.Future[None]) -> None:
            if done.exception() is None:
                lock.release()
            turn.release()

        waiting.add_done_callback(let_go)
        raise
    except BaseException:
        turn.release()
        raise


__all__ = ["COMPUTE_SUFFIXES", "ComputeLock", "computes", "take_turns"]
