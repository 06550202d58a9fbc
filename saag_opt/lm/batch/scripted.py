"""The scripted server's ``/v1/files`` and ``/v1/batches``: OpenAI's Batch API, offline (``--batch`` tests).

What it does, as OpenAI documents it: an uploaded JSONL file (``purpose=batch``) of
``{"custom_id", "method", "url", "body"}`` lines becomes a batch that moves ``validating`` ->
``in_progress`` -> ``completed`` and then has an output file (one ``{"id", "custom_id",
"response": {"status_code", "body"}, "error"}`` line per answered request) and an error file (the
requests that failed). Each stage lasts ``delay`` seconds of wall time, so a client's polls see it
move. A batch may instead be scripted to ``expire`` (the first half of its requests are answered, the
rest are in the error file with code ``batch_expired``, as OpenAI does when the 24 h window passes)
or to ``fail`` (validation failed: no output at all). A line whose handler result is a ``Fault`` is a
failed request (its HTTP status, or 500) in the error file, and so is a line ``failing(body)`` picks
(a provider-side failure of that line only: the same request sent directly succeeds). Lines are answered by the server's own
handler, so a batched request gets exactly the reply the same request gets from ``/chat/completions``.

``GET /v1/batches`` lists them newest first, paged by ``after`` and ``limit`` (1-100, default 20), with
their ``metadata``, as OpenAI does: how a client finds a batch whose id it never got. Two faults of the
server's side: ``lose_replies`` (a create makes its batch, then its answer is lost: the connection is
reset) and ``forget`` (the server no longer knows a batch: deleted, or another key's).

Standard library only, like the server.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Literal

BatchOutcome = Literal["complete", "expire", "fail"]
TERMINAL = ("completed", "expired", "failed", "cancelled")


@dataclass
class _Batch:
    """One batch job: its lines, when it was created, what it is scripted to become."""

    id: str
    input_file_id: str
    endpoint: str
    lines: list[dict[str, Any]]
    created: float
    outcome: BatchOutcome
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: int = field(default_factory=lambda: int(time.time()))
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)


class BatchDesk:
    """Files and batches of one scripted server.

    Args:
        answer: the server's reply to one chat request body: ``(status, response body)``.
        delay: seconds each of ``validating`` and ``in_progress`` lasts.
    """

    def __init__(self, answer: Callable[[dict], tuple[int, dict]], *, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self._files: dict[str, tuple[str, bytes]] = {}
        self._batches: dict[str, _Batch] = {}
        self._plan: deque[BatchOutcome] = deque()
        self._lock = threading.RLock()
        self.line_bodies: list[dict[str, Any]] = []
        """Every request body answered inside a batch, in order."""
        self.failing: Callable[[dict], bool] | None = None
        """Lines (by request body) that fail inside a batch with HTTP 500."""
        self.lose_replies = 0
        """The next this many ``POST /v1/batches`` create their batch, then reset the connection unanswered."""

    def script(self, outcomes: Iterable[BatchOutcome]) -> None:
        """What the next batches become (``complete`` once this queue is empty)."""
        with self._lock:
            self._plan.extend(outcomes)

    @property
    def batches(self) -> list[dict[str, Any]]:
        """Every batch created so far, as ``GET /v1/batches/{id}`` shows it, oldest first."""
        with self._lock:
            return [self._object(b) for b in self._batches.values()]

    def forget(self, batch_id: str) -> None:
        """The server no longer knows this batch (``GET`` answers 404, the list leaves it out)."""
        with self._lock:
            del self._batches[batch_id]

    def take_lost_reply(self) -> bool:
        """Whether the create just served loses its answer (counts ``lose_replies`` down)."""
        with self._lock:
            if self.lose_replies <= 0:
                return False
            self.lose_replies -= 1
            return True

    def file_text(self, file_id: str) -> str:
        """An uploaded (or generated) file's content."""
        with self._lock:
            return self._files[file_id][1].decode()

    # -- routes ----------------------------------------------------------------------------------
    def upload(self, content_type: str, raw: bytes) -> tuple[int, dict]:
        """``POST /v1/files`` (multipart: ``purpose`` and ``file``)."""
        fields = _multipart(content_type, raw)
        if "file" not in fields:
            return 400, _error("multipart body has no 'file' part")
        purpose = fields.get("purpose", (None, b""))[1].decode()
        name, data = fields["file"]
        file_id = self._store(name or "upload.jsonl", data)
        return 200, {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                     "filename": name or "upload.jsonl", "purpose": purpose, "status": "processed"}

    def content(self, file_id: str) -> tuple[int, bytes | dict]:
        """``GET /v1/files/{id}/content``."""
        with self._lock:
            found = self._files.get(file_id)
        return (200, found[1]) if found is not None else (404, _error(f"no file {file_id}"))

    def create(self, body: dict) -> tuple[int, dict]:
        """``POST /v1/batches``."""
        file_id = str(body.get("input_file_id") or "")
        with self._lock:
            found = self._files.get(file_id)
            if found is None:
                return 404, _error(f"no file {file_id!r}")
            if body.get("endpoint") != "/v1/chat/completions":
                return 400, _error(f"endpoint {body.get('endpoint')!r} is not supported by this server")
            outcome = self._plan.popleft() if self._plan else "complete"
            lines = []
            for text in found[1].decode().splitlines():
                if not text.strip():
                    continue
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError:
                    outcome = "fail"
            batch = _Batch(f"batch_{uuid.uuid4().hex[:16]}", file_id, body["endpoint"], lines, time.monotonic(),
                           outcome, dict(body.get("metadata") or {}))
            self._batches[batch.id] = batch
            return 200, self._object(batch)

    def retrieve(self, batch_id: str) -> tuple[int, dict]:
        """``GET /v1/batches/{id}``: the status the elapsed time has reached (answering it on the way)."""
        with self._lock:
            batch = self._batches.get(batch_id)
            if batch is None:
                return 404, _error(f"no batch {batch_id}")
            self._advance(batch)
            return 200, self._object(batch)

    def listing(self, after: str | None = None, limit: int = 20) -> tuple[int, dict]:
        """``GET /v1/batches?after=&limit=``: one page, newest first (``after`` is the last id of the page before)."""
        if not 1 <= limit <= 100:
            return 400, _error(f"limit must be between 1 and 100, got {limit}")
        with self._lock:
            newest = list(reversed(self._batches.values()))
            start = 0
            if after is not None:
                ids = [b.id for b in newest]
                if after not in ids:
                    return 404, _error(f"no batch {after}")
                start = ids.index(after) + 1
            page = newest[start:start + limit]
            for batch in page:
                self._advance(batch)
            data = [self._object(b) for b in page]
        return 200, {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                     "last_id": data[-1]["id"] if data else None, "has_more": start + limit < len(newest)}

    def cancel(self, batch_id: str) -> tuple[int, dict]:
        """``POST /v1/batches/{id}/cancel``."""
        with self._lock:
            batch = self._batches.get(batch_id)
            if batch is None:
                return 404, _error(f"no batch {batch_id}")
            if batch.status not in TERMINAL:
                batch.status = "cancelled"
            return 200, self._object(batch)

    # -- internals -------------------------------------------------------------------------------
    def _store(self, name: str, data: bytes) -> str:
        file_id = f"file-{uuid.uuid4().hex[:16]}"
        with self._lock:
            self._files[file_id] = (name, data)
        return file_id

    def _advance(self, batch: _Batch) -> None:
        if batch.status in TERMINAL:
            return
        elapsed = time.monotonic() - batch.created
        if elapsed < self.delay:
            batch.status = "validating"
        elif batch.outcome == "fail":
            batch.status = "failed"
            batch.errors = [{"code": "invalid_request", "message": "the input file does not validate", "line": "1"}]
        elif elapsed < 2 * self.delay:
            batch.status = "in_progress"
            batch.counts = {"total": len(batch.lines), "completed": len(batch.lines) // 2, "failed": 0}
        else:
            self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        answered = batch.lines if batch.outcome == "complete" else batch.lines[: len(batch.lines) // 2]
        output: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for line in answered:
            body = line.get("body") or {}
            self.line_bodies.append(body)
            if self.failing is not None and self.failing(body):
                status, reply = 500, _error("the batch could not process this request")
            else:
                status, reply = self.answer(body)
            row = {"id": f"batch_req_{uuid.uuid4().hex[:12]}", "custom_id": line.get("custom_id"),
                   "response": {"status_code": status, "request_id": uuid.uuid4().hex[:12], "body": reply},
                   "error": None}
            (output if status == 200 else errors).append(row)
        for line in batch.lines[len(answered):]:
            errors.append({"id": f"batch_req_{uuid.uuid4().hex[:12]}", "custom_id": line.get("custom_id"),
                           "response": None,
                           "error": {"code": "batch_expired", "message": "This request could not be executed "
                                     "before the completion window expired."}})
        batch.output_file_id = self._store("output.jsonl", _jsonl(output)) if output else None
        batch.error_file_id = self._store("errors.jsonl", _jsonl(errors)) if errors else None
        batch.counts = {"total": len(batch.lines), "completed": len(output), "failed": len(errors)}
        batch.status = "completed" if batch.outcome == "complete" else "expired"

    def _object(self, batch: _Batch) -> dict[str, Any]:
        counts = batch.counts or {"total": len(batch.lines), "completed": 0, "failed": 0}
        return {"id": batch.id, "object": "batch", "endpoint": batch.endpoint, "input_file_id": batch.input_file_id,
                "completion_window": "24h", "status": batch.status, "created_at": batch.created_at,
                "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
                "request_counts": counts, "metadata": batch.metadata,
                "errors": {"object": "list", "data": batch.errors} if batch.errors else None}


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a ``multipart/form-data`` body: name -> (file name, bytes)."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    parts: dict[str, tuple[str | None, bytes]] = {}
    if not message.is_multipart():
        return parts
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            parts[name] = (part.get_filename(), payload)
    return parts


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


__all__ = ["TERMINAL", "BatchDesk", "BatchOutcome"]
