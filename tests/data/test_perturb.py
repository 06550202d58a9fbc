"""Perturbed calls: deterministic, cover the error taxonomy, and mean what their kind says."""

from __future__ import annotations

import random
from typing import Any

from saag_opt.data.perturb import PERTURBATION_KINDS, gold_calls, perturbed_calls
from saag_opt.model import Example, Registry, ToolCall
from saag_opt.saag.truth import check_truth

FUNCS = [
    {"name": "weather.get", "parameters": {"type": "dict", "required": ["city", "days"], "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string"},
        "hourly": {"type": "boolean"}, "lat": {"type": "float"},
        "tags": {"type": "array", "items": {"type": "integer"}}, "opts": {"type": "dict"}}}},
    {"name": "news.get", "parameters": {"type": "dict", "required": ["topic"], "properties": {
        "topic": {"type": "string"}}}},
]
GOLD = ({"weather.get": {"city": ["New York", "NYC"], "days": [3], "unit": ["celsius", ""], "hourly": [False],
                         "lat": [40.5], "tags": [[1, 2]], "opts": [{"lang": ["en"]}]}},
        {"news.get": {"topic": ["sports"]}})


def _example(category: str = "parallel_multiple", gold: Any = GOLD, expect: str = "calls") -> Example:
    return Example(id=f"p-{category}", category=category, messages=({"role": "user", "content": "weather NYC"},),
                   registry=Registry.from_dicts(FUNCS), gold=gold, expect=expect)  # type: ignore[arg-type]


def test_gold_calls_take_the_first_acceptable_value() -> None:
    assert gold_calls(_example()) == [
        ToolCall("weather.get", {"city": "New York", "days": 3, "unit": "celsius", "hourly": False, "lat": 40.5,
                                 "tags": [1, 2], "opts": {"lang": "en"}}),
        ToolCall("news.get", {"topic": "sports"})]
    only_optional = _example("simple_python", ({"news.get": {"topic": [""]}},))
    assert gold_calls(only_optional) == [ToolCall("news.get", {})]


def test_same_seed_same_output_other_seed_differs() -> None:
    ex = _example()
    first = perturbed_calls(ex, random.Random(7))
    assert first == perturbed_calls(ex, random.Random(7))
    assert first != perturbed_calls(ex, random.Random(8))


def test_every_kind_applies_to_a_rich_parallel_example() -> None:
    kinds = {k for k, _ in perturbed_calls(_example(), random.Random(0))}
    irrelevance_only = {"spurious_call", "call_and_garbage", "fabricated_call", "unparsable"}
    assert kinds == set(PERTURBATION_KINDS) - irrelevance_only


def test_kinds_mean_what_they_say() -> None:
    """Harmless variations stay correct for BFCL; mistakes become wrong."""
    ex = _example()
    verdict = {k: check_truth(calls, ex).correct for k, calls in perturbed_calls(ex, random.Random(3))}
    for kind in ("gold", "safe_name", "case_change", "alt_value", "omit_optional", "reorder_calls"):
        assert verdict[kind], kind
    for kind in ("abstain", "extra_call", "name_typo", "fabricated_name", "wrong_function", "missing_required",
                 "spurious_param", "misspelt_param", "int_to_str", "str_to_list", "bool_flip", "bool_to_str",
                 "list_to_str", "null_value", "drop_call", "duplicate_call"):
        assert not verdict[kind], kind


def test_no_call_examples_get_abstention_and_spurious_calls() -> None:
    ex = _example("irrelevance", None, "no_call")
    out = dict(perturbed_calls(ex, random.Random(0)))
    assert out["abstain"] == [] and out["unparsable"] == [ToolCall(None, {})]
    assert out["spurious_call"][0].name in ex.registry.names
    assert set(out["spurious_call"][0].arguments) == set(ex.registry.get(out["spurious_call"][0].name).required)  # type: ignore[union-attr]
    assert [check_truth(c, ex).correct for c in out.values()] == [True, True, False, True, False]
