"""``saag-opt score`` on BFCL multi-turn result files: BFCL's result shape, BFCL's checkers, bad rows as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from saag_opt.cli import app
from saag_opt.data.bfcl_environment import bfcl_call_string, gold_calls
from saag_opt.episodes import Episode
from saag_opt.score.conversations import score_multi_turn
from saag_opt.score.files import write_score_json
from tests.episodes.world import episodes, needs_bfcl

pytestmark = [pytest.mark.integration, needs_bfcl]


def _decoded(entry: Episode) -> list[list[list[str]]]:
    """The gold as a model's result: per turn one step of decoded call strings, then an empty answer step."""
    return [[[bfcl_call_string(c) for c in turn], []] if turn else [[]] for turn in gold_calls(entry)]


def _fc(entry: Episode) -> list[list[list[dict]]]:
    """The gold as a FC model's raw result: ``[{name: JSON arguments}]`` per step."""
    return [[[{c.name: json.dumps(dict(c.arguments))} for c in turn]] for turn in gold_calls(entry)]


def _write(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_gold_results_in_each_shape_are_valid_and_a_wrong_one_fails_where_it_goes_wrong(tmp_path: Path) -> None:
    base = episodes("multi_turn_base")[:4]
    miss = episodes("multi_turn_miss_param")[0]
    prompting = [["[" + ", ".join(bfcl_call_string(c) for c in turn) + "]"] for turn in gold_calls(base[2])]
    path = _write(tmp_path / "BFCL_v4_multi_turn_result.json", [
        {"id": base[0].id, "result": _decoded(base[0]), "inference_log": "ignored"},
        {"id": base[1].id, "result": _fc(base[1])},
        {"id": base[2].id, "result": prompting},
        {"id": base[3].id, "result": _decoded(base[3])[:-1]},  # one turn short: force-terminated
        {"id": miss.id, "result": [[["ls()"]] if not turn else [[bfcl_call_string(c) for c in turn]]
                                   for turn in gold_calls(miss)]},  # a call at the abstention turn
    ])
    result = score_multi_turn(path, [*base, miss])
    assert result.rejections == ()
    valid = {r.id: r.valid for r in result.rows}
    assert valid == {base[0].id: True, base[1].id: True, base[2].id: True, base[3].id: False, miss.id: False}
    short = next(r for r in result.rows if r.id == base[3].id)
    assert short.judgement.error_type == "multi_turn:force_terminated"
    abstain = next(r for r in result.rows if r.id == miss.id)
    assert abstain.judgement.checks["multi_turn_irrelevance_checker"] is False
    summary = result.summary
    assert (summary.n, summary.valid, summary.categories["multi_turn_base"].correct) == (5, 3, 3)
    assert summary.error_types["multi_turn:force_terminated"] == 1
    rows, side = write_score_json(result, tmp_path / "scores.jsonl")
    assert len(rows.read_text().splitlines()) == 5 and json.loads(side.read_text())["valid"] == 3


def test_a_wrong_state_names_the_turn_and_bad_rows_are_file_line_rejections(tmp_path: Path) -> None:
    entry = episodes("multi_turn_base")[0]
    wrong = _decoded(entry)
    wrong[0][0] = [s.replace("'temp'", "'tmp'") for s in wrong[0][0]]
    path = _write(tmp_path / "results.jsonl", [
        {"id": entry.id, "result": wrong},
        {"id": entry.id, "result": wrong},
        {"id": "multi_turn_base_9999", "result": []},
        {"result": []},
        {"id": "multi_turn_base_1", "result": "not a list"},
        "{broken json",
    ])
    result = score_multi_turn(path, episodes("multi_turn_base"))
    (row,) = result.rows
    assert not row.valid and row.judgement.failed_turn == 0
    assert row.judgement.error_type == "multi_turn:instance_state_mismatch" and row.judgement.details
    lines = [(r.line, r.message) for r in result.rejections]
    assert [line for line, _ in lines] == [2, 3, 4, 5, 6]
    assert "duplicate id" in lines[0][1] and "unknown entry id" in lines[1][1] and "id" in lines[2][1]
    assert "inference_error" in lines[3][1]


def test_undecodable_steps_are_skipped_as_bfcl_skips_them_and_unknown_functions_are_refused(tmp_path: Path) -> None:
    entry = episodes("multi_turn_base")[0]
    result = _decoded(entry)
    result[0].insert(0, "I will now think about it.")  # chat text: not a call list, skipped
    result[0][1] = [*result[0][1], "rm_rf(path='/')", "mv(source=x, destination='y')"]
    path = _write(tmp_path / "results.jsonl", [{"id": entry.id, "result": result}])
    (row,) = score_multi_turn(path, [entry]).rows
    assert row.valid  # the unknown call ran nothing; the non-literal one was left out
    assert any("skipped" in s for s in row.skipped) and any("'rm_rf' is not a function" in s for s in row.skipped)
    assert any("mv(source=x" in s for s in row.skipped)


def test_the_cli_scores_a_result_file_and_exits_2_on_a_rejected_row(tmp_path: Path) -> None:
    entry = episodes("multi_turn_base")[0]
    good = _write(tmp_path / "good.jsonl", [{"id": entry.id, "result": _decoded(entry)}])
    out = tmp_path / "scores.jsonl"
    run = CliRunner().invoke(app, ["score", str(good), "--dataset", "bfcl:multi_turn_base", "--json", str(out)],
                             env={"COLUMNS": "200"})
    assert run.exit_code == 0, run.output
    assert "multi_turn_checker alone" in run.output and "199 entries of the dataset have no row" in run.output
    assert json.loads(out.read_text())["valid"] is True
    bad = _write(tmp_path / "bad.jsonl", [{"id": entry.id, "result": _decoded(entry)}, {"id": "x", "result": []}])
    run = CliRunner().invoke(app, ["score", str(bad), "--dataset", "bfcl:multi_turn_base"], env={"COLUMNS": "200"})
    assert run.exit_code == 2 and "bad.jsonl:2: unknown entry id" in run.output
