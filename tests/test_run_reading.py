"""Every run reads back through one typed reader (``runfiles.read_run``), old ones included."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from saag_opt.errors import RunError
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.runfiles import new_header, read_run, write_header


def test_a_run_of_a_verb_nobody_registered_is_one_error_naming_the_file(tmp_path: Path) -> None:
    write_header(tmp_path, new_header(tmp_path, "distill"))
    with pytest.raises(RunError, match=r"run\.json: cannot read a 'distill' run \(the run kinds known here: .*evaluate"):
        read_run(tmp_path)


def test_rows_are_read_plain_or_gzip_compressed_and_left_out_with_header_only(tmp_path: Path) -> None:
    write_header(tmp_path, new_header(tmp_path, "evaluate"))
    row = ExampleRecord(run_id="r", example_id="e1", category="simple", condition="base", correct=True)
    (tmp_path / "records.jsonl.gz").write_bytes(gzip.compress((row.model_dump_json() + "\n").encode()))
    assert read_run(tmp_path).records == [row] and read_run(tmp_path).summary is None
    assert read_run(tmp_path, header_only=True).records == []
    (tmp_path / "records.jsonl.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(RunError, match=r"records\.jsonl\.gz: cannot read"):
        read_run(tmp_path)
