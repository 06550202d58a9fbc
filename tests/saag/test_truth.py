"""check_truth on hand-made examples: one test per BFCL rule (docs/design.md §4)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saag_opt.model import Example, Registry, ToolCall
from saag_opt.saag.truth import TruthResult, check_truth, standardize_string


def _fn(name: str, props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "description": "", "parameters": {"type": "dict", "properties": props,
                                                             "required": required or []}}


def _example(functions: list[dict[str, Any]], gold: list[dict[str, Any]] | None, category: str = "simple_python",
             expect: str = "calls") -> Example:
    return Example(id=f"t-{category}", category=category, messages=({"role": "user", "content": "q"},),
                   registry=Registry.from_dicts(functions), gold=tuple(gold) if gold else None,
                   expect=expect)  # type: ignore[arg-type]


AREA = _fn("geometry.area", {"base": {"type": "integer"}, "height": {"type": "float"},
                             "unit": {"type": "string"}, "shape": {"type": "string"}}, ["base", "height"])
AREA_GOLD = {"geometry.area": {"base": [10], "height": [5.0], "unit": ["cm", ""], "shape": ["right triangle"]}}


def _check(args: dict[str, Any], name: str = "geometry.area", example: Example | None = None) -> TruthResult:
    return check_truth([ToolCall(name, args)], example or _example([AREA], [AREA_GOLD]))


OK_ARGS = {"base": 10, "height": 5.0, "shape": "right triangle"}


def test_gold_call_is_correct_and_reason_is_ok() -> None:
    assert _check(OK_ARGS) == TruthResult(True, "ok")


def test_optional_marker_allows_omission_but_other_gold_params_are_needed() -> None:
    assert _check({**OK_ARGS, "unit": "cm"}).correct
    assert _check({"base": 10, "height": 5.0}) == TruthResult(False, "missing_param:shape")


def test_schema_required_param_missing() -> None:
    assert _check({"height": 5.0, "shape": "right triangle"}) == TruthResult(False, "missing_required:base")


@pytest.mark.parametrize("param", ["colour", "unit "])
def test_param_outside_schema_is_unexpected(param: str) -> None:
    assert _check({**OK_ARGS, param: "red"}) == TruthResult(False, f"unexpected_param:{param}")


def test_schema_param_absent_from_gold_is_unexpected() -> None:
    fn = _fn("f", {"a": {"type": "string"}, "b": {"type": "string"}})
    ex = _example([fn], [{"f": {"a": ["x"]}}])
    assert _check({"a": "x", "b": "y"}, "f", ex) == TruthResult(False, "unexpected_param:b")


@pytest.mark.parametrize("shape", ["Right Triangle", "right-triangle", "RIGHT_TRIANGLE", "right, triangle."])
def test_strings_compare_after_standardize_string(shape: str) -> None:
    assert _check({**OK_ARGS, "shape": shape}).correct


def test_a_different_string_is_a_value_error() -> None:
    assert _check({**OK_ARGS, "shape": "square"}) == TruthResult(False, "value:shape")


def test_standardize_string_matches_bfcl() -> None:
    assert standardize_string("New York, NY 2024/05-01 a_b*c^d 'q'") == 'newyorkny20240501abcd"q"'


def test_blank_string_matches_the_optional_marker_like_bfcl() -> None:
    """BFCL standardises both sides, so " " equals the "" marker: an odd rule we reproduce."""
    assert _check({**OK_ARGS, "unit": " "}).correct
    assert not _check({**OK_ARGS, "shape": " "}).correct


def test_int_accepted_for_float_but_not_float_for_int() -> None:
    assert _check({**OK_ARGS, "height": 5}).correct
    assert _check({**OK_ARGS, "base": 10.0}) == TruthResult(False, "type:base")


@pytest.mark.parametrize("value", ["10", True, [10]])
def test_wrong_types_are_type_errors(value: Any) -> None:
    assert _check({**OK_ARGS, "base": value}) == TruthResult(False, "type:base")


def test_number_value_must_be_acceptable() -> None:
    assert _check({**OK_ARGS, "base": 12}) == TruthResult(False, "value:base")


def test_any_type_is_checked_as_a_string() -> None:
    fn = _fn("f", {"x": {"type": "any"}})
    ex = _example([fn], [{"f": {"x": ["Paris"]}}])
    assert _check({"x": "paris"}, "f", ex).correct
    assert _check({"x": 3}, "f", ex) == TruthResult(False, "type:x")


def test_gold_of_another_type_than_the_schema_is_a_variable() -> None:
    """BFCL's variable rule: a value of the gold's own type is accepted and compared exactly."""
    fn = _fn("f", {"n": {"type": "integer"}})
    ex = _example([fn], [{"f": {"n": ["count"]}}])
    assert _check({"n": "count"}, "f", ex).correct
    assert _check({"n": "Count"}, "f", ex) == TruthResult(False, "value:n")  # no standardisation for variables
    assert _check({"n": 3}, "f", ex) == TruthResult(False, "value:n")


def test_lists_compare_element_wise_in_order_with_standardised_strings() -> None:
    fn = _fn("f", {"cities": {"type": "array", "items": {"type": "string"}}})
    ex = _example([fn], [{"f": {"cities": [["New York", "Paris"], ["NYC", "Paris"]]}}])
    assert _check({"cities": ["new york", "PARIS"]}, "f", ex).correct
    assert _check({"cities": ["nyc", "paris"]}, "f", ex).correct
    assert _check({"cities": ["Paris", "New York"]}, "f", ex) == TruthResult(False, "value:cities")
    assert _check({"cities": ["Paris"]}, "f", ex) == TruthResult(False, "value:cities")


def test_list_element_types_are_checked_one_level_deep() -> None:
    fn = _fn("f", {"xs": {"type": "array", "items": {"type": "float"}}})
    ex = _example([fn], [{"f": {"xs": [[1.0, 2.5]]}}])
    assert _check({"xs": [1.0, 2.5]}, "f", ex).correct
    assert _check({"xs": [1, 2.5]}, "f", ex) == TruthResult(False, "type:xs")  # no int->float inside lists
    assert _check({"xs": ["1.0", 2.5]}, "f", ex) == TruthResult(False, "type:xs")


def test_tuple_type_takes_a_list_or_a_python_tuple() -> None:
    fn = _fn("f", {"point": {"type": "tuple", "items": {"type": "integer"}}})
    ex = _example([fn], [{"f": {"point": [[1, 2]]}}])
    assert _check({"point": [1, 2]}, "f", ex).correct
    assert _check({"point": (1, 2)}, "f", ex).correct
    assert not _check({"point": [2, 1]}, "f", ex).correct


def test_dicts_compare_key_by_key_against_their_own_acceptable_lists() -> None:
    fn = _fn("f", {"filters": {"type": "dict", "properties": {}}})
    ex = _example([fn], [{"f": {"filters": [{"city": ["San Francisco", "SF"], "max": [100], "sort": ["asc", ""]}]}}])
    assert _check({"filters": {"city": "sf", "max": 100}}, "f", ex).correct
    assert _check({"filters": {"city": "San-Francisco", "max": 100, "sort": "ASC"}}, "f", ex).correct
    assert _check({"filters": {"city": "sf"}}, "f", ex) == TruthResult(False, "value:filters")  # max needed
    assert _check({"filters": {"city": "sf", "max": 100, "x": 1}}, "f", ex) == TruthResult(False, "value:filters")
    assert _check({"filters": {"city": "LA", "max": 100}}, "f", ex) == TruthResult(False, "value:filters")


def test_lists_of_dicts_compare_dict_by_dict_in_order() -> None:
    fn = _fn("f", {"items": {"type": "array", "items": {"type": "dict"}}})
    ex = _example([fn], [{"f": {"items": [[{"id": [1]}, {"id": [2], "qty": [3, ""]}]]}}])
    assert _check({"items": [{"id": 1}, {"id": 2}]}, "f", ex).correct
    assert _check({"items": [{"id": 1}, {"id": 2, "qty": 3}]}, "f", ex).correct
    assert not _check({"items": [{"id": 2}, {"id": 1}]}, "f", ex).correct
    assert not _check({"items": [{"id": 1}]}, "f", ex).correct


def test_alternative_acceptable_values_and_null_gold() -> None:
    fn = _fn("f", {"mode": {"type": "string"}, "limit": {"type": "integer"}})
    ex = _example([fn], [{"f": {"mode": ["fast", "quick"], "limit": [None, ""]}}])
    assert _check({"mode": "quick"}, "f", ex).correct
    assert _check({"mode": "fast", "limit": None}, "f", ex).correct
    assert not _check({"mode": "fast", "limit": 5}, "f", ex).correct


def test_wrong_function_name_and_safe_name_resolution() -> None:
    assert _check(OK_ARGS, "geometry_area").correct  # OpenAI-safe spelling of geometry.area
    assert _check(OK_ARGS, "area") == TruthResult(False, "wrong_func_name")
    assert _check(OK_ARGS, "Geometry.area") == TruthResult(False, "wrong_func_name")


def test_simple_category_needs_exactly_one_call() -> None:
    ex = _example([AREA], [AREA_GOLD])
    assert check_truth([ToolCall("geometry.area", OK_ARGS)] * 2, ex) == TruthResult(False, "wrong_count")
    assert check_truth([], ex) == TruthResult(False, "no_call")
    assert check_truth([ToolCall(None, {})], ex) == TruthResult(False, "unparsable_call")


def test_arguments_that_are_not_an_object() -> None:
    assert check_truth([ToolCall("geometry.area", ["base", 10])], _example([AREA], [AREA_GOLD])) == TruthResult(  # type: ignore[arg-type]
        False, "bad_arguments")


SQUARE = _fn("square", {"x": {"type": "integer"}}, ["x"])
CUBE = _fn("cube", {"x": {"type": "integer"}}, ["x"])


def test_multiple_category_picks_one_function_among_several() -> None:
    ex = _example([SQUARE, CUBE], [{"cube": {"x": [3]}}], category="multiple")
    assert check_truth([ToolCall("cube", {"x": 3})], ex).correct
    assert check_truth([ToolCall("square", {"x": 3})], ex) == TruthResult(False, "wrong_func_name")
    assert check_truth([ToolCall("cube", {"x": 3}), ToolCall("cube", {"x": 3})], ex) == TruthResult(
        False, "wrong_count")


def test_parallel_calls_match_without_order_and_count_must_match() -> None:
    gold = [{"square": {"x": [2]}}, {"cube": {"x": [3]}}, {"square": {"x": [4]}}]
    ex = _example([SQUARE, CUBE], gold, category="parallel_multiple")
    calls = [ToolCall("square", {"x": 4}), ToolCall("cube", {"x": 3}), ToolCall("square", {"x": 2})]
    assert check_truth(calls, ex).correct
    assert check_truth(calls[:2], ex) == TruthResult(False, "wrong_count")
    wrong = [ToolCall("square", {"x": 4}), ToolCall("cube", {"x": 3}), ToolCall("square", {"x": 5})]
    assert check_truth(wrong, ex) == TruthResult(False, "no_match:square:value:x")


def test_parallel_matching_is_bfcl_greedy_first_fit() -> None:
    """BFCL gives each gold call, in order, the first call that passes, with no backtracking."""
    ex = _example([SQUARE], [{"square": {"x": [1, 2]}}, {"square": {"x": [1]}}], category="parallel")
    assert not check_truth([ToolCall("square", {"x": 1}), ToolCall("square", {"x": 2})], ex).correct
    assert check_truth([ToolCall("square", {"x": 2}), ToolCall("square", {"x": 1})], ex).correct


def test_irrelevance_is_correct_iff_no_call() -> None:
    ex = _example([SQUARE], None, category="irrelevance", expect="no_call")
    assert check_truth([], ex) == TruthResult(True, "ok")
    assert check_truth([ToolCall(None, {})], ex).correct  # undecodable output = no call, as in BFCL
    assert check_truth([ToolCall("square", {"x": 1}), ToolCall(None, {})], ex).correct
    assert check_truth([ToolCall("square", {"x": 1})], ex) == TruthResult(False, "unexpected_call")
    assert check_truth([ToolCall("made_up", {})], ex) == TruthResult(False, "unexpected_call")


def test_live_relevance_is_correct_iff_some_call() -> None:
    ex = _example([SQUARE], None, category="live_relevance", expect="any_call")
    assert check_truth([ToolCall("anything", {"x": "y"})], ex).correct
    assert check_truth([], ex) == TruthResult(False, "no_call")
    assert check_truth([ToolCall(None, {})], ex) == TruthResult(False, "no_call")
    assert check_truth([ToolCall("x", {}), ToolCall(None, {})], ex) == TruthResult(False, "no_call")


def test_java_types_are_checked_with_python_rules_on_native_values() -> None:
    fn = _fn("Cache.put", {"key": {"type": "String"}, "ttl": {"type": "long"}, "opts": {"type": "HashMap"}})
    ex = _example([fn], [{"Cache.put": {"key": ["user1"], "ttl": [60], "opts": [{"sync": [True]}]}}],
                  category="simple_java")
    assert check_truth([ToolCall("Cache.put", {"key": "USER1", "ttl": 60, "opts": {"sync": True}})], ex).correct
    assert not check_truth([ToolCall("Cache.put", {"key": "user1", "ttl": "60L", "opts": {"sync": True}})], ex).correct


def test_json_schema_number_without_bfcl_type_takes_ints() -> None:
    ex = Example(id="js", category="simple", messages=(), registry=Registry.from_dicts(
        [{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}}]),
        gold=({"f": {"x": [2.0]}},))
    assert check_truth([ToolCall("f", {"x": 2})], ex).correct


def test_gold_function_missing_from_registry_checks_gold_params_only() -> None:
    ex = _example([SQUARE], [{"other": {"y": ["a"]}}])
    assert check_truth([ToolCall("other", {"y": "A"})], ex).correct
    assert check_truth([ToolCall("other", {"y": "b"})], ex) == TruthResult(False, "value:y")


def test_result_does_not_depend_on_cache_state() -> None:
    """Plans are cached by identity; two equal examples built separately must score the same."""
    first, second = _example([AREA], [AREA_GOLD]), _example([AREA], [AREA_GOLD])
    for _ in range(2):
        assert _check(OK_ARGS, example=first) == _check(OK_ARGS, example=second)


_BFCL_STRIP = re.compile(r"[ \,\.\/\-\_\*\^]")


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(st.text(alphabet=" ,./-_*^'\"aZİß9\t", max_size=16))
def test_standardize_string_equals_bfcls_regex_definition(text: str) -> None:
    # bfcl_eval ast_checker.standardize_string: re.sub on the character class, lower, ' -> "
    assert standardize_string(text) == _BFCL_STRIP.sub("", text).lower().replace("'", '"')


def test_string_values_equal_to_gold_skip_standardising_and_others_do_not() -> None:
    fn = _fn("f", {"city": {"type": "string"}, "ratio": {"type": "float"}})
    ex = _example([fn], [{"f": {"city": ["New York", "NYC"], "ratio": [1, 2.5]}}])
    assert _check({"city": "New York", "ratio": 1}, "f", ex).correct  # int accepted for float, int gold
    assert _check({"city": "new-york", "ratio": 2.5}, "f", ex).correct  # standardised match
    assert _check({"city": "Boston", "ratio": 1.0}, "f", ex) == TruthResult(False, "value:city")
    assert _check({"city": "NYC", "ratio": "1"}, "f", ex) == TruthResult(False, "type:ratio")
    assert _check({"city": 1, "ratio": 1}, "f", ex) == TruthResult(False, "type:city")
