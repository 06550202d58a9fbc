"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, built like a product.

Why a real server rather than a mocked client: retries, timeouts, connection resets and malformed
bodies only behave realistically when the whole HTTP stack (dspy -> lm15/litellm -> httpx) runs.
The server answers ``POST /v1/chat/completions`` and ``GET /v1/models`` with OpenAI-shaped JSON
(``usage`` and ``tool_calls`` included), and OpenAI's Batch API (``/v1/files``, ``/v1/batches``;
``scripted_batches``), whose lines the same handler answers. Behaviour comes from a *handler* ``(request_json) -> reply``
plus a queue of injected faults that are served, one per request, before normal replies.

Example:
    with ScriptedOpenAIServer(lambda req: Reply(text="hi")) as server:
        server.inject([Fault(429), Fault(500), Fault("timeout", delay=2.0)])
        ...  # point a client at server.url
        assert [r.outcome for r in server.requests] == ["429", "500", "timeout", "ok"]

Requests are served concurrently (one thread per connection), so ``latency=0.2`` with 16 clients
takes about 0.2 s, not 3.2 s. ``jitter`` (or ``SAAG_OPT_SCRIPTED_JITTER`` for a whole test run) adds
a random wait to each chat request, so the order in which concurrent requests are answered changes
from run to run: a test that passes only in one arrival order fails under it, on a developer's
machine rather than once in a while on a loaded CI machine.

It is a product part of the ``fake`` model backend (``lm.backends``), hence its place in ``lm``;
``saag_opt.testing`` re-exports it for tests. Standard library only.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Union
from urllib.parse import parse_qs, urlsplit

from saag_opt.lm.batch.scripted import BatchDesk, BatchOutcome

FaultKind = Literal["timeout", "garbage", "reset", "empty"]


@dataclass(frozen=True)
class Fault:
    """One injected failure.

    Attributes:
        kind: an HTTP status (429, 500, 503, ...) or ``"timeout"`` (sleep ``delay`` then answer
            normally, so a client with a shorter timeout gives up), ``"garbage"`` (HTTP 200 with a
            non-JSON body), ``"empty"`` (HTTP 200, JSON without ``choices``) or ``"reset"``
            (close the socket without a reply).
        retry_after: seconds sent in ``Retry-After`` for HTTP faults (None = no header).
        delay: seconds to wait before acting (``"timeout"`` defaults to 30 s).
        message: error message in the JSON error body.
    """

    kind: int | FaultKind
    retry_after: float | None = 0
    delay: float | None = None
    message: str = "scripted fault"


@dataclass(frozen=True)
class Reply:
    """A normal completion: text and/or tool calls.

    ``tool_calls`` items are ``{"name": str, "arguments": dict | str}`` (an ``id`` is generated
    when absent). ``prompt_tokens``/``completion_tokens`` override the deterministic estimate
    (about 4 characters per token).
    """

    text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    delay: float = 0.0


HandlerResult = Union[Reply, Fault, str, dict]
Handler = Callable[[dict], HandlerResult]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it; ``outcome`` is "ok", a status like "429", or a fault kind."""

    method: str
    path: str
    body: dict | None
    outcome: str
    at: float


def echo_handler(request: dict) -> Reply:
    """Default behaviour: call the forced/first tool with no arguments, else echo the last message."""
    tools = request.get("tools") or []
    if tools:
        choice = request.get("tool_choice")
        name = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
        return Reply(tool_calls=[{"name": name, "arguments": {}}])
    messages = request.get("messages") or [{}]
    return Reply(text=f"echo: {_content_text(messages[-1].get('content'))}")


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


JITTER_ENV = "SAAG_OPT_SCRIPTED_JITTER"


def _jitter_from_env() -> float:
    raw = os.environ.get(JITTER_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ValueError(f"{JITTER_ENV}: expected seconds as a number, got {raw!r}") from None


def _estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return max(1, len(text) // 4)


class ScriptedOpenAIServer:
    """A thread-per-request OpenAI-compatible server; see the module docstring.

    Args:
        handler: maps the request JSON to a ``Reply``, a ``Fault``, a plain string (text reply) or a
            full OpenAI response dict (sent as is). Defaults to ``echo_handler``.
        latency: seconds every chat request waits before answering (models a slow provider).
        model: the model id reported in responses and by ``GET /v1/models``.
        port: the port to bind on 127.0.0.1; 0 (default) takes a free one.
        batch_delay: seconds each batch stays ``validating`` and then ``in_progress`` (polls see it move).
        jitter: the most seconds a chat request waits on top of ``latency``, drawn uniformly per request;
            None reads ``SAAG_OPT_SCRIPTED_JITTER`` (unset: 0). ``jitter_seed`` fixes the draws.
    """

    def __init__(self, handler: Handler | None = None, *, latency: float = 0.0, model: str = "scripted",
                 port: int = 0, batch_delay: float = 0.0, jitter: float | None = None,
                 jitter_seed: int | None = None) -> None:
        self.handler: Handler = handler or echo_handler
        self.batch_desk = BatchDesk(self._answer, delay=batch_delay)
        self.requested_port = port
        self.latency = latency
        self.jitter = _jitter_from_env() if jitter is None else max(0.0, float(jitter))
        self._jitter_draws = random.Random(jitter_seed)
        self.model = model
        # Why: model caches are namespaced by server URL, and the OS may hand a later server the port
        # of an earlier one; a per-instance path keeps one server's answers from replaying for another.
        self._instance = uuid.uuid4().hex[:8]
        self._faults: deque[Fault] = deque()
        self._log: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> ScriptedOpenAIServer:
        """Bind the port (a free one by default) on 127.0.0.1 and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", self.requested_port), _RequestHandler)
        httpd.scripted = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; sleeping fault handlers are woken and their sockets dropped."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound port (raises when not running)."""
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not running; use start() or a with block")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, e.g. ``http://127.0.0.1:54321/3f9a0c1e/v1`` (unique per instance)."""
        return f"http://127.0.0.1:{self.port}/{self._instance}/v1"

    # -- scripting -------------------------------------------------------------------------------
    def inject(self, faults: Iterable[Fault | int | str]) -> None:
        """Queue faults; each of the next chat requests consumes one before normal replies resume."""
        with self._lock:
            self._faults.extend(f if isinstance(f, Fault) else Fault(f) for f in faults)  # type: ignore[arg-type]

    def reset(self, handler: Handler | None = None) -> None:
        """Clear the request logs (batch lines too) and pending faults; optionally swap the handler.

        Files and batches stay: a client may still poll a batch created before.
        """
        with self._lock:
            self._faults.clear()
            self._log.clear()
            self.batch_desk.line_bodies.clear()
            if handler is not None:
                self.handler = handler

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the request log (thread-safe copy)."""
        with self._lock:
            return list(self._log)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Recorded ``/chat/completions`` requests."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def script_batches(self, outcomes: Iterable[BatchOutcome]) -> None:
        """What the next created batches become: ``complete`` (default), ``expire`` or ``fail``."""
        self.batch_desk.script(outcomes)

    @property
    def batches(self) -> list[dict[str, Any]]:
        """Every batch created so far (OpenAI batch objects), oldest first."""
        return self.batch_desk.batches

    @property
    def batch_line_bodies(self) -> list[dict[str, Any]]:
        """Every chat request body answered inside a batch."""
        return list(self.batch_desk.line_bodies)

    @property
    def pending_faults(self) -> int:
        """Injected faults not yet served."""
        with self._lock:
            return len(self._faults)

    # -- internals used by the request handler ---------------------------------------------------
    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _record(self, method: str, path: str, body: dict | None, outcome: str) -> None:
        with self._lock:
            self._log.append(RecordedRequest(method, path, body, outcome, time.time()))

    def _request_wait(self) -> float:
        """Seconds one chat request waits: ``latency`` plus its share of ``jitter``."""
        if not self.jitter:
            return self.latency
        with self._lock:
            return self.latency + self._jitter_draws.uniform(0.0, self.jitter)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless the server is closing; False if interrupted by close()."""
        return not self._stopping.wait(seconds) if seconds > 0 else True

    def _answer(self, body: dict) -> tuple[int, dict]:
        """The handler's answer to one batched request: (HTTP status, response body); a ``Fault`` fails it."""
        try:
            result = self.handler(body)
        except Exception as exc:  # a broken script fails the line, visible in the error file
            return 500, {"error": {"message": f"handler raised {exc!r}", "type": "server_error"}}
        if isinstance(result, Fault):
            status = result.kind if isinstance(result.kind, int) else 500
            return status, {"error": {"message": result.message, "type": "server_error"}}
        if isinstance(result, str):
            result = Reply(text=result)
        return 200, self.build_completion(body, result) if isinstance(result, Reply) else result

    def build_completion(self, request: dict, reply: Reply) -> dict:
        """Turn a ``Reply`` into an OpenAI chat.completion dict with usage."""
        calls = [_tool_call(c) for c in reply.tool_calls]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = calls
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _estimate_tokens(request.get("messages", []))
        completion = reply.completion_tokens
        if completion is None:
            completion = _estimate_tokens((reply.text or "") + json.dumps(calls)) if (reply.text or calls) else 1
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }


def _batch_route(path: str) -> tuple[str, str | None, str | None] | None:
    """``(files | batches, id or None, action or None)`` for a Batch API path (``.../v1/batches/b1/cancel``)."""
    parts = [p for p in urlsplit(path).path.split("/") if p]
    for kind in ("files", "batches"):
        if kind in parts and parts.index(kind) > 0 and parts[parts.index(kind) - 1] == "v1":
            rest = parts[parts.index(kind) + 1:]
            return kind, rest[0] if rest else None, rest[1] if len(rest) > 1 else None
    return None


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    args = call.get("arguments", {})
    return {
        "id": call.get("id") or f"call_{uuid.uuid4().hex[:10]}",
        "type": "function",
        "function": {"name": call["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    scripted: ScriptedOpenAIServer
    block_on_close = False
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that gave up (timeouts, resets) are expected here: stay quiet."""


class _RequestHandler(BaseHTTPRequestHandler):
    """Serves one connection; behaviour comes from the owning ``ScriptedOpenAIServer``."""

    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # kept-alive connections otherwise stall ~40 ms per sequential call

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def do_GET(self) -> None:
        route = _batch_route(self.path)
        if route is not None:
            self._serve_batch_get(*route)
            return
        if self.path.rstrip("/").endswith("/models"):
            self.server.scripted._record("GET", self.path, None, "ok")
            self._send_json(200, {"object": "list", "data": [{"id": self.server.scripted.model, "object": "model"}]})
        else:
            self.server.scripted._record("GET", self.path, None, "404")
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = _batch_route(self.path)
        if route is not None and route[0] == "files":
            status, payload = self.server.scripted.batch_desk.upload(self.headers.get("Content-Type") or "", raw)
            self.server.scripted._record("POST", self.path, {"purpose": payload.get("purpose")}, str(status))
            self._send_json(status, payload)
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self.server.scripted._record("POST", self.path, None, "400")
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
            return
        if route is not None:
            self._serve_batch_post(route, body)
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.server.scripted._record("POST", self.path, body, "404")
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        fault = self.server.scripted._next_fault()
        if fault is not None:
            self._serve_fault(fault, body)
            return
        self._serve_reply(body)

    def _serve_batch_get(self, kind: str, item: str | None, action: str | None) -> None:
        desk = self.server.scripted.batch_desk
        if kind == "files" and item and action == "content":
            status, payload = desk.content(item)
            self.server.scripted._record("GET", self.path, None, str(status))
            if isinstance(payload, bytes):
                self._send_raw(200, payload, "application/jsonl")
            else:
                self._send_json(status, payload)
            return
        if kind == "batches" and item is None:
            query = parse_qs(urlsplit(self.path).query)
            try:
                limit = int(query.get("limit", ["20"])[0])
            except ValueError:
                limit = 0
            status, found = desk.listing(query.get("after", [None])[0], limit)
            self.server.scripted._record("GET", self.path, None, str(status))
            self._send_json(status, found)
            return
        if kind == "batches" and item and action is None:
            status, found = desk.retrieve(item)
            self.server.scripted._record("GET", self.path, None, str(status))
            self._send_json(status, found)
            return
        self.server.scripted._record("GET", self.path, None, "404")
        self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _serve_batch_post(self, route: tuple[str, str | None, str | None], body: dict) -> None:
        kind, item, action = route
        desk = self.server.scripted.batch_desk
        if kind == "batches" and item is None:
            status, payload = desk.create(body)
            if status == 200 and desk.take_lost_reply():  # made, but the client never hears of it
                self.server.scripted._record("POST", self.path, body, "reset")
                self._reset()
                return
        elif kind == "batches" and item and action == "cancel":
            status, payload = desk.cancel(item)
        else:
            status, payload = 404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
        self.server.scripted._record("POST", self.path, body, str(status))
        self._send_json(status, payload)

    def _serve_reply(self, body: dict) -> None:
        if not self.server.scripted._sleep(self.server.scripted._request_wait()):
            return
        try:
            result = self.server.scripted.handler(body)
        except Exception as exc:  # a broken script is a 500, visible in the log
            self.server.scripted._record("POST", self.path, body, "handler-error")
            self._send_json(500, {"error": {"message": f"handler raised {exc!r}", "type": "server_error"}})
            return
        if isinstance(result, Fault):
            self._serve_fault(result, body)
            return
        if isinstance(result, str):
            result = Reply(text=result)
        if isinstance(result, Reply):
            if not self.server.scripted._sleep(result.delay):
                return
            result = self.server.scripted.build_completion(body, result)
        self.server.scripted._record("POST", self.path, body, "ok")
        self._send_json(200, result)

    def _serve_fault(self, fault: Fault, body: dict) -> None:
        kind = fault.kind
        outcome = str(kind)
        self.server.scripted._record("POST", self.path, body, outcome)
        delay = fault.delay if fault.delay is not None else (30.0 if kind == "timeout" else 0.0)
        if not self.server.scripted._sleep(delay):
            return
        if kind == "timeout":
            self._serve_reply_after_timeout(body)
        elif kind == "reset":
            self._reset()
        elif kind == "garbage":
            self._send_raw(200, b"<html>this is not json {{{", "application/json")
        elif kind == "empty":
            self._send_json(200, {"id": "x", "object": "chat.completion", "model": self.server.scripted.model})
        else:
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            err_type = "rate_limit_error" if kind == 429 else "server_error"
            self._send_json(int(kind), {"error": {"message": fault.message, "type": err_type}}, headers)

    def _serve_reply_after_timeout(self, body: dict) -> None:
        try:  # the client has usually gone: answering then is what a slow server does
            self._send_json(200, self.server.scripted.build_completion(body, Reply(text="late reply")))
        except OSError:
            pass

    def _reset(self) -> None:
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True

    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True


__all__ = [
    "Fault",
    "FaultKind",
    "Handler",
    "RecordedRequest",
    "Reply",
    "ScriptedOpenAIServer",
    "echo_handler",
]
