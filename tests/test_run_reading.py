"""Every run reads back through one typed reader (``runfiles.read_run``), old ones included."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from saag_opt.compare.comparison import CompareSummary
from saag_opt.errors import RunError
from saag_opt.evaluation.conversation_records import EpisodeRecord, EpisodeSummary
from saag_opt.evaluation.results import EvaluationSummary, ExampleRecord
from saag_opt.optimize.summary import OptimizeSummary
from saag_opt.runfiles import new_header, read_run, write_header
from saag_opt.security.records import SecurityRecord, SecuritySummary
from saag_opt.tune.results import TrialRow, TuneSummary

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.parent for base in (ROOT / "experiments" / "results", ROOT / "tests" / "fixtures" / "runs")
                   for p in base.rglob("run.json") if (p.parent / "summary.json").is_file())
"""Every committed run that finished (the resume fixtures under main-2be60be/ are unfinished on purpose)."""
MODELS = {"evaluate": (EvaluationSummary, ExampleRecord), "compare": (CompareSummary, ExampleRecord),
          "optimize": (OptimizeSummary, ExampleRecord),
          "tune": (TuneSummary, TrialRow), "security": (SecuritySummary, SecurityRecord),
          "evaluate-multiturn": (EpisodeSummary, EpisodeRecord)}


@pytest.mark.parametrize("run_dir", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_run_reads_back_typed(run_dir: Path) -> None:
    run = read_run(run_dir)
    summary_model, row_model = MODELS[run.header.verb]
    no_test = run.header.verb == "optimize" and run.header.config.get("evaluate_test") is False
    assert isinstance(run.summary, summary_model) and (run.records or no_test)  # --no-test: its candidates are it
    assert all(isinstance(r, row_model) for r in run.records)  # collected runs keep records.jsonl.gz
    if no_test:
        assert isinstance(run.summary, OptimizeSummary) and run.summary.candidates and run.summary.test is None


def test_an_optimize_summary_written_before_the_model_reads_and_writes_the_same_json() -> None:
    """summary.json had no model (``OptimizeResult.to_dict`` of dicts); its bytes must stay readable."""
    (path,) = (ROOT / "experiments" / "results" / "exp3").rglob("summary.json")
    written = json.loads(path.read_text(encoding="utf-8"))
    summary = OptimizeSummary.model_validate(written)
    assert summary.test is not None and summary.test.comparison is not None
    assert summary.test.comparison.paired.n == written["test"]["comparison"]["paired"]["n"]
    again = summary.to_dict()
    estimate, was = again.pop("estimate"), written.pop("estimate")
    assert _without_added(again, written) == written  # fields added since then only take their defaults
    # the estimate is written in the one Estimate shape now, with the numbers it had
    assert {role: {k: v for k, v in values.items() if k != "model"} for role, values in estimate["roles"].items()
            if role != "total"} == was["roles"]
    assert (estimate["roles"]["total"]["calls"], estimate["roles"]["total"]["dollars"]) == (was["lm_calls"], was["dollars"])
    assert f"{was['rollouts']} rollouts on train/val" in estimate["assumptions"]
    assert (again["saag_informed"], again["grounding"], again["reviewer_unusable"]) == (False, None, None)
    assert again["test"]["comparison"]["a"]["latency"]["untimed_replays"] == 0


def _without_added(new: object, old: object) -> object:
    """``new`` with the keys ``old`` does not have dropped, at every depth."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _without_added(v, old[k]) for k, v in new.items() if k in old}
    return new


def test_a_run_of_a_verb_nobody_registered_is_one_error_naming_the_file(tmp_path: Path) -> None:
    write_header(tmp_path, new_header(tmp_path, "distill"))
    with pytest.raises(RunError, match=r"run\.json: cannot read a 'distill' run \(the run kinds known here: ") as error:
        read_run(tmp_path)
    known = str(error.value).rpartition("known here: ")[2].rstrip(")").split(", ")
    assert {"compare", "evaluate", "optimize", "tune"} <= set(known)  # and any kind a loaded module registered


@pytest.mark.parametrize(("text", "message"), [
    ('{"status": "success"', r"summary\.json: cannot read \(file: Invalid JSON"),
    ('{"status": "success"}', r"summary\.json: cannot read \(run_dir: Field required; seed_version: Field required"),
])
def test_an_unreadable_summary_is_one_error_naming_the_file_and_field(tmp_path: Path, text: str,
                                                                        message: str) -> None:
    write_header(tmp_path, new_header(tmp_path, "optimize"))
    (tmp_path / "summary.json").write_text(text, encoding="utf-8")
    with pytest.raises(RunError, match=message):
        read_run(tmp_path, header_only=True)


def test_rows_are_read_plain_or_gzip_compressed_and_left_out_with_header_only(tmp_path: Path) -> None:
    write_header(tmp_path, new_header(tmp_path, "evaluate"))
    row = ExampleRecord(run_id="r", example_id="e1", category="simple", condition="base", correct=True)
    (tmp_path / "records.jsonl.gz").write_bytes(gzip.compress((row.model_dump_json() + "\n").encode()))
    assert read_run(tmp_path).records == [row] and read_run(tmp_path).summary is None
    assert read_run(tmp_path, header_only=True).records == []
    (tmp_path / "records.jsonl.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(RunError, match=r"records\.jsonl\.gz: cannot read"):
        read_run(tmp_path)


def test_the_tune_fixture_is_in_the_shape_tune_writes(tmp_path: Path) -> None:
    """The recorded fixture predated ``saag-opt tune``: its Pareto TEST results sat inside ``pareto``, where the
    report found them; tune writes them to ``test`` (``TestResult``), which the report never read."""
    run = read_run(shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "tune", tmp_path / "tune"))
    assert run.summary.pareto == [t.number for t in run.records if t.pareto]
    assert [t.trial for t in run.summary.test] == run.summary.pareto
    assert all(t.summary is not None for t in run.summary.test)
