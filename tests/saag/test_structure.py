"""Stage 2: RPR, PDS, SPR, drift/spurious, and defensive argument parsing."""

from __future__ import annotations

import pytest

from saag_opt.model import ToolCall, ToolSpec
from saag_opt.saag.structure import check_structure, required_recall, split_call

WEATHER = ToolSpec.from_dict({
    "name": "get_weather",
    "parameters": {"type": "dict", "required": ["location", "days"], "properties": {
        "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}},
})
NO_PARAMS = ToolSpec("ping")


def test_rpr_is_one_without_required_params() -> None:
    assert required_recall({}, NO_PARAMS) == (1.0, ())
    assert check_structure({}, NO_PARAMS).passed


def test_rpr_counts_present_required_params() -> None:
    assert required_recall({"location": "Paris"}, WEATHER) == (0.5, ("days",))
    assert required_recall({}, WEATHER) == (0.0, ("location", "days"))


def test_duplicate_required_names_count_once() -> None:
    tool = ToolSpec("f", parameters={"type": "object", "properties": {"a": {}}}, required=("a", "a", "b"))
    assert required_recall({"a": 1}, tool) == (0.5, ("b",))


def test_drifted_and_spurious_params_hand_computed() -> None:
    # WRatio("lcoation", "location"): LCS 7 of 16 characters -> 1 - 2/16 = 0.875 >= 0.8 -> drifted.
    # "country" (7) vs "unit" (4): length ratio 1.75 >= 1.5 -> 0.9 * partial_ratio; best window
    # "ount" shares "unt" -> 1 - 2/8 = 0.75 -> 0.675 < 0.8 -> spurious.
    result = check_structure({"lcoation": "Paris", "country": "France", "days": 3}, WEATHER)
    assert result.pds == {"lcoation": pytest.approx(0.875), "country": pytest.approx(0.9 * 0.75)}
    assert result.drifted == {"lcoation": "location"}
    assert result.spurious == ("country",)
    assert result.spr == pytest.approx(1 / 3)
    assert result.rpr == 0.5 and result.missing_required == ("location",)
    assert not result.passed


def test_drift_alone_passes_stage_two() -> None:
    result = check_structure({"location": "Paris", "days": 3, "units": "C"}, WEATHER)
    assert result.drifted == {"units": "unit"}  # 1 - 1/9 and result.spurious == () and result.spr == 0.0
    assert result.passed


def test_near_miss_whose_nearest_is_already_present_is_spurious() -> None:
    # Paper Eq. 5 would give SPR = 0 here (PDS 0.875 >= 0.8); our rule counts it (docs/design.md §3).
    result = check_structure({"location": "Paris", "lcoation": "Paris", "days": 1}, WEATHER)
    assert result.drifted == {} and result.spurious == ("lcoation",)
    assert result.spr == pytest.approx(1 / 3)


def test_two_drifted_params_cannot_claim_the_same_name() -> None:
    # "locaton" scores 1 - 1/15 = 0.933 > "lcoation" 0.875: it keeps the claim on "location".
    result = check_structure({"lcoation": "a", "locaton": "b", "days": 1}, WEATHER)
    assert result.drifted == {"locaton": "location"}
    assert result.spurious == ("lcoation",)


def test_any_param_of_a_tool_without_schema_params_is_spurious() -> None:
    result = check_structure({"x": 1}, NO_PARAMS)
    assert result.pds == {"x": 0.0} and result.spurious == ("x",) and result.spr == 1.0


def test_empty_argument_set() -> None:
    result = check_structure({}, WEATHER)
    assert result.spr == 0.0 and result.rpr == 0.0 and not result.passed


@pytest.mark.parametrize(("call", "expected"), [
    (ToolCall("f", {"a": 1}), ("f", {"a": 1}, False)),
    ({"name": "f", "arguments": '{"a": 1}'}, ("f", {"a": 1}, False)),
    ({"name": "f", "arguments": ""}, ("f", {}, False)),
    ({"name": "f", "arguments": "{not json"}, ("f", {}, True)),
    ({"name": "f", "arguments": [1, 2]}, ("f", {}, True)),
    ({"name": "f", "arguments": 7}, ("f", {}, True)),
    ({"name": "f"}, ("f", {}, False)),
    ({"name": "f", "arguments": {1: "x", "b": 2}}, ("f", {"1": "x", "b": 2}, False)),
    (ToolCall("f", [1, 2]), ("f", {}, True)),  # type: ignore[arg-type]
    (object(), (None, {}, False)),
])
def test_split_call_is_defensive(call: object, expected: tuple[object, dict[str, object], bool]) -> None:
    assert split_call(call) == expected
