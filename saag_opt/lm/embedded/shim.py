"""ASGI shim: the OpenAI request fields llama-cpp-python 0.3.36 does not read, in the form it does.

``json_schema`` response_format -> its ``json_object`` + schema; ``max_completion_tokens`` (the name
dspy sends a ``max_tokens`` under) -> ``max_tokens``, which the server would otherwise leave unset
(then a reply may run to the end of the context).

llama-cpp-python 0.3.36 answers ``{"type": "json_schema", ...}`` with HTTP 500 but supports the same
constraint as ``{"type": "json_object", "schema": {...}}`` (docs/design.md §9). Rewriting
the request body in front of its app lets every caller use the OpenAI form. Pure ASGI, no llama
imports, so it is testable without the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def rewrite_body(body: bytes) -> bytes:
    """Return the body with a json_schema response_format and a max_completion_tokens converted; else unchanged."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    if not isinstance(data, dict):
        return body
    changed = False
    fmt = data.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        data["response_format"] = {"type": "json_object", "schema": schema if isinstance(schema, dict) else {}}
        changed = True
    if data.get("max_completion_tokens") is not None and data.get("max_tokens") is None:
        data["max_tokens"] = data.pop("max_completion_tokens")
        changed = True
    return json.dumps(data).encode() if changed else body


def json_schema_shim(app: ASGIApp) -> ASGIApp:
    """Wrap ``app`` so POST .../chat/completions bodies go through ``rewrite_body``."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope.get("type") == "http" and scope.get("method") == "POST"
                and str(scope.get("path", "")).endswith("/chat/completions")):
            await app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body", False))
        body = rewrite_body(b"".join(chunks))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        new_scope = dict(scope, headers=headers + [(b"content-length", str(len(body)).encode())])
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(new_scope, replay, send)

    return wrapped


__all__ = ["json_schema_shim", "rewrite_body"]
