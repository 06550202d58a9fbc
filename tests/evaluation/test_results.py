"""Reading a run's files back when they were damaged: a write cut short, a bad row, a broken run.json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from saag_opt.errors import RunError
from saag_opt.evaluation.results import ExampleRecord, finished_records, read_records, read_run
from saag_opt.report.pages.base import read_jsonl
from saag_opt.runfiles import new_header, read_header, write_header


def _record(i: int) -> dict:
    return ExampleRecord(run_id="r", example_id=f"ex_{i}", category="simple", condition="base",
                         correct=True).model_dump(mode="json")


def _write(path: Path, rows: list[dict], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + tail)
    return path


def test_a_record_cut_short_by_a_kill_is_left_out_with_a_warning(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A run killed mid-write used to make report and compare fail with a jsonlines traceback."""
    path = _write(tmp_path / "records.jsonl", [_record(0), _record(1)], tail=json.dumps(_record(2)).encode()[:25])
    with caplog.at_level(logging.WARNING):
        records = read_records(path)
    assert [r.example_id for r in records] == ["ex_0", "ex_1"]
    assert "records.jsonl:3: ignoring a row cut short" in caplog.text


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path: Path) -> None:
    path = _write(tmp_path / "records.jsonl", [_record(0)], tail=json.dumps(_record(1)).encode())
    assert [r.example_id for r in read_records(path)] == ["ex_0", "ex_1"]


@pytest.mark.parametrize(("bad", "message"), [
    (b"{oops", r"records\.jsonl:2: bad row: line contains invalid json"),
    (b"\xff\xfe", r"records\.jsonl:2: bad row: not UTF-8 text"),
    (b'{"run_id": "r"}', r"records\.jsonl:2: bad record: example_id: Field required; category: Field required"),
])
def test_a_bad_record_inside_the_file_is_named_by_line_and_field(tmp_path: Path, bad: bytes, message: str) -> None:
    path = _write(tmp_path / "records.jsonl", [_record(0)], tail=bad + b"\n" + json.dumps(_record(1)).encode() + b"\n")
    with pytest.raises(RunError, match=message):
        read_records(path)


def test_a_bad_run_json_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "x", "verb": "evaluate"}))
    with pytest.raises(RunError, match=r"cannot read run\.json \(created: Field required\)"):
        read_header(tmp_path)


def test_a_damaged_summary_is_a_run_error_naming_the_file(tmp_path: Path) -> None:
    write_header(tmp_path, new_header(tmp_path, "evaluate"))
    (tmp_path / "summary.json").write_text('{"run_id": 5', encoding="utf-8")
    with pytest.raises(RunError, match=r"summary\.json: cannot read \(file: Invalid JSON"):
        read_run(tmp_path)


def test_report_pages_read_a_torn_trials_file_like_records(tmp_path: Path) -> None:
    """report on a tune run killed mid-write used to fail with a jsonlines traceback."""
    path = _write(tmp_path / "trials.jsonl", [{"number": 0}], tail=b'{"number": 1, "sta')
    assert read_jsonl(path) == [{"number": 0}]
    path.write_bytes(b'{"number": 0}\n\xff\n{"number": 2}\n')
    with pytest.raises(RunError, match=r"trials\.jsonl:2: bad row: not UTF-8 text"):
        read_jsonl(path)


def _pair(i: int, condition: str = "r1") -> list[dict]:
    return [_record(i), _record(i) | {"condition": condition}]


@pytest.mark.parametrize("torn", [json.dumps(_record(2)).encode()[:25], b'{"run_id": "r", "example_id": "\xff\xfe'],
                         ids=["json", "not-utf8"])
def test_resume_redoes_an_example_whose_last_row_was_cut_short(tmp_path: Path, torn: bytes) -> None:
    """evaluate --resume on a records.jsonl whose torn last row held non-UTF-8 bytes was a UnicodeDecodeError
    traceback (finished_records read it with jsonlines.open)."""
    path = _write(tmp_path / "records.jsonl", [*_pair(0), *_pair(1), _record(2)], tail=torn)
    kept = finished_records(path, "r1", ["ex_0", "ex_1", "ex_2"], ExampleRecord)
    assert sorted((r.example_id, r.condition) for r in kept) == [
        ("ex_0", "base"), ("ex_0", "r1"), ("ex_1", "base"), ("ex_1", "r1")]


@pytest.mark.parametrize(("bad", "message"), [
    (b"{oops", r"records\.jsonl:3: bad row: line contains invalid json"),
    (b"\xff\xfe", r"records\.jsonl:3: bad row: not UTF-8 text"),
], ids=["json", "not-utf8"])
def test_resume_names_a_bad_line_inside_records_by_file_and_line(tmp_path: Path, bad: bytes, message: str) -> None:
    """A damaged line that is not the last is not a crash's torn write: refuse with file:line (it used to be
    skipped silently, or a UnicodeDecodeError traceback)."""
    path = _write(tmp_path / "records.jsonl", _pair(0), tail=bad + b"\n" + b"".join(
        json.dumps(r).encode() + b"\n" for r in _pair(1)))
    with pytest.raises(RunError, match=message):
        finished_records(path, "r1", ["ex_0", "ex_1"], ExampleRecord)
