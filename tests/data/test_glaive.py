"""Glaive v2 loaders (raw and ShareGPT) on hand-written fixtures, including malformed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saag_opt.data.glaive import (
    iter_glaive,
    iter_glaive_sharegpt,
    load_glaive,
    load_glaive_sharegpt,
    parse_arguments,
    parse_function_call,
    parse_system_functions,
    raw_chat_turns,
)
from saag_opt.data.jsonl import read_records
from saag_opt.errors import DatasetError
from saag_opt.model import Example

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAW = FIXTURES / "glaive_raw.json"
SHAREGPT = FIXTURES / "glaive_sharegpt.json"


@pytest.mark.parametrize(("text", "expected"), [
    ("""'{"text": "I'm happy", "n": 2}'""", {"text": "I'm happy", "n": 2}),
    ("""'{"text": "it\\'s"}'""", {"text": "it's"}),
    ('{"a": [1, 2], "b": {"c": null}}', {"a": [1, 2], "b": {"c": None}}),
    ('"{\\"a\\": 1}"', {"a": 1}),
    ("{'a': 'x', 'b': True}", {"a": "x", "b": True}),
    ("'{}'", {}),
])
def test_parse_arguments_handles_glaive_quoting(text: str, expected: dict) -> None:
    assert parse_arguments(text) == expected


@pytest.mark.parametrize("text", ["'{category: sports'", "[1, 2]", "'just words'"])
def test_parse_arguments_rejects_non_objects(text: str) -> None:
    with pytest.raises(ValueError, match="cannot parse arguments"):
        parse_arguments(text)


def test_parse_function_call_variants() -> None:
    raw = """{"name": "translate_text", "arguments": '{"text": "I'm here", "to": "de"}'} <|endoftext|>"""
    assert parse_function_call(raw) == ("translate_text", {"text": "I'm here", "to": "de"})
    assert parse_function_call('{"name": "f", "arguments": {"x": 1}}') == ("f", {"x": 1})
    assert parse_function_call('{"name": "f", "arguments": "{\\"x\\": 1}"}') == ("f", {"x": 1})
    assert parse_function_call('{"name": "f"}') == ("f", {})
    with pytest.raises(ValueError, match="not a function call"):
        parse_function_call("call f with x=1")


def test_system_functions_and_chat_turns_are_split() -> None:
    first = json.loads(RAW.read_text())[0]
    assert [f["name"] for f in parse_system_functions(first["system"])] == ["translate_text", "get_exchange_rate"]
    assert parse_system_functions("SYSTEM: You are a helpful assistant, with no access to external functions.") == []
    kinds = [k for k, _ in raw_chat_turns(first["chat"])]
    assert kinds == ["user", "call", "observation", "assistant", "user", "call", "observation", "assistant"]


def test_raw_glaive_one_example_per_call_with_history() -> None:
    results = list(iter_glaive(RAW))
    examples = [e for _, e in results if isinstance(e, Example)]
    assert [e.id for e in examples] == ["glaive_0_0", "glaive_0_1", "glaive_6_0"]
    first, second, news = examples
    assert first.gold == ({"translate_text": {"text": ["I'm happy"], "target_language": ["French"]}},)
    assert first.registry.names == ("translate_text", "get_exchange_rate")
    assert first.messages == ({"role": "user", "content": 'Please translate "I\'m happy" to French.'},)
    assert first.category == "glaive" and first.expect == "calls"
    assert [m["role"] for m in second.messages] == ["user", "assistant", "tool", "assistant", "user"]
    call_msg, tool_msg = second.messages[1], second.messages[2]
    assert call_msg["tool_calls"][0]["function"]["name"] == "translate_text"
    assert json.loads(call_msg["tool_calls"][0]["function"]["arguments"]) == {"text": "I'm happy",
                                                                            "target_language": "French"}
    assert tool_msg == {"role": "tool", "tool_call_id": call_msg["tool_calls"][0]["id"],
                        "content": '{"translated_text": "Je suis heureux"}'}
    assert second.gold == ({"get_exchange_rate": {"base_currency": ["USD"], "target_currency": ["EUR"]}},)
    assert news.gold == ({"get_news": {"category": ["technology"], "limit": [3]}},)


def test_the_target_call_never_appears_in_its_own_messages() -> None:
    for _, example in [*iter_glaive(RAW), *iter_glaive_sharegpt(SHAREGPT)]:
        if isinstance(example, Example) and example.gold:
            k = int(example.id.rsplit("_", 1)[1])  # the k-th call of its conversation
            assert example.messages[-1]["role"] == "user"
            assert sum(1 for m in example.messages if m.get("tool_calls")) == k


def test_raw_glaive_bad_records_are_reported_with_their_line_and_the_rest_load() -> None:
    errors = {line: str(e) for line, e in iter_glaive(RAW) if isinstance(e, DatasetError)}
    assert sorted(errors) == [5, 6, 7]
    assert errors[5].startswith(f"{RAW}:5: bad record: cannot parse arguments")
    assert "glaive_raw.json:6: bad record: call 0 names 'get_weather', which is not among" in errors[6]
    assert "glaive_raw.json:7: bad record: chat: Field required" in errors[7]
    with pytest.raises(DatasetError, match=r"glaive_raw\.json:5: bad record: cannot parse arguments"):
        load_glaive(RAW)


def test_no_call_examples_are_opt_in_and_need_tools_and_a_text_answer() -> None:
    plain = [e.id for _, e in iter_glaive(RAW) if isinstance(e, Example)]
    with_nocall = [e for _, e in iter_glaive(RAW, no_call=True) if isinstance(e, Example)]
    extra = [e for e in with_nocall if e.id not in plain]
    assert [e.id for e in extra] == ["glaive_1_nocall"]  # record 2 has no tools: nothing
    [nocall] = extra
    assert nocall.expect == "no_call" and nocall.gold is None and nocall.category == "glaive_no_call"
    assert nocall.messages == ({"role": "user", "content": "Can you book a flight from New York to London?"},)
    assert nocall.registry.names == ("get_exchange_rate",)


def test_sharegpt_calls_histories_and_list_values() -> None:
    examples = [e for _, e in iter_glaive_sharegpt(SHAREGPT, no_call=True) if isinstance(e, Example)]
    assert [e.id for e in examples] == ["glaive_0_0", "glaive_0_1", "glaive_0_2", "glaive_2_nocall", "glaive_6_0"]
    third = examples[2]
    assert third.gold == ({"calculate_area": {"shape": ["square"], "dimensions": [[7]]}},)
    assert [m["role"] for m in third.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant",
                                                    "tool", "assistant", "user"]
    assert [m["tool_call_id"] for m in third.messages if m["role"] == "tool"] == ["call_0", "call_1"]
    assert third.query.splitlines()[-1] == "And a square with side 7?"
    assert third.registry.names == ("calculate_area", "calculate_discount")
    assert examples[4].gold == ({"calculate_discount": {"original_price": [100], "discount_percentage": [20]}},)


def test_sharegpt_bad_records_are_reported_with_their_line() -> None:
    errors = {line: str(e) for line, e in iter_glaive_sharegpt(SHAREGPT) if isinstance(e, DatasetError)}
    assert sorted(errors) == [5, 6, 7]
    assert "glaive_sharegpt.json:5: bad record: conversations.0.from: unknown role 'robot'" in errors[5]
    assert "glaive_sharegpt.json:6: bad record: 'tools' is not valid JSON" in errors[6]
    assert "glaive_sharegpt.json:7: bad record: not a function call" in errors[7]
    with pytest.raises(DatasetError, match=r"glaive_sharegpt\.json:5:"):
        load_glaive_sharegpt(SHAREGPT)


def test_jsonl_files_work_too(tmp_path: Path) -> None:
    records = json.loads(SHAREGPT.read_text())
    path = tmp_path / "share.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records[:3] + records[5:]) + "\n", encoding="utf-8")
    results = list(iter_glaive_sharegpt(path))
    assert [(line, e.id) for line, e in results if isinstance(e, Example)] == [
        (1, "glaive_0_0"), (1, "glaive_0_1"), (1, "glaive_0_2"), (5, "glaive_4_0")]
    assert [line for line, e in results if isinstance(e, DatasetError)] == [4]


def test_a_broken_json_array_stops_at_the_break(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n{"a": 1},\n{"b": 2}\n{"c": 3}\n]\n', encoding="utf-8")
    results = list(read_records(path))
    assert results[:2] == [(2, {"a": 1}), (3, {"b": 2})]
    line, error = results[2]
    assert isinstance(error, DatasetError) and len(results) == 3
    assert str(error) == f"{path}:4: expected ',' or ']' in JSON array"


def test_repeated_tool_names_keep_the_first_schema(tmp_path: Path) -> None:
    tools = [{"name": "f", "description": "first", "parameters": {"type": "object", "properties": {}}},
             {"name": "f", "description": "second", "parameters": {"type": "object", "properties": {}}}]
    record = {"conversations": [{"from": "human", "value": "go"},
                                {"from": "function_call", "value": '{"name": "f", "arguments": {}}'}],
              "tools": json.dumps(tools)}
    path = tmp_path / "dup.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    [example] = load_glaive_sharegpt(path)
    assert [t.description for t in example.registry] == ["first"]
    assert example.gold == ({"f": {}},)
