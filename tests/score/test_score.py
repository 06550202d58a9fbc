"""score_predictions: bad rows become path:line rejections, good rows get cascade + BFCL truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saag_opt.data import load_dataset
from saag_opt.errors import DatasetError
from saag_opt.evaluation.categories import CategoryScore, relevance_suite
from saag_opt.model import Example
from saag_opt.score.calls import ScoreResult, score_predictions
from saag_opt.score.files import summary_path, write_score_json

FIXTURES = Path(__file__).parents[1] / "fixtures" / "predictions"
DATASET = FIXTURES / "dataset.jsonl"
PREDICTIONS = FIXTURES / "predictions.jsonl"


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return load_dataset(str(DATASET))


@pytest.fixture(scope="module")
def result(examples: list[Example]) -> ScoreResult:
    return score_predictions(PREDICTIONS, examples)


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "preds.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bad_rows_are_rejected_with_path_and_line_and_the_rest_is_scored(result: ScoreResult) -> None:
    assert [str(r) for r in result.rejections] == [
        f"{PREDICTIONS}:3: invalid JSON: unexpected end of data (at character 65)",
        f"{PREDICTIONS}:5: unknown example_id 'multiple_O'; nearest: 'multiple_0'",
        f"{PREDICTIONS}:6: missing field 'id'",
        f"{PREDICTIONS}:11: give exactly one of 'calls' or 'text'",
        f"{PREDICTIONS}:13: calls[0]: has no 'name'",
        f"{PREDICTIONS}:14: duplicate id 'p1' (first on line 1)",
    ]
    assert [r.id for r in result.rows] == ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p10"]


def test_each_prediction_gets_truth_and_its_cascade_stage(result: ScoreResult) -> None:
    by_id = {r.id: r for r in result.rows}
    verdicts = {r.id: (r.correct, r.cascade.stage_reached) for r in result.rows}
    assert verdicts == {
        "p1": (True, "passed"),      # structured calls, gold values
        "p2": (False, 3),            # base=12 is not in the query: grounding fails, BFCL value error
        "p3": (True, "passed"),      # <tool_call> with the OpenAI-safe name weather_get
        "p4": (False, 1),            # convert_currencies is not registered
        "p5": (True, "passed"),      # fenced parallel calls, reordered
        "p6": (True, None),          # abstained on irrelevance: cascade not applicable
        "p7": (False, None),         # called on irrelevance
        "p8": (False, 1),            # broken JSON text: unparsable
        "p10": (False, 2),           # missing to_currency, drifted from_curency
    }
    assert by_id["p8"].prediction.status == "unparsable"
    assert by_id["p8"].cascade.calls[0].fnem == -1
    assert by_id["p4"].cascade.calls[0].fnem == 0
    assert by_id["p2"].truth_reason == "value:base"
    assert not by_id["p6"].cascade.applicable and by_id["p6"].prediction.abstained
    # Two predictions may name one example.
    assert [r.example_id for r in result.rows[:2]] == ["simple_python_0", "simple_python_0"]


def test_summary_counts_accuracy_funnel_and_abstentions(result: ScoreResult) -> None:
    summary = result.summary
    assert (summary.n_predictions, summary.n_rejected) == (9, 6)
    assert summary.accuracy == pytest.approx(4 / 9)
    assert {c: (s.n, s.correct) for c, s in summary.categories.items()} == {
        "irrelevance": (2, 1), "multiple": (3, 0), "parallel": (1, 1), "simple_python": (3, 2)}
    suite = summary.relevance_suite
    assert suite is not None and not suite.complete
    assert suite.groups == pytest.approx({"simple": 2 / 3, "multiple": 0.0, "parallel": 1.0})
    assert suite.mean == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert summary.abstentions.model_dump() == {
        "abstained": 1, "abstained_correctly": 1, "abstained_when_call_expected": 0,
        "called_when_no_call_expected": 1, "unparsable": 1}
    # 8 calls from applicable predictions (p5 has two); irrelevance predictions add none.
    assert summary.cascade["funnel"] == [
        {"stage": 1, "reached": 8, "passed": 6}, {"stage": 2, "reached": 6, "passed": 5},
        {"stage": 3, "reached": 5, "passed": 4}]
    assert summary.cascade["metrics"]["rpr"]["n"] == 6  # stage-conditional: over calls that passed stage 1
    assert summary.rejections == [str(r) for r in result.rejections]


def test_write_score_json_writes_one_row_per_prediction_and_the_summary(result: ScoreResult, tmp_path: Path) -> None:
    out = tmp_path / "new" / "scores.jsonl"
    rows_path, summary_file = write_score_json(result, out)
    assert (rows_path, summary_file) == (out, tmp_path / "new" / "scores.summary.json")
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["id"] for row in rows] == [r.id for r in result.rows]
    assert all({"id", "example_id", "correct", "cascade"} <= row.keys() for row in rows)
    assert [row["correct"] for row in rows] == [r.correct for r in result.rows]
    assert rows[1]["cascade"]["calls"][0]["h"] == {"base": 1.0, "height": 0.0}
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    assert summary["accuracy"] == pytest.approx(4 / 9) and summary["n_rejected"] == 6
    assert sorted(p.name for p in out.parent.iterdir()) == ["scores.jsonl", "scores.summary.json"]  # no tmp left


def test_write_score_json_replaces_an_existing_file(result: ScoreResult, tmp_path: Path) -> None:
    out = tmp_path / "scores.jsonl"
    out.write_text("stale\n" * 100, encoding="utf-8")
    write_score_json(result, out)
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(result.rows)


@pytest.mark.parametrize(("out", "expected"), [
    ("scores.jsonl", "scores.summary.json"), ("scores.json", "scores.summary.json"),
    ("scores", "scores.summary.json"), ("run.out", "run.out.summary.json")])
def test_summary_path_rule(out: str, expected: str, tmp_path: Path) -> None:
    assert summary_path(tmp_path / out) == tmp_path / expected


def test_missing_predictions_file_is_a_clean_error(examples: list[Example], tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope\.jsonl: predictions file not found"):
        score_predictions(tmp_path / "nope.jsonl", examples)


def test_row_shape_errors_and_blank_lines_keep_line_numbers(examples: list[Example], tmp_path: Path) -> None:
    path = _write(tmp_path,
                  '{"id": 7, "example_id": "simple_python_0", "calls": []}',
                  "",
                  "[1, 2]",
                  '{"id": "a", "example_id": "simple_python_0", "calls": {"name": "f"}}',
                  '{"id": "b", "example_id": "simple_python_0", "calls": [{"name": "f", "arguments": [1]}]}',
                  '{"id": "simple_python_9"}',
                  '{"id": "c", "example_id": "simple_python_0"}')
    result = score_predictions(path, examples)
    assert [str(r) for r in result.rejections] == [
        f"{path}:3: row must be a JSON object, got list",
        f"{path}:4: field 'calls': Input should be a valid list",
        f"{path}:5: calls[0]: arguments must be an object, got list",
        f"{path}:6: give exactly one of 'calls' or 'text'",
        f"{path}:7: give exactly one of 'calls' or 'text'",
    ]
    (row,) = result.rows
    assert row.id == "7"  # numeric ids are accepted as strings
    # An abstention when a call is expected: stage 1 with FNEM -1, counted as a wrong abstention.
    assert (row.correct, row.cascade.stage_reached, row.cascade.calls[0].fnem) == (False, 1, -1)
    assert result.summary.abstentions.abstained_when_call_expected == 1


def test_unknown_id_without_example_id_explains_the_default(examples: list[Example], tmp_path: Path) -> None:
    result = score_predictions(_write(tmp_path, '{"id": "zzz", "calls": []}'), examples)
    assert [r.message for r in result.rejections] == [
        "unknown example_id 'zzz' (taken from 'id'; add 'example_id' when prediction ids differ from example ids)"]


def test_example_id_defaults_to_id(examples: list[Example], tmp_path: Path) -> None:
    path = _write(tmp_path, '{"id": "simple_python_0", "text": "calculate_triangle_area(base=10, height=5)"}')
    (row,) = score_predictions(path, examples).rows
    assert (row.example_id, row.correct) == ("simple_python_0", True)


def test_empty_file_scores_nothing(examples: list[Example], tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    result = score_predictions(path, examples)
    assert (result.rows, result.rejections, result.summary.accuracy) == ((), (), None)
    assert result.summary.relevance_suite is None and result.stats.n_calls == 0


def test_relevance_suite_is_bfcl_unweighted_mean_with_simple_averaged_first() -> None:
    cats = {"simple_python": CategoryScore(n=10, correct=10, accuracy=1.0),
            "simple_java": CategoryScore(n=2, correct=0, accuracy=0.0),
            "multiple": CategoryScore(n=4, correct=4, accuracy=1.0),
            "parallel": CategoryScore(n=4, correct=0, accuracy=0.0),
            "parallel_multiple": CategoryScore(n=4, correct=4, accuracy=1.0),
            "irrelevance": CategoryScore(n=4, correct=0, accuracy=0.0)}
    suite = relevance_suite(cats)
    assert suite is not None and suite.complete
    assert suite.groups == {"simple": 0.5, "multiple": 1.0, "parallel": 0.0, "parallel_multiple": 1.0}
    assert suite.mean == pytest.approx(0.625)  # irrelevance is not part of it
    assert relevance_suite({"irrelevance": cats["irrelevance"]}) is None


def test_score_keeps_the_paper_grounding_by_default_and_rows_name_the_mode(
        result: ScoreResult, examples: list[Example], tmp_path: Path) -> None:
    calibrated = score_predictions(PREDICTIONS, examples, grounding="calibrated")
    assert {r.cascade.grounding for r in result.rows} == {"paper"}
    assert {r.cascade.grounding for r in calibrated.rows} == {"calibrated"}
    assert [r.to_row().grounding for r in calibrated.rows] == ["calibrated"] * len(calibrated.rows)
    for paper_row, calibrated_row in zip(result.rows, calibrated.rows):  # the paper's metrics do not move
        for paper_call, calibrated_call in zip(paper_row.cascade.calls, calibrated_row.cascade.calls):
            assert (paper_call.avem, paper_call.vhr, paper_call.h) == (
                calibrated_call.avem, calibrated_call.vhr, calibrated_call.h)
    rows_path, _ = write_score_json(calibrated, tmp_path / "scores.jsonl")
    assert {json.loads(line)["grounding"] for line in rows_path.read_text(encoding="utf-8").splitlines()} == {
        "calibrated"}


def test_predictions_may_be_a_json_array_file_like_the_datasets(examples: list[Example], tmp_path: Path) -> None:
    """The dataset loaders read JSON array files; a predictions file in that shape was one bad 'row'."""
    path = tmp_path / "preds.json"
    path.write_text(json.dumps([{"id": "simple_python_0", "text": "calculate_triangle_area(base=10, height=5)"},
                                {"id": "irrelevance_0", "calls": []}], indent=2), encoding="utf-8-sig")
    result = score_predictions(path, examples)
    assert result.rejections == () and [(r.id, r.correct) for r in result.rows] == [
        ("simple_python_0", True), ("irrelevance_0", True)]
