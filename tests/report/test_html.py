"""The HTML report from real run directories: sections, numbers, well-formedness, no network, size."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from markupsafe import escape
from typer.testing import CliRunner

from saag_opt.cli import app
from saag_opt.cli.report import write_run_report
from saag_opt.compare.run import CompareConfig, run_compare
from saag_opt.data import load_dataset
from saag_opt.errors import RunError
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.report.html import REPORT_NAME, render_report, write_report
from saag_opt.report.pages import outcome
from saag_opt.report.pages.tune import _trial_view
from saag_opt.report.score_tables import METRIC_LABELS
from saag_opt.runfiles import _FINISH_HOOKS, RunHeader, finish_header, on_run_finished, write_header
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune.results import TrialRow
from tests.compare.test_compare import DATASET, MARKER, SPLIT, World
from tests.optimize import optimize_world
from tests.report.checks import check_page, section_ids, table_rows
from tests.report.runs import prompt_files

pytestmark = pytest.mark.integration

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "predictions"


def _page(run_dir: Path) -> str:
    return (run_dir / REPORT_NAME).read_text(encoding="utf-8")


def test_evaluate_run_writes_a_report_with_every_section(eval_runs: dict[str, Path]) -> None:
    run_dir = eval_runs["evaluate"]
    html = _page(run_dir)  # written by the run itself when it finished
    data = check_page(html)
    assert section_ids(html) == ["run0-funnel", "run0-metrics", "run0-accuracy", "run0-helpharm", "run0-costs",
                                 "run0-unusable", "run0-examples"]
    assert table_rows(html, "Reviewer-unusable counts") == [["r2", "0"]]  # summary.json always carries the count
    summary = json.loads((run_dir / "summary.json").read_text())
    hh = summary["help_harm"]
    (row,) = table_rows(html, "Help and harm")
    assert row[:4] == ["base -> r2", str(hh["n"]), str(hh["fixed"]), str(hh["broken"])]
    assert row[-1] == f"{hh['mcnemar_p']:.3g}"
    # every stage-conditional metric is labelled with the calls it is over
    metrics = table_rows(html, "Metric means (stage-conditional)")
    assert [r[1].split()[0] for r in metrics[:8]] == ["FNEM", "NCS", "RPR", "PDS", "SPR", "AVEM", "QSLO", "VHR"]
    assert {r[1] for r in metrics} == {" ".join(label.split()) for label in METRIC_LABELS.values()}
    assert any(r[4] == "calls that passed stage 1" for r in metrics)
    assert html.count('<svg class="histogram"') == 16  # 8 metrics x (base, r2)
    # the browser: one row per example, outcomes from the records, details in the embedded JSON
    examples = data["runs"][0]["examples"]
    assert len(examples) == summary["n_examples"] == 12
    outcomes = re.findall(r'<td class="o-([a-z-]+)">', html)
    assert outcomes.count("fixed") == hh["fixed"] and outcomes.count("broken") == hh["broken"]
    assert all(e["query"] for e in examples)  # queries come from the run's dataset
    reviewed = [c for e in examples for c in e["conditions"]]
    assert any(r.get("feedback") == "Please fix the call." for c in reviewed for r in c.get("rounds", []))
    accuracy = table_rows(html, "Truth accuracy per category")
    assert accuracy[-1] == ["all", "12", f"{100 * summary['base']['accuracy']:.1f}",
                            f"{100 * summary['reviewed']['accuracy']:.1f}"]


def test_compare_run_shows_base_a_b_and_the_paired_test(eval_runs: dict[str, Path]) -> None:
    run_dir = eval_runs["compare"]
    html = _page(run_dir)
    data = check_page(html)
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = table_rows(html, "Help and harm")
    assert [r[0] for r in rows] == ["base -> A v1", "base -> B v2", "A v1 -> B v2 (paired)"]
    paired = summary["paired"]
    assert rows[2][2:4] == [str(paired["b_only_right"]), str(paired["a_only_right"])]
    assert rows[2][-1] == f"{paired['mcnemar_p']:.3g}"
    assert table_rows(html, "Truth accuracy per category: base, A v1, B v2")[-1][2:] == [
        f"{100 * summary['base']['accuracy']:.1f}", f"{100 * summary['a']['accuracy']['accuracy']:.1f}",
        f"{100 * summary['b']['accuracy']['accuracy']:.1f}"]
    assert len(data["runs"][0]["examples"]) == summary["matched"]
    assert "A v1 (reference) with B v2 (target)" in html
    # the nested evaluate passes of a compare run are runs too, each with its own report
    nested = sorted(p.parent for p in run_dir.glob("*/*/run.json"))
    assert len(nested) == 3 and all((p / REPORT_NAME).is_file() for p in nested)


def test_optimize_run_shows_lineage_diffs_and_the_test_table(optimize_run: Path) -> None:
    html = _page(optimize_run)
    check_page(html)
    assert section_ids(html) == ["run0-lineage", "run0-progress", "run0-candidates", "run0-prompts",
                                 "run0-accuracy-test", "run0-helpharm-test", "run0-costs-test", "run0-examples"]
    versions = table_rows(html, "Prompt versions")
    assert versions == [["0", "v2", "-", "0.500", "0", "", "yes"], ["1", "v3-gepa", "v2", "1.000", "12", "yes", "yes"]]
    dag = re.search(r'<svg class="dag".*?</svg>', html, re.S).group(0)
    assert dag.count('<g class="node') == 2 and dag.count('class="edge"') == 1
    assert '<g class="node best frontier">' in dag and "★ v3-gepa" in dag
    counts = table_rows(html, "Help and harm per candidate (val)")
    assert [row[:12] for row in counts] == [["0", "v2", "-", "0.500", "-", "2 / 4", "0", "0", "0.0", "0.0", "", ""],
                                            ["1", "v3-gepa", "v2", "1.000", "+2 -0", "2 / 4", "2", "0", "100.0", "0.0",
                                             "yes", "yes"]]
    assert counts[0][12] == "-" and optimize_world.KEYWORD in counts[1][12]  # the edit from the parent
    assert table_rows(html, "Which component moved val outcomes (candidates whose edit changed one predictor)") == [
        ["review", "1", "1", "2", "0"]]
    # one rule edit (the default proposer): the seed's text kept, the new rule added as a list item
    assert f'<span class="d-add">+- {escape(optimize_world.PROPOSED_INSTRUCTION)}</span>' in html
    assert f'<span class="d-ctx"> {escape(optimize_world.SEED_INSTRUCTION)}</span>' in html
    assert "TEST split, which GEPA never saw" in html
    accuracy = table_rows(html, "TEST: Truth accuracy per category: base, seed v2, best v3-gepa")
    assert accuracy[-1] == ["all", "4", "50.0", "50.0", "100.0"]
    paired = table_rows(html, "Help and harm")[2]  # seed -> best on the same TEST examples
    assert paired[:4] == ["seed v2 -> best v3-gepa (paired)", "4", "2", "0"]


def test_tune_fixture_renders_pareto_trials_and_effects(tune_run: Path) -> None:
    html = render_report([tune_run])
    check_page(html)
    assert section_ids(html) == ["run0-pareto", "run0-trials", "run0-effects", "run0-tunetest"]
    trials = [json.loads(line) for line in (tune_run / "trials.jsonl").read_text().splitlines()]
    scatter = re.search(r'<svg class="scatter".*?</svg>', html, re.S).group(0)
    assert scatter.count('<g class="point">') == sum(t["values"] is not None for t in trials) + sum(
        t["pareto"] for t in trials)  # every completed trial, plus each Pareto one's TEST re-evaluation
    assert scatter.count('class="pt cross"') == sum(t["feasible"] is False for t in trials) + 1  # + legend
    assert scatter.count('class="pt test"') == sum(t["pareto"] for t in trials) + 1
    assert len(table_rows(html, "Trials")) == len(trials)
    for param in ("mechanism", "prompt", "reviewer", "temperature", "saag_informed"):
        assert f"<caption>Effect of {param}</caption>" in html
    temperature = [r[0] for r in table_rows(html, "Effect of temperature")]
    assert temperature[0].startswith("< ") and temperature[-1].startswith(">= ")  # bins in order
    assert len(table_rows(html, "Pareto configurations on TEST")) == sum(t["pareto"] for t in trials)


def test_a_1000_example_evaluation_stays_under_1_mb(big_run: Path) -> None:
    path = write_report(big_run)
    size = path.stat().st_size
    print(f"1,000-example evaluate report: {size:,} bytes")
    assert size < 1_000_000
    data = check_page(path.read_text(encoding="utf-8"))
    assert len(data["runs"][0]["examples"]) == 1000
    assert "<caption>Reviewer-unusable counts</caption>" in path.read_text(encoding="utf-8")


def test_text_from_records_cannot_break_out_of_the_page(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    header = RunHeader(run_id="x", verb="evaluate", created="2026-01-01T00:00:00+00:00")
    write_header(run_dir, header)
    evil = '</script><script>alert(1)</script><img src="http://evil.example/x.png">'
    rows = [ExampleRecord(run_id="x", example_id=evil, category="simple", condition="base", correct=True),
            ExampleRecord(run_id="x", example_id=evil, category="simple", condition="r2", correct=False,
                          rounds=[{"index": 0, "reviewer": "llm", "verdict": "reject", "tentative": {},
                                   "feedback": evil}])]
    (run_dir / "records.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    html = render_report([run_dir])
    data = check_page(html)  # no external URL, still one data block that parses
    assert html.count("<script") == 2
    assert data["runs"][0]["examples"][0]["conditions"][0]["rounds"][0]["feedback"] == evil


def test_unfinished_and_empty_runs_still_render_with_a_note(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_header(run_dir, RunHeader(run_id="r", verb="evaluate", created="2026-01-01T00:00:00+00:00"))
    html = render_report([run_dir])
    check_page(html)
    assert "run status is &#39;started&#39;" in html and "no data to draw yet" in html


def test_finish_hook_runs_for_every_ending_and_never_fails_a_run(tmp_path: Path) -> None:
    seen: list[Path] = []

    def boom(run_dir: Path) -> None:
        raise RuntimeError("report exploded")

    remove_boom, remove_seen = on_run_finished(boom), on_run_finished(seen.append)
    try:
        header = RunHeader(run_id="r", verb="evaluate", created="2026-01-01T00:00:00+00:00")
        finish_header(tmp_path, header)  # the failing hook is logged, not raised
        finish_header(tmp_path, header, KeyboardInterrupt())
    finally:
        remove_boom()
        remove_seen()
    assert seen == [tmp_path, tmp_path]
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "interrupted"


def test_report_command_puts_several_runs_on_one_page(eval_runs: dict[str, Path], optimize_run: Path,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "all.html"
    result = runner.invoke(app, ["report", str(eval_runs["evaluate"]), str(eval_runs["compare"]), str(optimize_run),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    html = out.read_text(encoding="utf-8")
    data = check_page(html)
    assert len(data["runs"]) == 3 and "saag-opt report: 3 runs" in html
    assert [s for s in section_ids(html) if s.endswith("-examples")] == ["run0-examples", "run1-examples",
                                                                         "run2-examples"]


def test_report_command_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, RunError) and "not a run directory" in str(result.exception)


def test_score_json_writes_a_report_beside_its_output(tmp_path: Path) -> None:
    out = tmp_path / "scores.jsonl"
    result = runner.invoke(app, ["score", str(FIXTURES / "predictions.jsonl"), "--dataset",
                                 str(FIXTURES / "dataset.jsonl"), "--json", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output  # the fixture has rejected rows on purpose
    html = (tmp_path / "scores.report.html").read_text(encoding="utf-8")
    data = check_page(html)
    assert section_ids(html) == ["run0-funnel", "run0-metrics", "run0-accuracy", "run0-examples"]
    assert len(data["runs"][0]["examples"]) == 9
    assert table_rows(html, "Stage funnel")[0][:4] == ["predictions", "1 registry (name)", "8", "6"]
    assert render_report([tmp_path / "scores.summary.json"]) .count("<section") == 4


@pytest.mark.parametrize("ref_ok,target_ok,expected", [(False, True, "fixed"), (True, False, "broken"),
                                                       (True, True, "unchanged-right"),
                                                       (False, False, "unchanged-wrong")])
def test_outcome_classes(ref_ok: bool, target_ok: bool, expected: str) -> None:
    assert outcome(ref_ok, target_ok) == expected
    assert outcome(ref_ok, target_ok, error=True) == "error"


def test_the_well_formedness_check_catches_broken_markup() -> None:
    with pytest.raises(AssertionError):
        check_page('<!DOCTYPE html><div><span></div><script type="application/json" id="report-data">{}</script>')
    with pytest.raises(AssertionError, match="leave the page"):
        check_page('<!DOCTYPE html><a href="https://x.example">x</a>'
                   '<script type="application/json" id="report-data">{}</script>')


def test_the_evaluate_command_leaves_report_html_in_its_run_directory(tmp_path: Path) -> None:
    _, v2 = prompt_files(tmp_path / "prompts", MARKER)
    with ScriptedOpenAIServer(World(load_dataset(DATASET, split=SPLIT, limit=4))) as server:
        result = runner.invoke(app, ["evaluate", "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}",
                                     "--prompt", v2, "--dataset", DATASET, "--limit", "4",
                                     "--runs-dir", str(tmp_path / "runs")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    data = check_page((run_dir / REPORT_NAME).read_text(encoding="utf-8"))
    assert len(data["runs"][0]["examples"]) == 4

    assert write_run_report not in _FINISH_HOOKS  # the command unregistered its hook when it ended


def test_compare_of_two_finished_runs_renders_the_same_paired_numbers(eval_runs: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    fresh = eval_runs["compare"]
    (dir_a,), (dir_b,) = (fresh / "a").iterdir(), (fresh / "b").iterdir()
    remove = on_run_finished(write_report)
    try:
        offline = run_compare(CompareConfig(a=str(dir_a), b=str(dir_b), runs_dir=tmp_path / "runs")).run_dir
    finally:
        remove()
    html = _page(offline)  # written when the (LM-free) compare run finished
    check_page(html)
    fresh_rows, offline_rows = table_rows(_page(fresh), "Help and harm"), table_rows(html, "Help and harm")
    assert [r[1:] for r in offline_rows] == [r[1:] for r in fresh_rows]
    assert "runs" in dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]*)</dd>", html))["mode"]


def test_an_optimize_run_without_val_scores_says_so_instead_of_marking_the_frontier(optimize_run: Path,
                                                                                   tmp_path: Path) -> None:
    copy = tmp_path / optimize_run.name
    shutil.copytree(optimize_run, copy)
    artifacts = json.loads((copy / "artifacts.json").read_text())
    (copy / "artifacts.json").write_text(json.dumps({"versions": artifacts["versions"]}))
    html = render_report([copy])
    check_page(html)
    assert "GEPA&#39;s val-instance frontier not recorded by this run" in html and "node best frontier" not in html


def test_tune_rows_as_tune_writes_them_show_repeats_and_cost() -> None:
    """`saag-opt tune` writes ``duplicate_of`` and ``metrics.cost_per_item_usd``; the trials table reads both."""
    row = {"number": 3, "state": "COMPLETE", "params": {"mechanism": "r2"}, "values": {"help": 0.5, "harm": 0.1},
           "metrics": {"cost_per_item_usd": 0.0}, "constraints": {"latency_overhead_x": -0.5}, "feasible": True,
           "pareto": False, "duplicate_of": 0}
    view = _trial_view(TrialRow.model_validate(row))
    assert view["repeat"] is True and view["cost"] == 0.0 and view["help"] == 0.5
    fresh = _trial_view(TrialRow.model_validate({**row, "duplicate_of": None, "metrics": {}}))
    assert fresh["repeat"] is False and fresh["cost"] is None
