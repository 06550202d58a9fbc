"""The strict cascade, predictions, the correction to feed back, and stage-conditional aggregates."""

from __future__ import annotations

import json

import pytest

from saag_opt.model import CascadeReport, Example, Prediction, Registry, ToolCall
from saag_opt.saag import aggregate, check_calls, correction_for, diagnose_with_gold, run_cascade, unanchored

REGISTRY = Registry.from_dicts([
    {"name": "get_weather", "parameters": {"type": "dict", "required": ["location"], "properties": {
        "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}}},
    {"name": "get_stock_price", "parameters": {"type": "dict", "required": ["ticker"],
                                               "properties": {"ticker": {"type": "string"}}}},
    {"name": "ping"},
])
QUERY = "What's the weather in Paris in 3 days?"
EXAMPLE = Example("ex1", "simple", ({"role": "user", "content": QUERY},), REGISTRY,
                  ({"get_weather": {"location": ["Paris"], "days": [3]}},))

ROUNDS = [
    ToolCall("get_forecast", {"location": "Paris", "days": 3}),                   # d=1 fabricated name
    ToolCall("get_weather", {"lcoation": "Paris", "country": "France", "days": 3}),  # d=2 drift + spurious
    ToolCall("get_weather", {"location": "Paris", "days": 5}),                    # d=3 numeric hallucination
    ToolCall("get_weather", {"location": "Paris", "days": 3}),                    # d=4 clean
]


def test_saag_worked_example_one_correction_per_round() -> None:
    """SAAG paper, Figure 1 (B): fabricated name -> drifted + spurious -> numeric hallucination -> pass."""
    reports = [diagnose_with_gold([call], EXAMPLE) for call in ROUNDS]
    messages = [correction_for(r) for r in reports]
    assert [r.stage_reached for r in reports] == [1, 2, 3, "passed"]
    assert [r.passed for r in reports] == [False, False, False, True]
    assert [len(r.corrections) for r in reports] == [1, 1, 1, 0]  # one correction per round
    assert all(m is not None and "\n" not in m for m in messages[:3]) and messages[3] is None

    d1 = reports[0].calls[0]  # WRatio(get_forecast, get_weather) = 1 - 9/23; Jaccard 0
    assert (d1.fnem, d1.nearest_name) == (0, "get_weather")
    assert d1.ncs == pytest.approx(0.6 * (1 - 9 / 23))
    assert d1.rpr is None and d1.avem is None  # later stages not reached
    assert "nearest registered name: `get_weather`" in str(messages[0])

    d2 = reports[1].calls[0]  # PDS: lcoation 1 - 2/16; country max(WRatio) = 0.9 * (1 - 2/8) vs "unit"
    assert d2.fnem == 1 and d2.rpr == 0.0 and d2.missing_required == ("location",)
    assert d2.pds == {"lcoation": pytest.approx(0.875), "country": pytest.approx(0.675)}
    assert d2.drifted == {"lcoation": "location"} and d2.spurious == ("country",)
    assert d2.spr == pytest.approx(1 / 3) and d2.avem is None
    assert "`location` for `lcoation`" in str(messages[1]) and "`country`" in str(messages[1])

    d3 = reports[2].calls[0]
    assert d3.to_dict() == {  # every field, in order: pins the positional construction too
        "stage_reached": 3, "passed": False, "fnem": 1, "ncs": None, "nearest_name": None, "rpr": 1.0,
        "missing_required": [], "pds": {}, "drifted": {}, "spurious": [], "spr": 0.0, "avem": 0.5,
        "qslo": None, "vhr": 0.5, "vhr_ctx": 1.0, "h": {"location": 0.0, "days": 1.0}, "assumptions": [],
        "calibrated": {}, "corrections": [messages[2]],
    }
    assert list(d3.to_dict()) == list(CascadeReport.__dataclass_fields__)
    assert (d3.rpr, d3.spr, d3.avem, d3.qslo) == (1.0, 0.0, 0.5, None)
    assert d3.h == {"location": 0.0, "days": 1.0} and d3.vhr == 0.5 and d3.vhr_ctx == 1.0
    assert "`days` = 5 is not a number stated in the request." in str(messages[2])
    assert "Paris" not in str(messages[2]).split("request;")[1]  # only the failing value is named

    d4 = reports[3].calls[0]
    assert d4.clean and (d4.avem, d4.vhr, d4.vhr_ctx) == (1.0, 0.0, 0.0) and d4.corrections == ()


def test_aggregate_is_stage_conditional() -> None:
    stats = aggregate(run_cascade(call, REGISTRY, QUERY) for call in ROUNDS)
    assert stats.n_calls == 4
    assert stats.reached == {1: 4, 2: 3, 3: 2} and stats.passed == {1: 3, 2: 2, 3: 1}
    assert stats.fnem_counts == {-1: 0, 0: 1, 1: 3}
    m = stats.metrics
    assert (m["fnem"].mean, m["fnem"].n) == (0.75, 4)
    assert m["ncs"].mean == pytest.approx(0.6 * (1 - 9 / 23)) and m["ncs"].n == 1
    assert m["rpr"].mean == pytest.approx(2 / 3) and m["rpr"].n == 3
    assert m["spr"].mean == pytest.approx(1 / 9) and m["spr"].n == 3
    assert m["pds"].mean == pytest.approx((0.875 + 0.675) / 2) and m["pds"].n == 2
    assert (m["avem"].mean, m["avem"].n) == (0.75, 2)
    assert (m["vhr"].mean, m["vhr"].n) == (0.25, 2)
    assert (m["qslo"].mean, m["qslo"].n) == (None, 0)
    assert m["rpr"].over == "calls that passed stage 1"
    payload = json.loads(json.dumps(stats.to_dict()))
    assert payload["funnel"][2] == {"stage": 3, "reached": 2, "passed": 1}
    assert payload["metrics"]["avem"] == {"mean": 0.75, "n": 2, "over": "calls that passed stage 2 and have arguments"}


def test_aggregate_of_nothing_and_of_prediction_reports() -> None:
    empty = aggregate([])
    assert empty.n_calls == 0 and empty.metrics["vhr"].mean is None
    both = aggregate([diagnose_with_gold(ROUNDS[:2], EXAMPLE), diagnose_with_gold([], Example(
        "n", "irrelevance", EXAMPLE.messages, REGISTRY, None, expect="no_call"))])
    assert both.n_calls == 2  # the not-applicable prediction contributes no call


def test_abstention_when_a_call_is_expected_is_fnem_minus_one() -> None:
    for expect in ("calls", "any_call"):
        example = Example("a", "x", EXAMPLE.messages, REGISTRY, EXAMPLE.gold, expect=expect)  # type: ignore[arg-type]
        report = diagnose_with_gold([], example)
        assert report.applicable and report.passed is False and report.stage_reached == 1
        assert len(report.calls) == 1 and report.calls[0].fnem == -1 and report.calls[0].ncs is None
        assert str(correction_for(report)).startswith("No parsable function call was found.")


def test_cascade_does_not_apply_when_no_call_is_expected() -> None:
    example = Example("n", "irrelevance", EXAMPLE.messages, REGISTRY, None, expect="no_call")
    for calls in ([], ROUNDS[:1]):
        report = diagnose_with_gold(calls, example)
        assert (report.applicable, report.passed, report.calls, report.stage_reached) == (False, None, (), None)
        assert correction_for(report) is None and not report.clean


def test_prediction_passes_iff_every_call_passes_and_reports_earliest_stage() -> None:
    mixed = check_calls([ROUNDS[3], ROUNDS[2], ROUNDS[1]], REGISTRY, QUERY)
    assert mixed.passed is False and mixed.stage_reached == 2
    assert [c.stage_reached for c in mixed.calls] == ["passed", 3, 2]
    assert mixed.corrections[0].startswith("Call 2 (`get_weather`): Some argument values")
    assert mixed.corrections[1].startswith("Call 3 (`get_weather`): Did you mean")
    assert correction_for(mixed) == "\n".join(mixed.corrections)
    both = check_calls(Prediction(calls=(ROUNDS[3], ROUNDS[3])), REGISTRY, QUERY)
    assert both.passed and both.clean and both.stage_reached == "passed" and correction_for(both) is None


def test_drift_correction_is_returned_for_a_passing_prediction() -> None:
    report = check_calls([ToolCall("get_weather", {"location": "Paris", "dayss": 3})], REGISTRY, QUERY)
    assert report.passed and not report.clean
    assert correction_for(report) == "Did you mean `days` for `dayss`? Use the exact parameter name."


def test_drift_and_grounding_corrections_together() -> None:
    report = run_cascade(ToolCall("get_weather", {"location": "Paris", "dayss": 4}), REGISTRY, QUERY)
    assert report.stage_reached == 3 and len(report.corrections) == 2
    assert report.corrections[0].startswith("Did you mean `days`")
    assert "`dayss` = 4" in report.corrections[1]


def test_corrections_can_be_skipped_for_metrics_only_runs() -> None:
    for call in ROUNDS:
        full = run_cascade(call, REGISTRY, QUERY)
        bare = run_cascade(call, REGISTRY, QUERY, corrections=False)
        assert bare.corrections == () and bare.to_dict() == {**full.to_dict(), "corrections": []}
    assert check_calls(ROUNDS[:2], REGISTRY, QUERY, corrections=False).corrections == ()
    assert diagnose_with_gold([], EXAMPLE, corrections=False).corrections == ()


def test_malformed_arguments_fail_stage_two_even_without_required_params() -> None:
    report = run_cascade({"name": "ping", "arguments": "[1, 2]"}, REGISTRY, QUERY)
    assert report.stage_reached == 2 and report.rpr == 1.0 and report.spr == 0.0
    assert report.corrections == ("The arguments must be a JSON object mapping parameter names to values.",)


def test_no_arguments_and_no_required_params_passes() -> None:
    report = run_cascade(ToolCall("ping"), REGISTRY, QUERY)
    assert report.passed and report.avem is None and report.vhr is None and report.h == {}


def test_openai_safe_names_and_non_string_queries() -> None:
    registry = Registry.from_dicts([{"name": "math.factorial", "parameters": {
        "type": "dict", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}])
    assert run_cascade(ToolCall("math_factorial", {"number": 5}), registry, "factorial of 5").passed
    # None reads as an empty query: no digits, so the number is an assumption, not a hallucination.
    empty = run_cascade(ToolCall("math_factorial", {"number": 5}), registry, None)  # type: ignore[arg-type]
    assert empty.passed and empty.assumptions == ("number",) and empty.avem == 0.0


def test_reports_are_json_able_and_hashable() -> None:
    report = diagnose_with_gold(ROUNDS[1:3], EXAMPLE)
    payload = json.loads(json.dumps(report.to_dict()))
    assert payload["calls"][0]["drifted"] == {"lcoation": "location"}
    assert payload["stage_reached"] == 2
    assert isinstance(hash(report.calls[0]), int)
    assert run_cascade(ROUNDS[0], REGISTRY, QUERY) == run_cascade(ROUNDS[0], REGISTRY, QUERY)
    assert isinstance(report.calls[0], CascadeReport)


@pytest.mark.parametrize(("call", "query", "grounding", "anchored"), [
    (ToolCall("get_weather", {"location": "Paris", "days": 3}), QUERY, "paper", True),      # exact matches
    (ToolCall("get_weather", {"location": "Rome"}), QUERY, "paper", False),                 # fails, nothing found
    (ToolCall("get_weather", {"location": "Rome", "days": 3}), QUERY, "paper", True),       # fails, 3 is found
    (ToolCall("get_weather", {"location": "Paris, France"}), QUERY, "calibrated", True),    # a query-reading rule
    (ToolCall("get_weather", {"location": "Paris, France"}), QUERY, "paper", False),
    (ToolCall("get_weather", {"location": "", "days": 4}), "Weather, please", "paper", False),  # all assumptions
    (ToolCall("ping", {}), QUERY, "paper", True),                                           # nothing to find
    (ToolCall("get_wether", {"location": "Rome"}), QUERY, "paper", True),                   # stage 1: not judged
])
def test_a_call_with_arguments_none_found_in_the_request_is_unanchored(call: ToolCall, query: str, grounding: str,
                                                                       anchored: bool) -> None:
    report = check_calls([call], REGISTRY, query, grounding=grounding)  # type: ignore[arg-type]
    assert report.anchored is anchored and unanchored(report.calls[0]) is not anchored


def test_a_schema_default_is_no_evidence_from_the_request() -> None:
    registry = Registry.from_dicts([{"name": "convert", "parameters": {"type": "dict", "required": ["unit"], "properties": {
        "unit": {"type": "string", "default": "km"}}}}])
    report = check_calls([ToolCall("convert", {"unit": "km"})], registry, "Convert it, please", grounding="calibrated")
    assert report.passed and report.calls[0].calibrated == {"unit": "default"} and not report.anchored


def test_the_gate_vouches_for_clean_anchored_calls_only() -> None:
    clean = check_calls([ToolCall("get_weather", {"location": "Paris", "days": 3})], REGISTRY, QUERY)
    assumed = check_calls([ToolCall("get_weather", {"location": "", "days": 4})], REGISTRY, "Weather, please")
    drifted = check_calls([ToolCall("get_weather", {"lcoation": "Paris"})], REGISTRY, QUERY)
    assert clean.vouched and clean.clean
    assert assumed.clean and not assumed.vouched  # passes with nothing from the request behind it
    assert not drifted.clean and not drifted.vouched
    assert not check_calls([], REGISTRY, QUERY).vouched  # an abstention: FNEM = -1
