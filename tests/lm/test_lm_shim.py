"""The json_schema -> json_object shim in front of llama-cpp-python's app."""

from __future__ import annotations

import asyncio
import json

from saag_opt.lm.embedded.shim import json_schema_shim, rewrite_body

SCHEMA = {"type": "object", "properties": {"name": {"const": "f"}}}


def test_rewrite_converts_only_json_schema() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    body = json.dumps({"messages": [], "response_format": schema})
    assert json.loads(rewrite_body(body.encode()))["response_format"] == {"type": "json_object", "schema": SCHEMA}
    for untouched in (b'{"response_format": {"type": "json_object"}}', b'{"messages": []}', b"not json", b"[1]"):
        assert rewrite_body(untouched) == untouched


def test_rewrite_gives_max_completion_tokens_the_name_the_server_reads() -> None:
    rewritten = json.loads(rewrite_body(b'{"messages": [], "max_completion_tokens": 1024}'))
    assert rewritten["max_tokens"] == 1024 and "max_completion_tokens" not in rewritten
    both = b'{"max_tokens": 64, "max_completion_tokens": 1024}'
    assert rewrite_body(both) == both  # an explicit max_tokens wins


def _run(scope: dict, chunks: list[bytes]) -> tuple[dict, bytes]:
    seen: dict = {}

    async def inner(scope: dict, receive, send) -> None:  # noqa: ANN001
        seen["scope"] = scope
        msg = await receive()
        seen["body"] = msg["body"]

    async def main() -> None:
        queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

        async def receive() -> dict:
            return queue.pop(0)

        async def send(message: dict) -> None:
            return None

        await json_schema_shim(inner)(scope, receive, send)

    asyncio.run(main())
    return seen["scope"], seen["body"]


def test_shim_rewrites_chunked_chat_bodies_and_fixes_content_length() -> None:
    body = json.dumps({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}).encode()
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    new_scope, new_body = _run(scope, [body[:10], body[10:]])
    assert json.loads(new_body)["response_format"]["type"] == "json_object"
    headers = dict(new_scope["headers"])
    assert headers[b"content-length"] == str(len(new_body)).encode()
    assert headers[b"content-type"] == b"application/json"


def test_shim_passes_other_routes_through() -> None:
    scope = {"type": "http", "method": "POST", "path": "/v1/embeddings", "headers": []}
    body = b'{"response_format": {"type": "json_schema"}}'
    new_scope, new_body = _run(scope, [body])
    assert new_scope is scope and new_body == body
