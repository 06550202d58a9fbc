"""BFCL-format JSONL rows and saag-opt's own example schema: parsing, errors with path:line, round-trip."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from saag_opt.data.glaive import iter_glaive_sharegpt
from saag_opt.data.jsonl import (
    detect_jsonl_format,
    example_to_row,
    iter_bfcl_jsonl,
    iter_examples_jsonl,
    load_bfcl_jsonl,
    load_examples_jsonl,
    load_jsonl,
    write_bfcl_rows,
    write_examples,
)
from saag_opt.errors import DatasetError
from saag_opt.model import Example, Registry

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

AREA_FN = {"name": "geometry.area", "description": "Area of a circle.",
           "parameters": {"type": "dict", "properties": {"radius": {"type": "float", "description": "r"}},
                          "required": ["radius"]}}


def bfcl_row(id: str, category: str, ground_truth: Any, content: str = "Area of a circle of radius 2?") -> dict:
    return {"id": id, "category": category, "question": [[{"role": "user", "content": content}]],
            "function": [AREA_FN], "ground_truth": ground_truth}


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


GOLD = [{"geometry.area": {"radius": [2.0, 2]}}]


def test_bfcl_rows_load_with_categories_expectations_and_normalised_types(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "b.jsonl", [
        bfcl_row("s_0", "simple_python", GOLD),
        bfcl_row("irr_0", "irrelevance", None),
        bfcl_row("rel_0", "live_relevance", None),
        bfcl_row("mine_0", "my_category", None),
    ])
    examples = load_bfcl_jsonl(path)
    assert [(e.id, e.category, e.expect) for e in examples] == [
        ("s_0", "simple_python", "calls"), ("irr_0", "irrelevance", "no_call"),
        ("rel_0", "live_relevance", "any_call"), ("mine_0", "my_category", "no_call")]
    simple = examples[0]
    assert simple.gold == tuple(GOLD)
    assert simple.messages == ({"role": "user", "content": "Area of a circle of radius 2?"},)
    radius = simple.registry.get("geometry.area").properties["radius"]
    assert radius["type"] == "number" and radius["x-bfcl-type"] == "float"
    assert all(e.gold is None for e in examples[1:])
    assert simple.query == "Area of a circle of radius 2?"


def test_bfcl_row_accepts_a_flat_message_list(tmp_path: Path) -> None:
    row = bfcl_row("s_0", "simple_python", GOLD)
    row["question"] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "r=2"}]
    [example] = load_bfcl_jsonl(write_lines(tmp_path / "b.jsonl", [row]))
    assert [m["role"] for m in example.messages] == ["system", "user"]


def test_bad_bfcl_rows_name_path_and_line_and_lenient_reader_keeps_the_rest(tmp_path: Path) -> None:
    no_truth = bfcl_row("s_2", "simple_python", GOLD)
    del no_truth["ground_truth"]
    path = write_lines(tmp_path / "bad.jsonl", [
        bfcl_row("s_0", "simple_python", GOLD),
        "{not json",
        no_truth,
        "[1, 2]",
        bfcl_row("s_0", "simple_python", GOLD),  # duplicate id
        bfcl_row("s_5", "simple_python", [{"geometry.area": {"radius": 2}}]),  # values must be lists
        bfcl_row("s_6", "simple_python", GOLD),
    ])
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: line contains invalid json"):
        load_bfcl_jsonl(path)
    results = list(iter_bfcl_jsonl(path))
    good = [(line, item.id) for line, item in results if isinstance(item, Example)]
    assert good == [(1, "s_0"), (7, "s_6")]
    errors = {line: str(item) for line, item in results if isinstance(item, DatasetError)}
    assert sorted(errors) == [2, 3, 4, 5, 6]
    assert "bad.jsonl:3: bad row: ground_truth: Field required" in errors[3]
    assert "bad.jsonl:4: row must be a JSON object, got list" in errors[4]
    assert "bad.jsonl:5: duplicate id 's_0' (first on line 1)" in errors[5]
    assert errors[6].startswith(f"{path}:6: bad row: ground_truth.0.geometry.area.radius")


def test_blank_lines_do_not_shift_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(bfcl_row("s_0", "simple_python", GOLD)) + "\n\n\n{oops\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"b\.jsonl:4:"):
        load_bfcl_jsonl(path)


def test_missing_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope\.jsonl: cannot open dataset file"):
        load_bfcl_jsonl(tmp_path / "nope.jsonl")


def test_write_bfcl_rows_keeps_original_types_and_rejects_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_bfcl_rows(path, [bfcl_row("s_0", "simple_python", GOLD)])
    [written] = [json.loads(line) for line in path.read_text().splitlines()]
    assert list(written) == ["id", "category", "question", "function", "ground_truth"]
    assert written["function"][0]["parameters"]["properties"]["radius"]["type"] == "float"
    with pytest.raises(DatasetError, match=r"out\.jsonl:2: bad row: category"):
        write_bfcl_rows(path, [bfcl_row("s_0", "simple_python", GOLD), {**bfcl_row("s_1", "x", None),
                                                                        "category": ""}])


def _mixed_examples(tmp_path: Path) -> list[Example]:
    bfcl = load_bfcl_jsonl(write_lines(tmp_path / "b.jsonl", [bfcl_row("s_0", "simple_python", GOLD),
                                                              bfcl_row("irr_0", "irrelevance", None)]))
    return [bfcl[0].with_split("test"), bfcl[1]]


def test_our_schema_round_trips_exactly(tmp_path: Path) -> None:
    sharegpt = [e for _, e in iter_glaive_sharegpt(FIXTURES / "glaive_sharegpt.json", no_call=True)
                if isinstance(e, Example)]
    examples = _mixed_examples(tmp_path) + sharegpt
    assert any("tool_calls" in m for e in examples for m in e.messages)  # OpenAI extras survive
    path = tmp_path / "ours.jsonl"
    assert write_examples(path, examples) == len(examples)
    loaded = load_examples_jsonl(path)
    assert loaded == examples
    again = tmp_path / "again.jsonl"
    write_examples(again, loaded)
    assert again.read_bytes() == path.read_bytes()
    assert loaded[0].split == "test" and loaded[1].split is None


def test_our_schema_defaults_expect_from_gold(tmp_path: Path) -> None:
    base = {"id": "a", "category": "c", "messages": [{"role": "user", "content": "hi"}], "tools": [AREA_FN]}
    path = write_lines(tmp_path / "o.jsonl", [{**base, "gold": GOLD}, {**base, "id": "b", "gold": None}])
    a, b = load_examples_jsonl(path)
    assert (a.expect, b.expect) == ("calls", "no_call")
    assert a.source == str(path)


def test_bad_rows_of_our_schema_are_reported_by_line(tmp_path: Path) -> None:
    base = {"id": "a", "category": "c", "messages": [{"role": "user", "content": "hi"}], "tools": [AREA_FN],
            "gold": GOLD}
    path = write_lines(tmp_path / "o.jsonl", [
        base,
        {**base, "id": "b", "expect": "calls", "gold": None},
        {**base, "id": "c", "expect": "no_call"},
        {**base, "id": "d", "messages": [{"role": "robot", "content": "x"}]},
        {**base, "id": "e", "splitt": "train"},
        {**base, "id": "f", "tools": [{"description": "no name"}]},
        {**base, "id": "g"},
    ])
    errors = {line: str(e) for line, e in iter_examples_jsonl(path) if isinstance(e, DatasetError)}
    assert sorted(errors) == [2, 3, 4, 5, 6]
    assert "o.jsonl:2: bad row: expect='calls' needs a non-empty 'gold'" in errors[2]
    assert "o.jsonl:3: bad row: expect='no_call' but 'gold' is given" in errors[3]
    assert "o.jsonl:4: bad row: messages.0.role" in errors[4]
    assert "o.jsonl:5: bad row: splitt: Extra inputs are not permitted" in errors[5]
    assert "o.jsonl:6: bad row: function has no name" in errors[6]
    with pytest.raises(DatasetError, match=r"o\.jsonl:2: "):
        load_examples_jsonl(path)


def test_write_examples_refuses_duplicate_ids(tmp_path: Path) -> None:
    ex = Example("x", "c", ({"role": "user", "content": "q"},), Registry(), None, "no_call")
    with pytest.raises(DatasetError, match=r"d\.jsonl:2: duplicate id 'x'"):
        write_examples(tmp_path / "d.jsonl", [ex, ex])


def test_format_is_detected_from_the_keys(tmp_path: Path) -> None:
    bfcl = write_lines(tmp_path / "b.jsonl", [bfcl_row("s_0", "simple_python", GOLD)])
    ours = tmp_path / "o.jsonl"
    write_examples(ours, load_bfcl_jsonl(bfcl))
    assert detect_jsonl_format(bfcl) == "bfcl" and detect_jsonl_format(ours) == "examples"
    assert load_jsonl(bfcl) == load_bfcl_jsonl(bfcl)
    assert [e.id for e in load_jsonl(ours)] == ["s_0"]
    other = write_lines(tmp_path / "x.jsonl", [{"prompt": "hi"}])
    with pytest.raises(DatasetError, match=r"x\.jsonl:1: row is neither BFCL-format .* keys: \['prompt'\]"):
        load_jsonl(other)
    empty = write_lines(tmp_path / "e.jsonl", [])
    with pytest.raises(DatasetError, match=r"e\.jsonl: no JSON rows found"):
        load_jsonl(empty)


# ------------------------------------------------------------------ files as users actually write them


def test_a_line_that_is_not_utf8_is_its_own_error_and_later_rows_still_load(tmp_path: Path) -> None:
    """A Latin-1 row in a UTF-8 file: file:line for that row, nothing else lost."""
    path = tmp_path / "mixed.jsonl"
    good = [json.dumps(bfcl_row(f"s_{i}", "simple_python", GOLD)) for i in range(3)]
    latin = json.dumps(bfcl_row("s_x", "simple_python", GOLD, content="café crème"), ensure_ascii=False)
    path.write_bytes((good[0] + "\n").encode() + (latin + "\n").encode("latin-1") + (good[1] + "\n" + good[2] + "\n").encode())
    results = list(iter_bfcl_jsonl(path))
    assert [line for line, _ in results] == [1, 2, 3, 4]
    error = results[1][1]
    assert isinstance(error, DatasetError) and re.fullmatch(r".*mixed\.jsonl:2: not UTF-8 text \(byte \d+ of the "
                                                            r"line is 0xe9\)", str(error))
    assert [ex.id for _, ex in results if isinstance(ex, Example)] == ["s_0", "s_1", "s_2"]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_bfcl_and_example_rows_load_from_a_json_array_file(tmp_path: Path, encoding: str) -> None:
    """Detection already accepts a JSON array (the Glaive form); the BFCL and example loaders read it too."""
    rows = [bfcl_row(f"s_{i}", "simple_python", GOLD) for i in range(2)]
    bfcl = tmp_path / "rows.json"
    bfcl.write_text(json.dumps(rows, indent=1), encoding=encoding)
    assert [ex.id for ex in load_jsonl(bfcl)] == ["s_0", "s_1"]
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps([example_to_row(ex) for ex in load_jsonl(bfcl)]), encoding=encoding)
    assert load_jsonl(ours) == load_jsonl(bfcl)


def test_bom_and_crlf_lines_load_like_plain_ones(tmp_path: Path) -> None:
    rows = [json.dumps(bfcl_row(f"s_{i}", "simple_python", GOLD)) for i in range(2)]
    plain = write_lines(tmp_path / "plain.jsonl", rows)
    windows = tmp_path / "windows.jsonl"
    windows.write_bytes(("\r\n".join(rows) + "\r\n").encode("utf-8-sig"))
    assert [ex.id for ex in load_jsonl(windows)] == [ex.id for ex in load_jsonl(plain)] == ["s_0", "s_1"]


@pytest.mark.parametrize(("change", "message"), [
    ({"function": [{**AREA_FN, "parameters": {"type": "dict", "properties": ["radius"]}}]},
     r"function 'geometry\.area': 'properties' must be an object of parameter schemas, got list"),
    ({"function": [{**AREA_FN, "parameters": {"type": "dict", "properties": {"radius": "float"}}}]},
     r"function 'geometry\.area': parameter 'radius' must be a schema object .*got \"float\""),
    ({"function": [{**AREA_FN, "parameters": {**AREA_FN["parameters"], "required": ["radius", "units"]}}]},
     r"function 'geometry\.area': required parameter\(s\) 'units' not declared in 'properties'"),
    ({"ground_truth": [{"geometry.volume": {"radius": [2]}}]},
     r"gold calls 'geometry\.volume', which is not in its tools \(geometry\.area\)"),
    ({"function": [AREA_FN, {**AREA_FN, "name": "geometry_area"}]},
     r"tools 'geometry\.area' and 'geometry_area' are both sent as 'geometry_area'"),
    ({"question": [[]]}, r"has no user message with text"),
    ({"question": [[{"role": "user"}]]}, r"has no user message with text"),
    ({"question": [[{"role": "system", "content": "You are helpful."}]]}, r"has no user message with text"),
])
def test_rows_that_could_never_be_scored_are_path_line_errors(tmp_path: Path, change: dict, message: str) -> None:
    """A malformed tool schema, gold for an unregistered tool or an empty question used to load and
    then score every prediction wrong (or ask the agent nothing); now the row names what is wrong."""
    path = write_lines(tmp_path / "d.jsonl", [bfcl_row("ok_0", "simple_python", GOLD),
                                              {**bfcl_row("bad_1", "simple_python", GOLD), **change}])
    results = list(iter_bfcl_jsonl(path))
    assert isinstance(results[0][1], Example)
    error = results[1][1]
    assert isinstance(error, DatasetError) and re.search(r"d\.jsonl:2: .*" + message, str(error)), str(error)


def test_our_schema_rejects_gold_for_an_unregistered_tool(tmp_path: Path) -> None:
    row = example_to_row(load_jsonl(write_lines(tmp_path / "b.jsonl", [bfcl_row("s_0", "simple_python", GOLD)]))[0])
    row["gold"] = [{"nope": {"radius": [2]}}]
    with pytest.raises(DatasetError, match=r"o\.jsonl:1: .*gold calls 'nope', which is not in its tools"):
        load_examples_jsonl(write_lines(tmp_path / "o.jsonl", [row]))


def test_a_numeric_id_is_read_as_its_text_like_in_predictions_files(tmp_path: Path) -> None:
    """Datasets refused ``"id": 17`` while predictions files accepted it; a prediction for it could not match."""
    path = write_lines(tmp_path / "n.jsonl", [{**bfcl_row("x", "simple_python", GOLD), "id": 17},
                                              {**bfcl_row("x", "simple_python", GOLD), "id": True}])
    results = list(iter_bfcl_jsonl(path))
    assert isinstance(results[0][1], Example) and results[0][1].id == "17"
    assert isinstance(results[1][1], DatasetError) and "n.jsonl:2: bad row: id:" in str(results[1][1])
