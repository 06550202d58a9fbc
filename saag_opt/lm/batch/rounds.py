"""Rounds of independent LM calls sent as one Batch API job each (``evaluate --batch``, ``compare --batch``).

docs/design.md §23 has the design; in short:

Why here, under the LM client, and not a second evaluation loop: an evaluation already runs its
examples concurrently on worker threads, and at any moment the calls they wait on are independent
(every example's base proposal; then the first reviews; then the revisions; ...). So the evaluate
loop stays as it is, and each worker's LM call, instead of going out on its own, joins the open
*round*; the round is submitted as one batch (one per model) when every active worker waits on it, or
``ROUND_MAX_WAIT`` seconds after it opened (a worker stuck elsewhere, e.g. waiting for room under
``--max-cost``, cannot hold it back). The workers wake when their batch ends, each with its own reply.

How a request gets there: ``SaagLM`` sends a batched call through a *twin* of itself (``BatchRoute``):
the same dspy LM with the same options, so the same dspy cache entry, whose native engine has a
transport (``BatchTransport``) that hands the request body to the rounds instead of the network and
gives back the batch's reply as the HTTP response. dspy builds the body and reads the reply exactly
as on a direct call, so a batched reply is the direct reply, byte for byte, and cached under the
same key: a resumed or repeated run finds finished calls in the cache, free.

Resume: before a batch is created, its *intent* (a key chosen here, which also goes into the
batch's metadata) and its requests' ``custom_id`` (a hash of the request body) are written atomically
to ``batches.json`` in the run directory; its id is added as soon as it exists. A resumed run that
asks a request of a recorded batch polls that batch (still in flight, or finished while the run was
stopped) instead of paying for it again; a recorded intent without an id (the run died in between)
is looked up on the server by its metadata (``BatchClient.find``) and polled if it was made, its
requests going into the next round if it was not. A recorded batch the server no longer knows
(deleted, or another key's) is dropped, saying so, and its requests go into the next round.

Fallback, per request: a failed line, a request an expired batch never answered, or a batch that
failed validation, is sent again as an ordinary call (``BatchFallback``; ``SaagLM`` does it, at the
full price). A server without a Batch API, a rejected key or a batch that cannot be polled stop the
run (``ModelUnavailableError``; the intents and batch ids are kept, so ``--resume`` continues).

The twin relies on dspy 3.4.1's engine plumbing (``select_backend``, ``LM15Engine``,
``RouterConfig(transport=...)``); tests/lm/test_batching.py fails if a dspy upgrade changes it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
from dspy._vendor.lm15.transports import TransportRequest, TransportResponse
from dspy.clients.backend_selection import select_backend
from dspy.clients.engines.lm15_engine import LM15Engine
from dspy.lm15 import RouterConfig

from saag_opt import stopping
from saag_opt.atomic import atomic_write_json
from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.events import EventSink, emit
from saag_opt.lm.batch.api import BatchClient, BatchStatus, LineResult, NotCreated, UnknownBatch, request_line
from saag_opt.runfiles import utc_now

log = logging.getLogger(__name__)

BATCHES_FILE = "batches.json"
ROUND_MAX_WAIT = 2.0
"""Seconds an open round waits for workers that are busy elsewhere before it is submitted anyway."""
FIRST_POLL, MAX_POLL = 0.25, 30.0
"""Seconds between polls of a batch: from FIRST_POLL, growing by half each time, up to MAX_POLL."""
BATCH_WORKERS = 512
"""Examples in flight at once under ``--batch`` (each waits on its batch, so a round can be this big)."""
CREATING, DROPPED = "creating", "dropped"
"""``batches.json`` statuses of our own: the intent is written, the batch not known yet; the batch will
never answer (never made, or the server no longer knows it) and its requests were sent again. A
dropped row is kept (with ``dropped``: why) and never polled again."""


class BatchFallback(Exception):
    """This request has no answer from its batch (a failed line, an expired or failed batch): send it directly."""


def custom_id(body: dict[str, Any]) -> str:
    """The request's id inside a batch: a hash of its body, so the same request has it in every run."""
    return "r-" + hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:40]


@dataclass
class _Entry:
    """One request waiting for its answer (several workers may wait on one identical request)."""

    body: dict[str, Any]
    result: LineResult | None = None
    failure: BaseException | None = None
    waiters: int = 0
    job: _Job | None = None


@dataclass
class _Job:
    """One batch: submitted by this run, or recorded in ``batches.json`` by an earlier attempt (``row``)."""

    client: BatchClient
    model: str
    entries: dict[str, _Entry]
    batch_id: str | None = None
    custom_ids: list[str] = field(default_factory=list)
    results: dict[str, LineResult] | None = None
    status: str = "new"
    polling: bool = False
    intent: str | None = None
    since: float = 0.0
    """When its intent was written (unix seconds): no batch of it is older."""
    earlier: bool = False
    """Recorded by an earlier attempt of the run, not created by this one."""
    row: dict[str, Any] | None = None
    """Its row in ``batches.json`` (None until it is written)."""

    @property
    def shown(self) -> str:
        """How messages name it: its id, or its intent while it has none."""
        return f"batch {self.batch_id}" if self.batch_id else f"batch intent {self.intent}"


class BatchRounds:
    """The rounds of one run: collects requests, submits them as batches, polls, hands out the replies.

    Args:
        run_dir: where ``batches.json`` is kept (None: nothing is persisted, no resume).
        on_event: progress sink; every status change of a batch is a ``batch`` event.
        max_wait: ``ROUND_MAX_WAIT``.
    """

    def __init__(self, run_dir: Path | None = None, *, on_event: EventSink | None = None,
                 max_wait: float = ROUND_MAX_WAIT) -> None:
        self.run_dir, self.on_event, self.max_wait = run_dir, on_event, max_wait
        self._cond = threading.Condition()
        self._active = 0
        self._pending = 0
        self._capacity: int | None = None
        self._open: dict[tuple[str, str, str], _Entry] = {}
        self._open_clients: dict[tuple[str, str], BatchClient] = {}
        self._opened_at: float | None = None
        self._waiting_open = 0
        self._inflight: dict[tuple[str, str, str], _Job] = {}
        self._jobs: list[_Job] = []
        self._recorded: dict[tuple[str, str, str], deque[dict[str, Any]]] = {}
        self._recorded_jobs: dict[int, _Job] = {}  # by id() of its row
        self._rows: list[dict[str, Any]] = []
        self._save_lock = threading.Lock()
        self._closed = False
        self._load()

    def __deepcopy__(self, memo: dict) -> BatchRounds:
        """Shared by every copy of the LMs that use it (dspy copies programs and their LMs)."""
        return self

    def close(self) -> None:
        """End the rounds (the run is over or stopping): waiting workers give up, pollers end, nothing is submitted.

        The batches in flight are in ``batches.json``; a resumed run polls them.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- workers ---------------------------------------------------------------------------------
    def expect(self, examples: int, workers: int) -> None:
        """``examples`` will run on ``workers`` threads: a round also waits for those not started yet.

        Without it the first worker to ask would find itself alone and submit a round of one.
        """
        with self._cond:
            self._pending += max(0, examples)
            self._capacity = max(1, workers)

    @contextmanager
    def worker(self) -> Iterator[None]:
        """While an example runs: a round is submitted once every such worker waits on it."""
        with self._cond:
            self._pending = max(0, self._pending - 1)
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._maybe_flush()

    def ask(self, client: BatchClient, model: str, body: dict[str, Any]) -> dict[str, Any]:
        """The reply body to one chat request, through the batch of its round; blocks until it is there.

        Raises:
            BatchFallback: the batch has no answer for it (send it directly).
            ModelUnavailableError: the Batch API is missing, refuses the key or cannot be polled.
            stopping.RunInterrupted: a stop was requested while waiting.
        """
        key = (client.where, model, custom_id(body))
        with self._cond:
            entry, job = self._attach(key, client, model, body)
            if entry is None and job is not None:
                return self._answer(job.results.get(key[2]) if job.results is not None else None, job)
            assert entry is not None
            while entry.result is None and entry.failure is None:
                if self._closed or stopping.requested():  # one stop ends every waiter, even after a reset
                    self._closed = True
                    self._cond.notify_all()
                    if key in self._open and self._open[key] is entry:
                        entry.waiters -= 1
                        self._waiting_open -= 1
                    raise stopping.RunInterrupted(signal.SIGTERM)
                self._cond.wait(timeout=0.2 if self._opened_at is None else
                                max(0.01, min(0.2, self._opened_at + self.max_wait - time.monotonic())))
                self._maybe_flush()
            if entry.failure is not None:
                raise entry.failure
            return self._answer(entry.result, entry.job)

    def _attach(self, key: tuple[str, str, str], client: BatchClient, model: str,
                body: dict[str, Any]) -> tuple[_Entry | None, _Job | None]:
        """Join the batch that already has this request (recorded, in flight) or the open round."""
        recorded = self._recorded.get(key)
        if recorded:
            row = recorded.popleft()
            job = self._recorded_jobs.get(id(row))
            if job is None:
                job = _Job(client, model, {}, row.get("id"), list(row["custom_ids"]), status=row.get("status", "?"),
                           intent=row.get("intent"), since=float(row.get("intent_at") or 0.0), earlier=True,
                           row=row)
                self._recorded_jobs[id(row)] = job
            if job.results is not None:
                return None, job
            entry = job.entries.setdefault(key[2], _Entry(body, job=job))
            entry.waiters += 1  # counted in the open round if the batch is dropped (``_resend``)
            if not job.polling:
                job.polling = True
                doing = "polling it again" if job.batch_id else "looking for it on the server"
                emit(self.on_event, "batch", f"{job.shown} ({model}) from the earlier attempt: {doing} instead of "
                     "paying twice", batch_id=job.batch_id, model=model, status="resumed")
                threading.Thread(target=self._run, args=(job,), daemon=True, name="saag-batch").start()
            return entry, job
        job = self._inflight.get(key)
        if job is not None:
            return job.entries[key[2]], job
        opened = self._open.get(key)
        if opened is None:
            opened = self._open[key] = _Entry(body)
            self._open_clients[key[:2]] = client
            self._opened_at = self._opened_at or time.monotonic()
        opened.waiters += 1
        self._waiting_open += 1
        self._maybe_flush()
        return opened, None

    def _answer(self, result: LineResult | None, job: _Job | None) -> dict[str, Any]:
        if result is not None and result.body is not None:
            return result.body
        where = f"batch {job.batch_id}" if job is not None else "its batch"
        why = result.error if result is not None else f"not answered ({job.status if job else 'unknown'})"
        raise BatchFallback(f"{where}: {why}")

    def _maybe_flush(self) -> None:
        """Submit the open round when no active worker can add to it any more, or it waited long enough."""
        if not self._open or self._opened_at is None or self._closed:
            return
        busy = self._active + self._pending
        expected = busy if self._capacity is None else min(busy, self._capacity)
        if self._waiting_open < expected and time.monotonic() - self._opened_at < self.max_wait:
            return
        groups: dict[tuple[str, str], dict[str, _Entry]] = {}
        for (where, model, cid), entry in self._open.items():
            groups.setdefault((where, model), {})[cid] = entry
        for (where, model), entries in groups.items():
            job = _Job(self._open_clients[(where, model)], model, entries, polling=True)
            self._jobs.append(job)
            for cid, entry in entries.items():
                entry.job = job
                self._inflight[(where, model, cid)] = job
            threading.Thread(target=self._run, args=(job,), daemon=True, name="saag-batch").start()
        self._open, self._open_clients, self._opened_at, self._waiting_open = {}, {}, None, 0

    # -- one batch ---------------------------------------------------------------------------------
    def _run(self, job: _Job) -> None:
        """Submit (unless recorded), poll until done, hand out the answers. A daemon thread per batch."""
        try:
            if job.batch_id is None and not (self._find(job) if job.earlier else self._create(job)):
                return
            try:
                status = self._poll(job)
            except UnknownBatch:
                if not job.earlier:  # this run's own, gone already: stop (resending could go on for ever)
                    raise
                self._resend(job, f"is unknown to {job.client.where} (deleted, past its retention, or made with "
                             "another key or project)")
                return
            if status is None:  # a stop: the waiting workers give up on their own (the batch is recorded)
                self.close()
                return
            results = job.client.results(status)
            with self._cond:
                job.results, job.status = results, status.status
                self._save(job)  # on disk before a worker sees an answer: a run that stops then finds the batch done
                for cid, entry in job.entries.items():
                    entry.result = results.get(cid) or LineResult(error=f"not answered (batch {status.status})")
                for cid in job.entries:
                    self._inflight.pop((job.client.where, job.model, cid), None)
                self._cond.notify_all()
            answered = sum(1 for cid in job.custom_ids if results.get(cid) and results[cid].body is not None)
            emit(self.on_event, "batch", f"batch {job.batch_id} ({job.model}) {status.status}: {answered}/"
                 f"{len(job.custom_ids)} answered" + (f", {len(job.custom_ids) - answered} sent again directly"
                                                      if answered < len(job.custom_ids) else ""),
                 batch_id=job.batch_id, model=job.model, status=status.status, answered=answered,
                 total=len(job.custom_ids))
        except BaseException as exc:  # noqa: BLE001 - any failure reaches the waiting workers, never lost here
            if isinstance(exc, UnknownBatch):
                again = "--resume drops it and sends its requests again"
            elif job.batch_id is not None:
                again = "--resume polls it again"
            else:
                again = "--resume looks for it on the server before sending its requests again"
            failure = exc if isinstance(exc, ModelUnavailableError) else ModelUnavailableError(
                f"{job.shown} at {job.client.where}: {_first_line(exc)}; {again}")
            with self._cond:
                for cid, entry in job.entries.items():
                    entry.failure = failure
                    self._inflight.pop((job.client.where, job.model, cid), None)
                self._cond.notify_all()

    def _create(self, job: _Job) -> bool:
        """Write the intent down, then create the batch (True: it exists)."""
        job.custom_ids, job.intent, job.since = list(job.entries), f"i-{uuid.uuid4().hex}", time.time()
        job.status = CREATING
        self._save(job)  # on disk before the batch can exist: a resumed run finds it rather than paying twice
        try:
            job.batch_id = job.client.submit([request_line(cid, e.body) for cid, e in job.entries.items()],
                                             intent=job.intent, metadata={"created_by": "saag-opt"})
        except NotCreated as exc:  # refused: nothing to look for on resume
            job.status = DROPPED
            self._save(job, dropped=f"not created: {exc}")
            raise
        job.status = "submitted"
        self._save(job)
        emit(self.on_event, "batch", f"batch {job.batch_id} ({job.model}): {len(job.entries)} requests submitted",
             batch_id=job.batch_id, model=job.model, status="submitted", total=len(job.entries))
        return True

    def _find(self, job: _Job) -> bool:
        """An intent the earlier attempt wrote but no id: look the batch up (True), or resend its requests."""
        job.batch_id = job.client.find(str(job.intent), since=job.since)
        if job.batch_id is None:
            self._resend(job, "was never created")
            return False
        job.status = "found"
        self._save(job)
        emit(self.on_event, "batch", f"batch {job.batch_id} ({job.model}) of intent {job.intent}: created by the "
             "earlier attempt, which stopped before it wrote the id down; polling it", batch_id=job.batch_id,
             model=job.model, status="found")
        return True

    def _resend(self, job: _Job, why: str) -> None:
        """``job`` (an earlier attempt's) will never answer: drop its row; its requests join the open round.

        Those waiting now are moved there; the rest of its requests go there when they are asked.
        """
        job.status = DROPPED
        self._save(job, dropped=why)
        emit(self.on_event, "batch", f"{job.shown} ({job.model}) from the earlier attempt {why}: dropped; its "
             f"{len(job.custom_ids)} requests are sent again in new batches", batch_id=job.batch_id,
             model=job.model, status=DROPPED)
        with self._cond:
            for cid in job.custom_ids:
                key = (job.client.where, job.model, cid)
                if key in self._recorded:
                    self._recorded[key] = deque(row for row in self._recorded[key] if row is not job.row)
            for cid, entry in job.entries.items():
                key = (job.client.where, job.model, cid)
                entry.job = None
                if key in self._open:  # the same request is open already (another copy): this one goes directly
                    entry.result = LineResult(error=f"{job.shown} {why}")
                    continue
                self._open[key] = entry
                self._open_clients[key[:2]] = job.client
                self._waiting_open += entry.waiters
                self._opened_at = self._opened_at or time.monotonic()
            job.entries = {}
            self._maybe_flush()
            self._cond.notify_all()

    def _poll(self, job: _Job) -> BatchStatus | None:
        """Poll until the batch ends (None on a stop); each change of status or counts is an event."""
        assert job.batch_id is not None
        delay, seen = FIRST_POLL, None
        while True:
            status = job.client.status(job.batch_id)
            now = (status.status, status.completed, status.failed)
            if now != seen:
                seen = now
                job.status = status.status
                emit(self.on_event, "batch", f"batch {status.id} ({job.model}): {status.status}, "
                     f"{status.completed}/{status.total or len(job.custom_ids)} done, {status.failed} failed",
                     batch_id=status.id, model=job.model, status=status.status, completed=status.completed,
                     failed=status.failed, total=status.total)
            if status.done:
                return status
            if not stopping.sleep(delay) or self._closed:
                return None
            delay = min(delay * 1.5, MAX_POLL)

    # -- batches.json ------------------------------------------------------------------------------
    def _load(self) -> None:
        if self.run_dir is None or not (self.run_dir / BATCHES_FILE).is_file():
            return
        try:
            rows = json.loads((self.run_dir / BATCHES_FILE).read_text())["batches"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{self.run_dir / BATCHES_FILE}: unreadable ({exc}); move it aside to pay for the "
                              "batches again") from exc
        self._rows = [row for row in rows if isinstance(row, dict) and (row.get("id") or row.get("intent"))]
        for row in self._rows:
            if row.get("status") == DROPPED:
                continue
            for cid in row.get("custom_ids") or []:
                self._recorded.setdefault((row["server"], row["model"], cid), deque()).append(row)

    def _save(self, job: _Job, *, dropped: str | None = None) -> None:
        """Record (or update) ``job`` in ``batches.json``, atomically: server URL, model, intent, ids; never a key.

        ``dropped``: why it will never answer (with status ``DROPPED``). A row written before intents
        existed has only an id (still read: see ``_load``).
        """
        if self.run_dir is None:
            return
        with self._save_lock:
            if job.row is None:
                job.row = {"id": job.batch_id, "intent": job.intent, "intent_at": round(job.since, 3),
                           "server": job.client.where, "model": job.model, "custom_ids": job.custom_ids,
                           "submitted": utc_now()}
                self._rows.append(job.row)
            job.row["id"], job.row["status"] = job.batch_id, job.status
            if dropped is not None:
                job.row["dropped"] = dropped
            atomic_write_json(self.run_dir / BATCHES_FILE, {"schema_version": 1, "batches": self._rows})


class BatchTransport:
    """lm15's transport contract (``stream(request) -> response``) answered by the rounds, not the network."""

    def __init__(self, rounds: BatchRounds, client: BatchClient) -> None:
        self.rounds, self.client = rounds, client

    def stream(self, request: TransportRequest) -> TransportResponse:
        """The batch's reply to a chat request, as the HTTP response a direct call would have had.

        Raises:
            BatchFallback: not a chat request, or the batch did not answer it.
        """
        if request.method != "POST" or not request.url.rstrip("/").endswith("/chat/completions"):
            raise BatchFallback(f"{request.method} {request.url.rsplit('/', 1)[-1]} cannot go through a batch")
        body = json.loads(request.body)
        data = json.dumps(self.rounds.ask(self.client, str(body.get("model")), body)).encode()
        return TransportResponse(status=200, reason="OK", http_version="HTTP/1.1", chunks=iter([data]),
                                 headers=[("content-type", "application/json"), ("content-length", str(len(data)))],
                                 release=lambda body_consumed: None)

    def close(self) -> None:
        """Nothing to release (the SDK client of the batches is the rounds')."""


class BatchRoute:
    """What a ``SaagLM`` sends a batched call through: its twin, whose engine's transport is the rounds."""

    def __init__(self, lm: dspy.LM, rounds: BatchRounds, client: BatchClient) -> None:
        selection = select_backend(lm, {})
        if not selection.native or selection.resolution is None:
            raise ConfigError(f"--batch: {lm.model} does not go through dspy's native OpenAI engine, so its "
                              "requests cannot be batched")
        provider = selection.resolution.provider
        config = RouterConfig(api_keys={provider: client.api_key}, base_urls={provider: client.where},
                              providers=tuple(b.definition for b in getattr(lm, "_providers", ())),
                              transport=BatchTransport(rounds, client))
        twin = copy.copy(lm)
        twin._engine_spec = LM15Engine(config, model_type=lm.model_type)
        twin._async_engine_spec = None
        twin._engine_store = {}
        twin._engine_lock = threading.RLock()
        self.rounds, self.twin = rounds, twin

    def __deepcopy__(self, memo: dict) -> BatchRoute:
        """Shared, like the rounds (its engine holds locks)."""
        return self

    def call(self, prompt: Any, messages: Any, **kwargs: Any) -> Any:
        """Dspy's own call on the twin: its cache first, then the batch."""
        return dspy.LM.__call__(self.twin, prompt, messages=messages, **kwargs)


def batch_failure(exc: BaseException) -> BaseException | None:
    """The ``BatchFallback`` or systemic failure behind ``exc`` (dspy wraps what an engine raises), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (BatchFallback, ModelUnavailableError, stopping.RunInterrupted)):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


__all__ = ["BATCHES_FILE", "BATCH_WORKERS", "ROUND_MAX_WAIT", "BatchFallback", "BatchRoute", "BatchRounds",
           "BatchTransport", "batch_failure", "custom_id"]
