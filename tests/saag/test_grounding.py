"""Stage 3: type-aware exact match, AVEM, QSLO, VHR, with hand-computed values."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saag_opt.saag.grounding import (
    check_grounding,
    contains_word,
    exact_match,
    fold_query,
    number_tokens,
    query_context,
)


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("York", "I read the New Yorker.", False),
    ("York", "I live in New York.", True),
    ("new york", "I live in NEW   YORK city", True),  # case and whitespace runs do not matter
    ("York", "Yorkshire", False),
    ("file.txt", "open file.txt now", True),
    (".txt", "open file.txt now", True),  # starts with a non-alphanumeric: no boundary needed there
    ("c++", "I like c++ a lot", True),
    ("a.b*c", "the pattern a.b*c (literal)", True),  # regex characters are plain text
    ("a.b*c", "the pattern aXb*c", False),
    ("(x)", "call f(x) now", True),
    ("ZÜRICH", "weather in zürich", True),
    ("STRASSE", "die Straße", True),  # casefold: ß == ss
    ("東京", "明日の東京の天気", True),
    ("art", "we start now", False),
    ("", "anything", False),
])
def test_string_exact_match_at_word_boundaries(value: str, query: str, expected: bool) -> None:
    assert exact_match(value, query) is expected


def test_unspaced_scripts_have_no_word_boundaries() -> None:
    # CJK characters are alphanumeric for str.isalnum but are written without spaces.
    assert contains_word("明日の東京の天気", "東京")
    assert contains_word("서울 날씨", "서울") and not contains_word("서울시 날씨", "서울")  # Hangul uses spaces


@pytest.mark.parametrize(("value", "query", "expected"), [
    (1000, "send 1,000 dollars", True),
    (1000, "send 1000 dollars", True),
    (1000.0, "send 1,000 dollars", True),
    (1000, "send 1,0000 dollars", False),
    (5, "about 5.0 kg", True),
    (5.0, "about 5 kg", True),
    (2.5, "a 2.5 m board", True),
    (5, "a 2.5 m board", False),  # a decimal is one token, not "2" and "5"
    (0.5, "ratio .5", True),
    (1000, "about 1e3 items", True),
    (-3, "it is -3 outside", True),
    (3, "it is -3 outside", True),  # the absolute value of a negative token is accepted
    (-3, "on 2020-05-03", False),  # a hyphen after a digit is not a minus sign
    (3, "on 2020-05-03", True),
    (5, "on 2020-05-03", True),
    (10, "meet at 10am", True),
    (13, "an iPhone13", True),
    (1000000, "1,000,000 people", True),
    (7, "nothing numeric here", False),
    (float("nan"), "value 1", False),
])
def test_number_exact_match_against_numeric_tokens(value: float, query: str, expected: bool) -> None:
    assert exact_match(value, query) is expected


def test_a_huge_int_is_compared_without_raising() -> None:
    assert exact_match(10 ** 5000, "value 1") is False


def test_numeric_string_matches_a_numeric_token() -> None:
    assert exact_match("1000", "send 1,000 dollars")
    assert exact_match("1,000", "send 1000 dollars")
    assert not exact_match("1000", "send 100 dollars")


def test_huge_digit_runs_in_the_query_do_not_raise() -> None:
    ctx = query_context("x " + "9" * 5000 + " y 4")
    assert 4 in ctx.numbers and ctx.has_numbers


@pytest.mark.parametrize(("value", "expected"), [
    (["Paris", "London"], True),
    (["Paris", "Berlin"], False),
    ([["Paris"], ["London", 3]], True),  # nested lists are flattened
    ([], False),
    ([True], False),
])
def test_list_exact_match_needs_every_element(value: list[object], expected: bool) -> None:
    assert exact_match(value, "3 flights: Paris to London") is expected


def test_metrics_hand_computed() -> None:
    # Q has no digits -> the number is an assumption; bool, null, object are assumptions.
    # "new yrk" vs the window "new yor": LCS 6 of 14 characters -> PartialRatio = 12/14.
    result = check_grounding(
        {"city": "new yrk", "count": 3, "flag": True, "meta": {"a": 1}, "note": None},
        "I live in New York city",
    )
    assert result.avem == 0.0  # 0 exact of |P| = 5
    assert result.qslo == pytest.approx(12 / 14)
    assert result.h == {"city": pytest.approx(2 / 14)}
    assert result.vhr == pytest.approx(2 / 14) and result.vhr_ctx == pytest.approx(2 / 14)
    assert result.assumptions == ("count", "flag", "meta", "note")
    assert result.unmatched == ("city",) and not result.passed


def test_numbers_count_in_g_when_the_query_has_digits() -> None:
    # "qqq" shares no character with Q: PartialRatio 0 -> h = 1; 5 is not a token -> h = 1.
    result = check_grounding({"city": "Paris", "days": 5, "code": "qqq"}, "Paris in 3 days")
    assert result.h == {"city": 0.0, "days": 1.0, "code": 1.0}
    assert result.avem == pytest.approx(1 / 3)
    assert result.qslo == 0.0
    assert result.vhr == pytest.approx(2 / 3) and result.vhr_ctx == 2.0
    assert result.unmatched == ("days", "code")


def test_clean_grounding_passes() -> None:
    result = check_grounding({"city": "paris", "days": 3, "metric": True}, "Paris in 3 days")
    assert result.passed and result.vhr_ctx == 0.0 and result.vhr == 0.0 and result.qslo is None
    assert result.avem == pytest.approx(2 / 3)  # the bool is an assumption, non-matching in AVEM


def test_substring_inside_a_word_fails_although_h_is_zero() -> None:
    # PartialRatio("art", Q) = 100, so Eq. 8 gives h = 0, but "art" is not verbatim in Q.
    result = check_grounding({"topic": "art"}, "we start now")
    assert result.h == {"topic": 0.0} and result.vhr_ctx == 0.0 and result.qslo == 1.0
    assert result.avem == 0.0 and not result.passed


def test_list_h_is_the_worst_element() -> None:
    # "xyz" shares no character with Q -> element h = 1; "paris" is exact -> 0; list h = max = 1.
    result = check_grounding({"cities": ["Paris", "xyz"]}, "Paris and London")
    assert result.h == {"cities": 1.0} and result.qslo == 0.0 and not result.passed
    mixed = check_grounding({"cities": ["Paris", True]}, "Paris and London")
    assert mixed.h == {"cities": 0.0} and mixed.passed and mixed.avem == 0.0


def test_lists_without_groundable_elements_are_assumptions() -> None:
    result = check_grounding({"a": [], "b": [True, None], "c": [1, 2]}, "no digits here")
    assert result.assumptions == ("a", "b", "c") and result.h == {} and result.vhr is None
    assert result.passed


def test_empty_strings_and_empty_arguments() -> None:
    assert check_grounding({"a": "", "b": "   ", "c": "\n"}, "a query with  spaces").assumptions == ("a", "b", "c")
    empty = check_grounding({}, "anything")
    assert empty.avem is None and empty.vhr is None and empty.vhr_ctx is None and empty.passed


def test_nan_and_infinite_numbers_are_not_grounded() -> None:
    result = check_grounding({"x": math.nan, "y": math.inf}, "values 1 and 2")
    assert result.h == {"x": 1.0, "y": 1.0}


def test_repeated_values_give_the_same_grounding_as_the_first_time() -> None:
    query = "Flights from New York to Paris"
    first = [check_grounding({"a": v}, query) for v in ("new  york", "New York", "Pariss", "")]
    again = [check_grounding({"a": v}, query) for v in ("new  york", "New York", "Pariss", "")]
    assert first == again
    assert [r.passed for r in first] == [True, True, False, True]


# --- fast query preparation: must equal the plain definitions it replaces ---------------------

_REFERENCE_TOKEN = re.compile(r"(?<![\d.])(-?)((?:\d+(?:,\d{3}(?!\d))*(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?)")


def _reference_numbers(text: str) -> frozenset[float]:
    """The tokeniser as first written: one regex pass over the whole text."""
    numbers: set[float] = set()
    for match in _REFERENCE_TOKEN.finditer(text):
        body = match.group(2).replace(",", "")
        try:
            value = float(body) if ("." in body or "e" in body) else int(body)
        except ValueError:
            continue
        numbers.add(value)
        start = match.start()
        if match.group(1) and (start == 0 or not text[start - 1].isalnum()):
            numbers.add(-value)
    return frozenset(numbers)


NUMBERISH = st.text(alphabet="0123456789-+.,e aEx\n\t٣３²é", max_size=24)


@settings(max_examples=2000, derandomize=True, deadline=None)
@given(NUMBERISH)
def test_number_tokens_equal_one_regex_pass_over_the_whole_text(raw: str) -> None:
    text = fold_query(raw)
    assert number_tokens(text) == _reference_numbers(text)


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x1f\u00a0\u2003aBß.1", max_size=16))
def test_fold_query_equals_split_join_casefold(raw: str) -> None:
    assert fold_query(raw) == " ".join(raw.split()).casefold()


@pytest.mark.parametrize(("query", "numbers"), [
    ("born in 2022. then 5, 9.8 and 15,000 items", {2022, 5, 9.8, 15000}),
    ("on 2020-12-25, at -74.0060", {2020, 12, 25, -74.006, 74.006}),
    ("x-5 but (-5)", {5, -5}),
    ("1.2.3 and 0.05.", {1.2, 0.05}),  # a digit after a dot never starts a token
])
def test_number_tokens_of_common_runs(query: str, numbers: set[float]) -> None:
    assert number_tokens(fold_query(query)) == numbers


# --- schema enum values are grounded in the registry (a departure from the paper; docs/design.md §3) ---------

UNIT_SCHEMA = {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
               "tags": {"type": "array", "items": {"type": "string", "enum": ["hot", "cold"]}},
               "city": {"type": "string"}}


def test_unstated_enum_value_is_an_assumption_not_a_miss() -> None:
    result = check_grounding({"city": "Paris", "unit": "celsius"}, "Weather in Paris", UNIT_SCHEMA)
    assert result.passed and result.unmatched == ()
    assert result.assumptions == ("unit",) and result.h == {"city": 0.0}  # excluded from VHR
    assert result.avem == 0.5  # counted as non-matching in AVEM's denominator
    assert result.vhr == 0.0 and result.qslo is None


def test_stated_enum_value_is_an_exact_match() -> None:
    result = check_grounding({"unit": "celsius"}, "Weather in Paris in Celsius", UNIT_SCHEMA)
    assert result.avem == 1.0 and result.h == {"unit": 0.0} and result.assumptions == ()


def test_string_outside_the_enum_is_grounded_as_usual() -> None:
    result = check_grounding({"unit": "kelvin"}, "Weather in Paris", UNIT_SCHEMA)
    assert result.unmatched == ("unit",) and not result.passed and "unit" in result.h
    case = check_grounding({"unit": "Celsius"}, "Weather in Paris", UNIT_SCHEMA)  # enum match is exact
    assert case.unmatched == ("unit",)
    no_schema = check_grounding({"unit": "celsius"}, "Weather in Paris")
    assert no_schema.unmatched == ("unit",)


def test_unstated_enum_elements_of_a_list_drop_out_of_its_grounding() -> None:
    only_enum = check_grounding({"tags": ["hot", "cold"]}, "Weather in Paris", UNIT_SCHEMA)
    assert only_enum.passed and only_enum.assumptions == ("tags",) and only_enum.h == {}
    mixed = check_grounding({"tags": ["hot", "paris"]}, "Weather in Paris", UNIT_SCHEMA)
    assert mixed.passed and mixed.h == {"tags": 0.0} and mixed.avem == 0.0  # not every element exact
    invented = check_grounding({"tags": ["hot", "rainy"]}, "Weather in Paris", UNIT_SCHEMA)
    assert invented.unmatched == ("tags",)
