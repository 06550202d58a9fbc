"""Corrections are built on first read, and a report then reads exactly as if built eagerly."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest

import saag_opt.saag.cascade as cascade_module
from saag_opt.model import CascadeReport, Example, Registry, ToolCall
from saag_opt.saag import PredictionReport, check_calls, correction_for, diagnose_with_gold, run_cascade

REGISTRY = Registry.from_dicts([
    {"name": "get_weather", "parameters": {"type": "dict", "required": ["location"], "properties": {
        "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"}}}},
])
QUERY = "What's the weather in Paris in 3 days?"
CALLS = [
    ToolCall("get_forecast", {"location": "Paris"}),                       # stage 1
    ToolCall("get_weather", {"lcoation": "Paris", "country": "France"}),   # stage 2
    ToolCall("get_weather", {"location": "Paris", "days": 5}),             # stage 3
    ToolCall("get_weather", {"location": "Paris", "dayss": 3}),            # passes with drift
    ToolCall("get_weather", {"location": "Paris", "days": 3}),             # clean
]


def _eager(report: CascadeReport) -> CascadeReport:
    """The same report built through the dataclass __init__ (every field given)."""
    return CascadeReport(**{name: getattr(report, name) for name in CascadeReport.__dataclass_fields__})


@pytest.mark.parametrize("call", CALLS)
def test_a_deferred_report_equals_the_eagerly_built_one(call: ToolCall) -> None:
    report = run_cascade(call, REGISTRY, QUERY)
    fresh = run_cascade(call, REGISTRY, QUERY)
    assert fresh == _eager(report) and hash(fresh) == hash(_eager(report))  # __eq__ builds them
    assert report.to_dict() == _eager(report).to_dict()
    assert repr(run_cascade(call, REGISTRY, QUERY)) == repr(_eager(report))


def test_psi_texts_are_not_built_until_read(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    for name in ("psi1_message", "psi2_message", "psi3_message"):
        original = getattr(cascade_module, name)
        monkeypatch.setattr(cascade_module, name,
                            lambda *a, _f=original, _n=name: built.append(_n) or _f(*a))  # type: ignore[misc]
    reports = [diagnose_with_gold([call], Example("e", "simple", ({"role": "user", "content": QUERY},), REGISTRY,
                                        ({"get_weather": {"location": ["Paris"]}},))) for call in CALLS[:3]]
    assert built == []  # scoring reads metrics only
    assert [r.calls[0].stage_reached for r in reports] == [1, 2, 3]
    assert all(correction_for(r) for r in reports)
    assert built == ["psi1_message", "psi2_message", "psi3_message"]
    assert all(correction_for(r) for r in reports) and len(built) == 3  # built once, then stored


def test_prediction_corrections_are_labelled_on_first_read() -> None:
    report = check_calls(CALLS[2:4], REGISTRY, QUERY)
    assert report.corrections[0].startswith("Call 1 (`get_weather`): Some argument values")
    assert report.corrections[1].startswith("Call 2 (`get_weather`): Did you mean `days`")
    assert not report.clean and report.passed is False


def test_pickle_and_copy_carry_the_built_corrections_not_the_deferral() -> None:
    for make in (lambda: run_cascade(CALLS[2], REGISTRY, QUERY), lambda: check_calls(CALLS[1:3], REGISTRY, QUERY)):
        original = make()
        for clone in (pickle.loads(pickle.dumps(make())), copy.copy(make()), copy.deepcopy(make())):
            assert "_deferred" not in vars(clone) and clone == original
            assert clone.corrections == original.corrections and clone.corrections


def test_reports_stay_frozen_and_unknown_attributes_still_raise() -> None:
    report = run_cascade(CALLS[0], REGISTRY, QUERY)
    with pytest.raises(AttributeError, match="cannot assign to field 'corrections'"):
        report.corrections = ()  # type: ignore[misc]
    with pytest.raises(AttributeError, match="'CascadeReport' object has no attribute 'nope'"):
        report.nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match="'PredictionReport' object has no attribute 'nope'"):
        check_calls(CALLS[:2], REGISTRY, QUERY).nope  # type: ignore[attr-defined]  # noqa: B018


def test_reading_from_many_threads_builds_the_same_texts() -> None:
    report = check_calls(CALLS[:3], REGISTRY, QUERY)
    seen: list[tuple[str, ...]] = []
    threads = [threading.Thread(target=lambda: seen.append(report.corrections)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1 and len(seen[0]) == 3


def test_corrections_false_and_the_init_default_are_empty_tuples() -> None:
    assert run_cascade(CALLS[2], REGISTRY, QUERY, corrections=False).corrections == ()
    assert CascadeReport("passed", True, 1).corrections == ()
    assert PredictionReport(applicable=False, passed=None).corrections == ()


def test_an_unstated_enum_value_passes_the_cascade() -> None:
    report = run_cascade(ToolCall("get_weather", {"location": "Paris", "unit": "celsius"}), REGISTRY, QUERY)
    assert report.passed and report.clean and report.assumptions == ("unit",)
    assert report.h == {"location": 0.0} and report.avem == 0.5
    invented = run_cascade(ToolCall("get_weather", {"location": "Paris", "unit": "kelvin"}), REGISTRY, QUERY)
    assert invented.stage_reached == 3 and "`unit` = \"kelvin\"" in invented.corrections[0]
