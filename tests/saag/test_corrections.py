"""psi1-psi3 messages: content, and a whole-dataset proof that they never carry gold."""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.data import load_dataset
from saag_opt.data.perturb import perturbed_calls
from saag_opt.model import Example, Registry, ToolCall, ToolSpec
from saag_opt.saag import correction_for, diagnose_with_gold, run_cascade
from saag_opt.saag.corrections import closest_span, psi1, psi2, psi3
from tests.conftest import requires

REGISTRY = Registry.from_dicts([
    {"name": "get_weather", "parameters": {"type": "dict", "required": ["location"], "properties": {
        "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}}},
    {"name": "get_stock_price", "parameters": {"type": "dict", "required": ["ticker"],
                                               "properties": {"ticker": {"type": "string"}}}},
    {"name": "ping"},
])
QUERY = "What's the weather in New York City for the next 3 days?"


def _psi(call: ToolCall, query: str = QUERY) -> tuple[str | None, str | None, str | None]:
    report = run_cascade(call, REGISTRY, query)
    return psi1(report, call, REGISTRY), psi2(report, call, REGISTRY), psi3(report, call, query)


def test_psi1_no_parsable_call_lists_the_registry() -> None:
    text = _psi(ToolCall(None))[0]
    assert text is not None and text.startswith("No parsable function call was found.")
    assert "`get_weather`, `get_stock_price`, `ping`" in text


def test_psi1_names_the_nearest_registered_function() -> None:
    assert _psi(ToolCall("get_wether"))[0] == (
        "`get_wether` is not a registered function; nearest registered name: `get_weather`. "
        "Call only registered functions.")


def test_psi1_without_a_candidate_lists_names_and_truncates_long_registries() -> None:
    assert "no registered name resembles it" in str(_psi(ToolCall("zzz"))[0])
    big = Registry([ToolSpec(f"tool_{i}") for i in range(40)])
    call = ToolCall("qq")
    text = psi1(run_cascade(call, big, ""), call, big)
    assert text is not None and text.endswith("`tool_29` and 10 more.")


def test_psi1_is_none_for_a_registered_name() -> None:
    assert _psi(ToolCall("get_weather", {"location": "New York City"}))[0] is None


def test_psi2_missing_drifted_and_spurious() -> None:
    text = _psi(ToolCall("get_weather", {"lcoation": "New York City", "country": "US", "days": 3}))[1]
    assert text == (
        "Did you mean `location` for `lcoation`? Use the exact parameter name. "
        "Delete parameter(s) that `get_weather` does not accept: `country`. "
        "Allowed parameters: `location`, `unit`, `days`.")
    missing = _psi(ToolCall("get_weather", {"days": 3}))[1]
    assert missing == "Missing required parameter(s) of `get_weather`: `location`."


def test_psi2_for_malformed_arguments_and_parameterless_tools() -> None:
    text = _psi(ToolCall("ping", [1]))[1]  # type: ignore[arg-type]
    assert text == "The arguments must be a JSON object mapping parameter names to values."
    extra = _psi(ToolCall("ping", {"x": 1}))[1]
    assert extra == "Delete parameter(s) that `ping` does not accept: `x`. `ping` takes no parameters."


def test_psi2_drift_only_when_stage_two_passes() -> None:
    call = ToolCall("get_weather", {"location": "New York City", "dayss": 3})
    report = run_cascade(call, REGISTRY, QUERY)
    assert report.passed and not report.clean
    assert report.corrections == ("Did you mean `days` for `dayss`? Use the exact parameter name.",)


def test_psi3_quotes_the_closest_span_of_the_query_for_near_misses() -> None:
    text = _psi(ToolCall("get_weather", {"location": "New Yrok City"}))[2]
    assert text is not None
    assert 'closest text in the request: "New York City"' in text
    assert text.startswith("Some argument values are not grounded in the user's request")


def test_psi3_hard_misses_numbers_lists_and_in_word_substrings() -> None:
    assert "does not appear in the request" in str(_psi(ToolCall("get_weather", {"location": "Qqqq"}))[2])
    assert "`days` = 5 is not a number stated in the request." in str(
        _psi(ToolCall("get_weather", {"location": "New York", "days": 5}))[2])
    listed = _psi(ToolCall("get_weather", {"location": ["New York", "Boston"]}))[2]
    assert 'has element(s) not found in the request: "Boston"' in str(listed)
    inside = _psi(ToolCall("get_weather", {"location": "York"}), "I read the New Yorker daily")[2]
    assert "appears only inside a longer word of the request" in str(inside)


def test_psi3_is_none_when_grounded() -> None:
    assert _psi(ToolCall("get_weather", {"location": "new york city", "days": 3}))[2] is None


def test_closest_span_keeps_whole_words_and_original_case() -> None:
    assert closest_span("new yrk", "I live in New York city") == "New York"
    assert closest_span("", "x") is None and closest_span("x", "") is None


# ----------------------------------------------------------------------------------------------
# Whole-dataset proof: corrections are a function of (call, registry, query) and never contain a
# gold value that the agent could not already see in the query, the tool docs or its own call.

def _bfcl_dir() -> Path | None:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data"
    return path if path.is_dir() else None


def _bfcl_examples(category: str, limit: int) -> Iterator[Example]:
    data = _bfcl_dir()
    assert data is not None
    answers = {}
    for line in (data / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines():
        row = json.loads(line)
        answers[row["id"]] = tuple(row["ground_truth"])
    for line in (data / f"BFCL_v4_{category}.json").read_text().splitlines()[:limit]:
        row = json.loads(line)
        messages = tuple(m for turn in row["question"] for m in turn)
        yield Example(row["id"], category, messages, Registry.from_dicts(row["function"]), answers[row["id"]])


def _mutations(example: Example) -> Iterator[list[ToolCall]]:
    """Wrong predictions of every stage: bad name, missing/drifted/spurious params, invented values."""
    golds = [next(iter(g.items())) for g in example.gold or ()]
    yield []
    yield [ToolCall(name + "_v2", {}) for name, _ in golds]
    yield [ToolCall(name, {}) for name, _ in golds]
    yield [ToolCall(name, {(p[1] + p[0] + p[2:] if len(p) > 2 else p + "x"): "qzv" for p in params} | {"zz_extra": 1})
           for name, params in golds]
    yield [ToolCall(name, {p: ("qzv kept" if v and isinstance(v[0], str) else 987654321) for p, v in params.items()})
           for name, params in golds]


def _leakable_gold_values(example: Example) -> set[str]:
    values: set[str] = set()
    stack: list[Any] = list(example.gold or ())
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (str, int, float)) and not isinstance(item, bool):
            text = str(item).casefold()
            if len(text) >= 4:
                values.add(text)
    return values


@requires(None if _bfcl_dir() else "bfcl-eval data not installed (pip install --no-deps bfcl-eval, see README)")
def test_corrections_never_carry_gold_over_whole_bfcl_categories() -> None:
    checked = 0
    for category in ("simple_python", "multiple", "parallel", "live_simple"):
        for example in _bfcl_examples(category, limit=10_000):
            visible = (example.query + json.dumps(example.registry.to_dicts())).casefold()
            secret = {v for v in _leakable_gold_values(example) if v not in visible}
            other = Example(example.id, example.category, example.messages, example.registry,
                            ({"unrelated": {"p": ["zz"]}},))
            for calls in _mutations(example):
                text = correction_for(diagnose_with_gold(calls, example)) or ""
                # Same corrections whatever the gold says: the builders never see it.
                assert text == (correction_for(diagnose_with_gold(calls, other)) or "")
                seen = json.dumps([c.to_dict() for c in calls]).casefold()
                leaked = [v for v in secret if v in text.casefold() and v not in seen]
                assert not leaked, (example.id, leaked, text)
                checked += 1
    assert checked > 5000


@pytest.mark.parametrize("dataset", ["shipped:bfcl", "shipped:registry-5", "shipped:registry-10",
                                     "shipped:registry-15"])
def test_corrections_never_carry_gold_over_the_whole_shipped_dataset(dataset: str) -> None:
    """Every shipped example, every perturbation kind: no gold value absent from what the agent sees."""
    rng = random.Random(0)
    checked = 0
    for example in load_dataset(dataset):
        if example.gold is None:
            continue
        visible = (example.query + json.dumps(example.registry.to_dicts())).casefold()
        secret = {v for v in _leakable_gold_values(example) if v not in visible}
        candidates = [calls for _, calls in perturbed_calls(example, rng)] + list(_mutations(example))
        for calls in candidates:
            text = correction_for(diagnose_with_gold(calls, example)) or ""
            seen = json.dumps([c.to_dict() for c in calls], default=str, ensure_ascii=False).casefold()
            leaked = [v for v in secret if v in text.casefold() and v not in seen]
            assert not leaked, (example.id, leaked, text)
            checked += 1
    assert checked > 500
