"""parse_output reads every dialect models emit and never raises; statuses drive FNEM -1 vs abstention."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saag_opt.model import ToolCall
from saag_opt.parse import parse_calls_field, parse_output

WEATHER = ToolCall("get_weather", {"city": "Paris", "unit": "C"})
OPENAI_ITEM = {"id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "C"})}}


@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}',
    '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}',
    '{"function": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}',
    '{"tool": "get_weather", "tool_input": {"city": "Paris", "unit": "C"}}',
    '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", \\"unit\\": \\"C\\"}"}',
    json.dumps({"role": "assistant", "content": None, "tool_calls": [OPENAI_ITEM]}),
    json.dumps([OPENAI_ITEM]),
    json.dumps(OPENAI_ITEM),
    json.dumps({"function_call": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}),
    '[{"get_weather": {"city": "Paris", "unit": "C"}}]',
    '{"get_weather": {"city": "Paris", "unit": "C"}}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}',
    'Sure, here it is:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n```\nDone.',
    'I will call {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}} for you.',
    'get_weather(city="Paris", unit="C")',
    "[get_weather(city='Paris', unit='C')]",
    "get_weather(city='Paris', unit='C');",
    "Let me check.\nget_weather(city='Paris', unit='C')\n",
    '```python\nget_weather(city="Paris", unit="C")\n```',
])
def test_every_dialect_yields_the_same_call(text: str) -> None:
    prediction = parse_output(text)
    assert prediction.status == "ok"
    assert prediction.calls == (WEATHER,)
    assert prediction.raw == text


def test_parallel_calls_keep_their_order_across_dialects() -> None:
    expected = (ToolCall("f", {"a": 1}), ToolCall("g", {"b": [1, 2]}))
    texts = [
        '[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {"b": [1, 2]}}]',
        '[{"f": {"a": 1}}, {"g": {"b": [1, 2]}}]',
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {"b": [1, 2]}}\n</tool_call>',
        "[f(a=1), g(b=[1, 2])]",
        "Calling both: [f(a=1), g(b=(1, 2))] now",
        '{"tool_calls": [{"function": {"name": "f", "arguments": "{\\"a\\": 1}"}},'
        ' {"function": {"name": "g", "arguments": {"b": [1, 2]}}}]}',
    ]
    for text in texts:
        assert parse_output(text).calls == expected, text


def test_python_calls_keep_dotted_names_and_json_literals() -> None:
    prediction = parse_output(
        '[math.factorial(number=5), spotify.play(artist="X", d={"k": (1, 2)}, on=true, x=null, n=-2.5)]')
    assert prediction.calls == (
        ToolCall("math.factorial", {"number": 5}),
        ToolCall("spotify.play", {"artist": "X", "d": {"k": [1, 2]}, "on": True, "x": None, "n": -2.5}),
    )


@pytest.mark.parametrize("text", [
    "", "   \n", "The capital of France is Paris.", "I cannot help with that (no suitable tool).",
    "[]", "42", '"just a string"', '{"role": "assistant", "content": "No function fits this request."}',
    '{"tool_calls": [], "content": "nothing to call"}', "Paris (France)",
])
def test_plain_answers_and_empty_lists_are_abstentions(text: str) -> None:
    prediction = parse_output(text)
    assert prediction.status == "empty"
    assert prediction.calls == ()
    assert prediction.abstained


@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "arguments": {"city": "Paris"',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',
    "<tool_call>\nnot json at all, sorry\n</tool_call>",
    "<tool_call></tool_call>",
    '```json\n{"name": "get_weather", "arguments": }\n```',
    'Here: {"name": "get_weather", "arguments": {"city": "Paris"} oops',
    '{"name": "get_weather", "arguments": "{broken"}',
    '{"name": "get_weather", "arguments": [1, 2]}',
    '{"name": 7, "arguments": {}}',
    '{"answer": "Paris"}',
    'get_weather(city=os.system("rm -rf /"))',
    "get_weather('Paris')",
    "get_weather(**{'city': 'Paris'})",
    '[{"name": "f", "arguments": {}}, "not a call"]',
    "[[[[[[",
])
def test_clear_attempts_that_cannot_be_read_are_unparsable(text: str) -> None:
    prediction = parse_output(text)
    assert prediction.status == "unparsable"
    assert prediction.calls == (ToolCall(None, {}),)  # the cascade reports FNEM -1, not abstention


def test_one_unreadable_tool_call_block_makes_the_whole_output_unparsable() -> None:
    text = ('<tool_call>{"name": "f", "arguments": {}}</tool_call>\n'
            '<tool_call>{"name": "g", "arguments": {</tool_call>')
    assert parse_output(text).status == "unparsable"


def test_literal_eval_never_executes_code(tmp_path: object) -> None:
    text = "f(x=__import__('os').system('echo pwned'))"
    assert parse_output(text).status == "unparsable"


def test_parse_calls_field_reads_rows_and_json_string_arguments() -> None:
    calls = parse_calls_field([{"name": "f", "arguments": '{"a": 1}'}, {"name": "g", "arguments": {"b": 2}},
                               {"name": "h"}])
    assert calls == (ToolCall("f", {"a": 1}), ToolCall("g", {"b": 2}), ToolCall("h", {}))
    assert parse_calls_field([]) == ()


@pytest.mark.parametrize(("raw", "message"), [
    ({"name": "f"}, r"'calls' must be a list of \{name, arguments\} objects, got dict"),
    (["f(a=1)"], r"calls\[0\]: expected a call object, got str"),
    ([{"name": "f", "arguments": {}}, {"arguments": {}}], r"calls\[1\]: has no 'name'"),
    ([{"name": "", "arguments": {}}], r"calls\[0\]: 'name' must be a non-empty string"),
    ([{"name": "f", "arguments": "{bad"}], r"calls\[0\]: arguments are not valid JSON"),
    ([{"name": "f", "arguments": [1]}], r"calls\[0\]: arguments must be an object, got list"),
])
def test_parse_calls_field_names_the_bad_item(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_calls_field(raw)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    prediction = parse_output(text)
    assert prediction.status in ("ok", "empty", "unparsable")
    assert (prediction.status == "empty") == (prediction.calls == ())
    assert all(call.name is None or isinstance(call.name, str) for call in prediction.calls)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "arguments", "function", "tool_calls", "parameters", "x"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_JSONISH, st.sampled_from(["{}", "<tool_call>{}</tool_call>", "```json\n{}\n```", "text {} text", "[{}]"]))
def test_never_raises_on_call_shaped_json(value: object, template: str) -> None:
    text = template.replace("{}", json.dumps(value), 1)
    prediction = parse_output(text)
    assert prediction.status in ("ok", "empty", "unparsable")
    for call in prediction.calls:
        assert isinstance(call.arguments, dict)
