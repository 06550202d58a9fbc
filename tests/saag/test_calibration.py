"""Calibrated stage 3: each rule accepts what it should and nothing else; paper metrics are unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from saag_opt.model import Registry, ToolCall, ToolSpec
from saag_opt.saag import CALIBRATION_RULES, check_calls, run_cascade
from saag_opt.saag.calibration import (
    code_rule,
    date_rule,
    default_rule,
    described_code_rule,
    format_rule,
    inflection_rule,
    number_word_rule,
    qualifier_rule,
    relative_date_rule,
    scaled_number_rule,
    template_rule,
    time_rule,
    unit_rule,
)
from saag_opt.saag.flags import duplicate_calls, type_conflicts
from saag_opt.saag.grounding import query_context
from saag_opt.saag.modes import ACCEPT_RULES, calibration_rules


def _accepts(rule: Any, value: Any, query: str, schema: dict[str, Any] | None = None) -> bool:
    return rule(value, schema or {}, query_context(query))


@pytest.mark.parametrize(("value", "schema", "expected"), [
    ("celsius", {"default": "celsius"}, True),
    ("Celsius", {"default": "celsius"}, True),
    (0, {"default": 0}, True),
    (2, {"description": "Decimal places, default is 2."}, True),
    (0, {"description": "The initial velocity. Default is zero."}, True),
    ("meters", {"description": "Units of the radius (defaults to 'meters')."}, True),
    (8.99e9, {"description": "The constant. Default is 8.99e9."}, True),
    ("fahrenheit", {"default": "celsius"}, False),
    (3, {"description": "Decimal places, default is 2. Values from 1 to 3 are allowed."}, False),  # other sentence
    ("km", {"description": "The unit of distance, such as km or miles."}, False),  # no default stated
    (1, {"default": True}, False),  # a bool default is no number
])
def test_default_rule(value: Any, schema: dict[str, Any], expected: bool) -> None:
    assert _accepts(default_rule, value, "what is the answer", schema) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("3x + 9", "the function '3x+9'", True),
    ("x**2", "integrate x^2 from 1 to 3", True),
    ("McDonald's", "order fries from mc donalds", True),
    ("new-york", "flights to New York", True),
    ("art", "we start now", False),  # still whole words only
    ("3x + 8", "the function '3x+9'", False),
    ("New York today", "flights to New York", False),
    ("", "anything", False),
])
def test_format_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(format_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("San Francisco, CA", "find a salon in San Francisco", True),
    ("Paris, France", "museums in paris", True),
    ("Shanghai, China", "weather in Beijing", False),  # the head must be grounded
    ("San Francisco, California State Area", "find a salon in San Francisco", False),  # qualifier too long
    ("San Francisco", "find a salon in San Francisco", False),  # no qualifier: not this rule's case
    ("Europe/London", "convert 3pm to London time", True),
    ("America/New_York", "convert 3pm from New York time", True),
    ("Europe/Paris", "convert 3pm to London time", False),
    ("/var/lg/db.log", "read /var/log/db.log", False),  # a path is no Region/Name
])
def test_qualifier_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(qualifier_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("2023-04-11", "the forecast for Pacifica on April 11th, 2023", True),
    ("2023-03-10", "the weather on the 10th of March 2023", True),
    ("03/07/2023", "a bus leaving on 3/7/2023", True),
    ("2022-05-12", "3 days starting from May 12, 2022", True),
    ("05-12-2022", "3 days starting from May 12, 2022", True),
    ("2023-04-15", "departing on April 15th", True),  # no year stated: any year
    ("2023-11-01T16:00:00", "reschedule to November 1, 2023 at 4pm", True),
    ("04-2022", "concerts next month (April 2022)", True),
    ("2023-04-12", "the forecast for Pacifica on April 11th, 2023", False),  # wrong day
    ("2024-04-11", "the forecast for Pacifica on April 11th, 2023", False),  # wrong year
    ("2023-11-01T17:00:00", "reschedule to November 1, 2023 at 4pm", False),  # wrong time part
    ("2023-09-08", "a gravity of 9.8 in 2023", False),  # a decimal is no date
    ("next friday", "meet next friday", False),  # not a date format
])
def test_date_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(date_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("19:00", "from 7 PM to 9 PM", True),
    ("16:00", "at 4pm London time", True),
    ("17:00", "an alarm for 5 in the afternoon", True),
    ("07:30", "at 7:30 a.m.", True),
    ("12:00", "lunch at noon", True),
    ("7:00 PM", "from 7 PM to 9 PM", True),
    ("07:00", "from 7 PM to 9 PM", False),  # am/pm matters
    ("19:00", "there are 7 people", False),  # a bare number is no time
    ("19:30", "from 7 PM", False),
])
def test_time_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(time_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    (2, "a room for two adults", True),
    (25, "twenty five guests", True),
    (3, "the third item", True),
    (12, "a dozen eggs", True),
    ("4", "a table for four", True),
    (3, "a room for two adults", False),
    (2.5, "a room for two adults", False),
])
def test_number_word_rule(value: Any, query: str, expected: bool) -> None:
    assert _accepts(number_word_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    (0.1, "a discount rate of 10%", True),
    (0.015, "a growth rate of 1.5 percent", True),
    (1000000, "revenues of $1M in 2019", True),
    (1200000, "and $1.2M in 2020", True),
    (9597000.0, "9.597 million square kilometers", True),
    (5000, "about 5k users", True),
    (0.2, "a discount rate of 10%", False),
    (10, "a discount rate of 10%", False),  # verbatim 10 is the paper's business, not this rule's
    (1000, "5 m/s", False),
    (0.0001, "a capacitance of 100µF", True),
    (0.05, "an inductance of 50mH", True),
    (5e-12, "a permittivity of 5 x 10^-12 F/m", True),
    (0.5, "an inductance of 50mH", False),
])
def test_scaled_number_rule(value: Any, query: str, expected: bool) -> None:
    assert _accepts(scaled_number_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("teaspoon", "how many teaspoons are in a cup", True),
    ("ironing services", "someone for ironing service", True),
    ("city", "the biggest cities", True),
    ("teaspoons", "how many tablespoons", False),
    ("class", "the clas", False),  # "ss" is no plural
])
def test_inflection_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(inflection_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("m", "a radius of 10m in meters", True),
    ("cm", "how tall is it in centimeters", True),
    ("centimeters", "it is 20cm tall", True),
    ("°C", "the temperature in celsius", True),
    ("mi", "the distance in miles", True),
    ("km", "the distance in miles", False),
    ("m", "I am here", False),  # a bare letter is no unit statement
])
def test_unit_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(unit_rule, value, query) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("GBP", "the rate from British Pounds to Japanese Yen", True),
    ("JPY", "the rate from British Pounds to Japanese Yen", True),
    ("CAD", "How many Canadian dollars for 500 US dollars?", True),
    ("CA", "sales tax in Sacramento, California", True),
    ("EUR", "the rate from British Pounds to Japanese Yen", False),
    ("IL", "sales tax in Sacramento, California", False),
    ("XYZ", "anything at all", False),
])
def test_code_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(code_rule, value, query) is expected


_PROVINCE = {"description": "The province, such as 1 for Bangkok, 2 for Chiang Mai, and 3 for Phuket."}
_SERVICE = {"description": "For example, '1' represents cleaning service, '2' represents ironing service."}


@pytest.mark.parametrize(("value", "schema", "query", "expected"), [
    (1, _PROVINCE, "a cleaner in Bangkok", True),
    (2, _PROVINCE, "a cleaner in Chiang Mai", True),
    (2, _SERVICE, "someone who offers ironing services", True),
    (3, _PROVINCE, "a cleaner in Bangkok", False),
    (4, _PROVINCE, "a cleaner in Bangkok", False),  # not described at all
    (1, {"description": "Page size."}, "a cleaner in Bangkok", False),
])
def test_described_code_rule(value: Any, schema: dict[str, Any], query: str, expected: bool) -> None:
    assert _accepts(described_code_rule, value, query, schema) is expected


_SEARCH = {"description": "Use 'track:Song Name artist:Artist Name' for specific searches."}


@pytest.mark.parametrize(("value", "schema", "query", "expected"), [
    ("track:Shape of You artist:Ed Sheeran", _SEARCH, "play 'Shape of You' by Ed Sheeran", True),
    ("track:Song Name artist:Artist Name", _SEARCH, "play 'Shape of You' by Ed Sheeran", False),  # the example
    ("track:Shape of Me artist:Ed Sheeran", _SEARCH, "play 'Shape of You' by Ed Sheeran", False),  # "me" unstated
    ("Shape of You now", _SEARCH, "play 'Shape of You' now", False),  # nothing from the description
])
def test_template_rule(value: str, schema: dict[str, Any], query: str, expected: bool) -> None:
    assert _accepts(template_rule, value, query, schema) is expected


@pytest.mark.parametrize(("value", "query", "expected"), [
    ("2023-10-02", "the weather in New York tomorrow? today is 2023.10.1", True),
    ("2023-10-09", "events next Monday in Portland. today is 2023-10-1 monday", True),
    ("2023-04-26", "the forecast on the upcoming Wednesday, today is Tuesday April 25th 2023", True),
    ("2023-10-03", "the weather in New York tomorrow? today is 2023.10.1", False),
    ("2023-10-02", "the weather in New York tomorrow?", False),  # no anchor date
    ("2023-04-27", "the forecast on the upcoming Wednesday, today is Tuesday April 25th 2023", False),
])
def test_relative_date_rule(value: str, query: str, expected: bool) -> None:
    assert _accepts(relative_date_rule, value, query) is expected


@pytest.mark.parametrize(("arguments", "schema", "expected"), [
    ({"n": "5"}, {"n": {"type": "integer"}}, [("n", "integer")]),
    ({"n": 5.0}, {"n": {"type": "integer"}}, [("n", "integer")]),
    ({"x": 5}, {"x": {"type": "number"}}, []),  # an int is a number (BFCL agrees)
    ({"x": True}, {"x": {"type": "number"}}, [("x", "number")]),
    ({"s": ["a"]}, {"s": {"type": "string"}}, [("s", "string")]),
    ({"s": None}, {"s": {"type": "string"}}, [("s", "string")]),
    ({"s": None}, {"s": {"type": "string", "default": None}}, []),
    ({"s": None}, {"s": {"type": ["string", "null"]}}, []),
    ({"a": "x"}, {"a": {"type": "any"}}, []),
    ({"flag": False}, {"flag": {"type": "Boolean"}}, []),
    ({"year": "dontcare"}, {"year": {"type": "integer", "default": "dontcare"}}, []),  # the schema's own default
    ({"smoking": False}, {"smoking": {"type": "string", "description": "'True', 'False' or 'dontcare'."}}, []),
    ({"smoking": False}, {"smoking": {"type": "string", "description": "Whether smoking is allowed."}},
     [("smoking", "string")]),
])
def test_type_conflicts(arguments: dict[str, Any], schema: dict[str, Any], expected: list[Any]) -> None:
    assert type_conflicts(arguments, schema) == expected


def test_a_named_object_of_the_query_is_no_type_conflict() -> None:
    schema = {"items": {"type": "array"}, "n": {"type": "integer"}}
    ctx = query_context("sort myItemList by date, n = 5")
    assert type_conflicts({"items": "myItemList"}, schema, ctx) == []
    assert type_conflicts({"n": "5"}, schema, ctx) == [("n", "integer")]  # a number as a string still conflicts


def test_duplicate_calls() -> None:
    assert duplicate_calls([("f", "{}"), ("g", "{}"), ("f", "{}")]) == {2: 0}
    assert duplicate_calls([("f", '{"a":1}'), ("f", '{"a":2}')]) == {}


def test_modes() -> None:
    assert calibration_rules("paper") == frozenset()
    assert calibration_rules("calibrated") == frozenset(CALIBRATION_RULES)
    assert calibration_rules(frozenset({"date"})) == frozenset({"date"})
    with pytest.raises(ValueError, match="grounding must be"):
        calibration_rules("strict")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown calibration rule"):
        calibration_rules(frozenset({"dates"}))


# -- through the cascade ------------------------------------------------------------------------------------

_TOOL = ToolSpec("book", parameters={"type": "object", "properties": {
    "city": {"type": "string"}, "date": {"type": "string"}, "guests": {"type": "integer"},
    "unit": {"type": "string", "description": "Unit; default is 'metric'."}}, "required": ["city", "date"]})
_REGISTRY = Registry([_TOOL])
_QUERY = "Book a room in Berkeley on April 15th 2023 for two guests"


def test_calibrated_passes_a_correct_call_the_paper_flags_and_keeps_the_paper_metrics() -> None:
    call = ToolCall("book", {"city": "Berkeley, CA", "date": "2023-04-15", "guests": 2, "unit": "metric"})
    paper = run_cascade(call, _REGISTRY, _QUERY)
    calibrated = run_cascade(call, _REGISTRY, _QUERY, grounding="calibrated")
    assert not paper.passed and paper.stage_reached == 3
    assert calibrated.passed and calibrated.stage_reached == "passed" and calibrated.corrections == ()
    assert calibrated.calibrated == {"city": "qualifier", "date": "date", "guests": "number_word",
                                     "unit": "default"}
    for metric in ("avem", "qslo", "vhr", "vhr_ctx", "h", "assumptions", "rpr", "spr", "fnem"):
        assert getattr(calibrated, metric) == getattr(paper, metric), metric
    assert paper.calibrated == {}


def test_calibrated_still_flags_an_ungrounded_value_and_names_only_it() -> None:
    call = ToolCall("book", {"city": "Oakland", "date": "2023-04-15", "guests": 2})
    report = check_calls([call], _REGISTRY, _QUERY, grounding="calibrated")
    assert not report.passed and report.grounding == "calibrated"
    assert "`city` = \"Oakland\"" in report.corrections[0] and "date" not in report.corrections[0]


def test_calibrated_flags_a_wrong_type_and_a_repeated_call() -> None:
    query = "Book a room in Berkeley on 2023-04-15 for 2 guests"
    typed = check_calls([ToolCall("book", {"city": "Berkeley", "date": "2023-04-15", "guests": "2"})], _REGISTRY,
                        query, grounding="calibrated")
    assert not typed.passed and "not of the schema's type `integer`" in typed.corrections[0]
    assert check_calls([ToolCall("book", {"city": "Berkeley", "date": "2023-04-15", "guests": "2"})], _REGISTRY,
                       query).passed  # the paper sees "2" in the query
    one = ToolCall("book", {"city": "Berkeley", "date": "April 15th 2023"})
    repeated = check_calls([one, one], _REGISTRY, _QUERY, grounding="calibrated")
    assert not repeated.passed and repeated.stage_reached == 3
    assert "Call 2 repeats call 1 exactly" in " ".join(repeated.corrections)
    assert check_calls([one, one], _REGISTRY, _QUERY).passed


def test_each_rule_can_be_removed() -> None:
    call = ToolCall("book", {"city": "Berkeley", "date": "2023-04-15"})
    for rule in ACCEPT_RULES:
        without = frozenset(CALIBRATION_RULES) - {rule}
        report = check_calls([call], _REGISTRY, _QUERY, grounding=without)
        assert report.passed is (rule != "date"), rule
        assert report.grounding == f"calibrated[{','.join(sorted(without))}]"
