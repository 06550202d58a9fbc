"""End to end with the real embedded model (Qwen2.5-Coder-0.5B on llama.cpp): slow, marked e2e."""

from __future__ import annotations

import json
import time

import pytest

from saag_opt.lm import chat_completion, embedded_servers, open_lm

pytestmark = pytest.mark.e2e

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                    "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_stock_price", "description": "Latest price of a stock ticker",
     "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]}}},
]


def _call_schema(tools: list[dict]) -> dict:
    """anyOf over the registry: what docs/design.md §9 says to use for local tool calls."""
    return {"anyOf": [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                                         "arguments": t["function"]["parameters"]},
                       "required": ["name", "arguments"]} for t in tools]}


def test_local_model_returns_schema_constrained_tool_call(local_spec: str) -> None:
    started = time.monotonic()
    lm = open_lm(local_spec, role="base", cache=False, max_tokens=128)
    start_seconds = time.monotonic() - started
    messages = [
        {"role": "system", "content": "You call exactly one tool. Tools: " + json.dumps(TOOLS)
         + ' Reply only with JSON {"name": ..., "arguments": {...}}.'},
        {"role": "user", "content": "What's the weather in Paris in Celsius?"},
    ]
    fmt = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": _call_schema(TOOLS)}}
    first = chat_completion(lm, messages, response_format=fmt)
    second = chat_completion(lm, messages[:1] + [{"role": "user", "content": "Price of AAPL?"}], response_format=fmt)
    for result in (first, second):
        call = json.loads(result.text)  # grammar-constrained: always valid JSON of the schema
        assert call["name"] in {"get_weather", "get_stock_price"} and isinstance(call["arguments"], dict)
    assert json.loads(first.text)["name"] == "get_weather"
    forced = chat_completion(lm, messages, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert forced.tool_calls and forced.tool_calls[0]["name"] == "get_weather"
    assert "city" in json.loads(forced.tool_calls[0]["arguments"])
    acct = lm.ledger.account("base")
    assert acct.calls == 3 and acct.prompt_tokens > 0 and acct.dollars == 0.0
    server = embedded_servers()["qwen2.5-coder-0.5b"]
    print(f"\n[e2e] open_lm {start_seconds:.2f}s (server ready after {server.startup_seconds:.2f}s); "
          f"first call {first.seconds:.2f}s, second {second.seconds:.2f}s, forced tool {forced.seconds:.2f}s")
