"""The cascade never raises on arbitrary JSON-like calls, and its invariants hold (hypothesis)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saag_opt.model import Example, Registry, ToolCall
from saag_opt.saag import aggregate, check_calls, correction_for, diagnose_with_gold, run_cascade

HUGE_INTS = st.builds(pow, st.just(10), st.integers(4400, 5000))  # too many digits for str()
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10 ** 30) | HUGE_INTS
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["", " ", "New York", "1,000", "-3", "2.5e3", "東京", "(x)", "a.b*c"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
PARAM_NAMES = st.sampled_from(["location", "lcoation", "unit", "days", "dayss", "x", "", "é"]) | st.text(max_size=6)
ARGUMENTS = (st.dictionaries(PARAM_NAMES, JSON, max_size=5)
             | st.dictionaries(st.integers(), JSON, max_size=2)
             | JSON | st.text(max_size=20) | st.sampled_from(['{"location": "Paris"}', "{bad json"]))
NAMES = (st.sampled_from(["get_weather", "get_wether", "math_factorial", "math.factorial", "", "  "])
         | st.none() | st.integers() | HUGE_INTS | st.lists(st.text(max_size=3), max_size=2)
         | st.text(max_size=15))

REGISTRY = Registry.from_dicts([
    {"name": "get_weather", "parameters": {"type": "dict", "required": ["location"], "properties": {
        "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}}},
    {"name": "math.factorial", "parameters": {"type": "dict", "required": ["number"],
                                              "properties": {"number": {"type": "integer"}}}},
    {"name": "ab"},
])


def _call(name: Any, arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)  # the wild: ToolCall's annotations are not enforced


def _check_report_invariants(report: Any) -> None:
    json.dumps(report.to_dict(), allow_nan=True)
    assert report.passed == (report.stage_reached == "passed")
    assert report.fnem in (-1, 0, 1)
    if report.stage_reached == 1:
        assert report.rpr is None and report.avem is None and report.corrections
    if report.fnem == 0:
        assert report.ncs is not None and 0.0 <= report.ncs <= 1.0
    if report.stage_reached in (2, 3, "passed"):
        assert report.rpr is not None and 0.0 <= report.rpr <= 1.0
        assert report.spr is not None and 0.0 <= report.spr <= 1.0
        assert all(0.0 <= v <= 1.0 for v in report.pds.values())
    if report.stage_reached in (3, "passed"):
        assert all(0.0 <= v <= 1.0 for v in report.h.values())
        assert report.vhr_ctx is None or math.isclose(report.vhr_ctx, sum(report.h.values()))
        assert not set(report.h) & set(report.assumptions)
    if report.stage_reached == 3:
        assert report.corrections


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, arguments=ARGUMENTS, query=st.text(max_size=40) | st.sampled_from(["Paris in 3 days", "1,000 €"]))
def test_run_cascade_never_raises(name: Any, arguments: Any, query: str) -> None:
    report = run_cascade(_call(name, arguments), REGISTRY, query)
    _check_report_invariants(report)
    bare = run_cascade(_call(name, arguments), REGISTRY, query, corrections=False)
    assert bare.to_dict() == {**report.to_dict(), "corrections": []}
    _check_report_invariants(run_cascade({"name": name, "arguments": arguments}, REGISTRY, query))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(st.tuples(NAMES, ARGUMENTS), max_size=3), query=st.text(max_size=30),
       expect=st.sampled_from(["calls", "no_call", "any_call"]))
def test_diagnose_correction_and_aggregate_never_raise(calls: list[tuple[Any, Any]], query: str, expect: str) -> None:
    gold = ({"get_weather": {"location": ["Paris"]}},) if expect == "calls" else None
    example = Example("p", "x", ({"role": "user", "content": query},), REGISTRY, gold, expect=expect)  # type: ignore[arg-type]
    tool_calls = [_call(n, a) for n, a in calls]
    report = diagnose_with_gold(tool_calls, example)
    json.dumps(report.to_dict(), allow_nan=True)
    message = correction_for(report)
    if report.applicable:
        assert report.passed == all(c.passed for c in report.calls)
        assert len(report.calls) == max(1, len(tool_calls))
        assert (message is None) == (not report.corrections)
    stats = aggregate([report, *check_calls(tool_calls, REGISTRY, query).calls])
    json.dumps(stats.to_dict(), allow_nan=True)
    assert stats.reached[1] >= stats.reached[2] >= stats.reached[3] >= stats.passed[3]


_METRICS = ("stage_reached", "fnem", "ncs", "rpr", "missing_required", "pds", "drifted", "spurious", "spr", "avem",
            "qslo", "vhr", "vhr_ctx", "h", "assumptions")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, arguments=ARGUMENTS,
       query=st.text(max_size=40) | st.sampled_from(["Paris on April 11th, 2023 at 7 PM", "two days, 10% off"]))
def test_calibrated_grounding_keeps_the_paper_metrics_and_only_re_decides_stage_3(
        name: Any, arguments: Any, query: str) -> None:
    paper = run_cascade(_call(name, arguments), REGISTRY, query)
    calibrated = run_cascade(_call(name, arguments), REGISTRY, query, grounding="calibrated")
    _check_report_invariants(calibrated)
    for metric in _METRICS[1:]:
        assert getattr(calibrated, metric) == getattr(paper, metric) or (
            getattr(paper, metric) != getattr(paper, metric)), metric  # NaN-safe
    if paper.stage_reached in (1, 2):
        assert calibrated.stage_reached == paper.stage_reached and calibrated.calibrated == {}
    elif paper.passed and not calibrated.passed:  # only the flagging checks fail what the paper passes
        assert "have the wrong type" in " ".join(calibrated.corrections)
