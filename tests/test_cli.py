"""The saag-opt CLI: score, datasets list/fetch, error handling in main(), and the real console script."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import saag_opt.data
from saag_opt import __version__
from saag_opt.cli import app, main
from saag_opt.errors import DatasetError
from saag_opt.score import calls as score_module
from tests.conftest import requires

FIXTURES = Path(__file__).parent / "fixtures" / "predictions"
DATASET = FIXTURES / "dataset.jsonl"
PREDICTIONS = FIXTURES / "predictions.jsonl"
SHIPPED_BFCL = Path(__file__).parents[1] / "datasets" / "bfcl.jsonl"
CONSOLE_SCRIPT = Path(sys.executable).with_name("saag-opt")
WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}

runner = CliRunner()


def test_score_prints_tables_rejections_and_exits_2_when_rows_were_rejected(tmp_path: Path) -> None:
    out = tmp_path / "scores.jsonl"
    result = runner.invoke(app, ["score", str(PREDICTIONS), "--dataset", str(DATASET), "--json", str(out)], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "SAAG stage funnel over 8 calls" in result.output
    assert "stage-conditional" in result.output
    assert "6 calls that passed stage 1" in result.output
    assert "relevance-suite mean (3 of 4 groups: simple, multiple, parallel)" in result.output
    assert "6 rejected row(s), not scored" in result.output
    assert f"{PREDICTIONS}:14: duplicate id 'p1' (first on line 1)" in result.output
    assert len(out.read_text(encoding="utf-8").splitlines()) == 9
    assert json.loads((tmp_path / "scores.summary.json").read_text(encoding="utf-8"))["n_predictions"] == 9
    assert {json.loads(line)["grounding"] for line in out.read_text(encoding="utf-8").splitlines()} == {"paper"}


def test_score_grounding_option_decides_passed_and_is_named_in_the_rows(tmp_path: Path) -> None:
    out = tmp_path / "scores.jsonl"
    result = runner.invoke(app, ["score", str(PREDICTIONS), "-d", str(DATASET), "--grounding", "calibrated",
                                 "--json", str(out)], env=WIDE)
    assert result.exit_code == 2, result.output  # the fixture has rejected rows
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {row["grounding"] for row in rows} == {"calibrated"} == {row["cascade"]["grounding"] for row in rows}
    bad = runner.invoke(app, ["score", str(PREDICTIONS), "-d", str(DATASET), "--grounding", "strict"], env=WIDE)
    assert bad.exit_code == 2 and "strict" in bad.output


def test_score_exits_0_when_every_row_was_scored(tmp_path: Path) -> None:
    preds = tmp_path / "good.jsonl"
    preds.write_text('{"id": "simple_python_0", "calls": [{"name": "calculate_triangle_area", '
                     '"arguments": {"base": 10, "height": 5}}]}\n'
                     '{"id": "irrelevance_0", "text": "Leaves fall."}\n', encoding="utf-8")
    result = runner.invoke(app, ["score", str(preds), "-d", str(DATASET)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "rejected" not in result.output
    assert "100.0%" in result.output


def test_rejection_text_with_rich_markup_is_printed_literally(tmp_path: Path) -> None:
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"id": "[bold]x[/bold]", "calls": []}\n', encoding="utf-8")
    result = runner.invoke(app, ["score", str(preds), "-d", str(DATASET)], env=WIDE)
    assert result.exit_code == 2
    assert "unknown example_id '[bold]x[/bold]'" in result.output


def test_main_turns_a_saag_opt_error_into_one_stderr_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        main(["score", str(missing), "--dataset", str(DATASET)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: {missing}: predictions file not found\n"


def test_main_reports_an_unknown_dataset_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["score", str(PREDICTIONS), "--dataset", "shipped:nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown dataset 'shipped:nope'") and err.count("\n") == 1


def test_score_refuses_a_tau2_dataset_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tau2 leaves no result file to score (its evaluator judges while the conversation runs)."""
    results = tmp_path / "results.jsonl"
    results.write_text('{"id": "0", "result": [[["cd(folder=\'x\')"]]]}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["score", str(results), "--dataset", "tau2:airline"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 'tau2:airline' is a tau2 dataset") and "`saag-opt score` runs" in err
    assert err.count("\n") == 1


def test_main_keeps_the_traceback_of_unexpected_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any, **__: Any) -> None:
        raise RuntimeError("a bug, not a user mistake")

    monkeypatch.setattr(score_module, "score_predictions", boom)
    with pytest.raises(RuntimeError, match="a bug, not a user mistake"):
        main(["score", str(PREDICTIONS), "--dataset", str(DATASET)])


def test_datasets_list_shows_bfcl_and_shipped_datasets() -> None:
    result = runner.invoke(app, ["datasets", "list"], env=WIDE)
    assert result.exit_code == 0, result.output
    names = {info.name for info in saag_opt.data.list_datasets()}
    assert {"shipped:bfcl", "bfcl:simple_python"} <= names
    for name in names:
        assert name in result.output


def test_datasets_fetch_bfcl_prints_where_it_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Any] = []

    def fake_fetch(cache_dir: Path | None = None) -> Path:
        seen.append(cache_dir)
        return tmp_path / "bfcl" / "bfcl_eval.whl"

    monkeypatch.setattr(saag_opt.data, "fetch_bfcl", fake_fetch)
    result = runner.invoke(app, ["datasets", "fetch", "bfcl", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output == f"bfcl: {tmp_path / 'bfcl' / 'bfcl_eval.whl'}\n"
    assert seen == [tmp_path]


def test_datasets_fetch_failure_is_one_error_line(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def failing_fetch(cache_dir: Path | None = None) -> Path:
        raise DatasetError("could not download bfcl-eval with pip: no network", path="/cache/bfcl")

    monkeypatch.setattr(saag_opt.data, "fetch_bfcl", failing_fetch)
    with pytest.raises(SystemExit) as exit_info:
        main(["datasets", "fetch", "bfcl"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: /cache/bfcl: could not download bfcl-eval with pip: no network\n"


def test_datasets_fetch_rejects_unknown_names() -> None:
    result = runner.invoke(app, ["datasets", "fetch", "glaive"])
    assert result.exit_code == 2
    assert "'glaive' is not one of 'bfcl'" in result.output


def test_version_and_help() -> None:
    assert runner.invoke(app, ["--version"]).output == f"saag-opt {__version__}\n"
    result = runner.invoke(app, ["--help"], env=WIDE)
    assert result.exit_code == 0
    assert "score" in result.output and "datasets" in result.output
    score_help = runner.invoke(app, ["score", "--help"], env=WIDE).output
    assert "scores.jsonl -> scores.summary.json" in score_help


def test_importing_the_cli_does_not_import_heavy_modules() -> None:
    code = ("import sys, saag_opt.cli; heavy = [m for m in ('dspy', 'litellm', 'saag_opt.score.calls', "
            "'saag_opt.data', 'saag_opt.saag') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _gold_call(gold: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
    """A call built from the first acceptable value of each gold parameter (omitting optional ones)."""
    (name, params), = gold.items()
    return {"name": name, "arguments": {p: values[0] for p, values in params.items() if values[0] != ""}}


def _scalar_gold(row: dict[str, Any]) -> bool:
    return all(isinstance(values[0], (str, int, float)) for gold in row["ground_truth"]
               for params in gold.values() for values in params.values())


@requires(None if CONSOLE_SCRIPT.is_file() else "the saag-opt console script is not installed (pip install -e .)")
def test_console_script_scores_against_the_shipped_bfcl_dataset(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in SHIPPED_BFCL.read_text(encoding="utf-8").splitlines() if line.strip()]
    simple = [r for r in rows if r["category"] == "simple_python" and _scalar_gold(r)][:3]
    irrelevant = next(r for r in rows if r["category"] == "irrelevance")
    preds = [{"id": r["id"], "calls": [_gold_call(g) for g in r["ground_truth"]]} for r in simple]
    preds.append({"id": "wrong-name", "example_id": simple[0]["id"],
                  "calls": [{"name": "no_such_function", "arguments": {}}]})
    preds.append({"id": irrelevant["id"], "text": "I can't help with that using these tools."})
    pred_file = tmp_path / "preds.jsonl"
    pred_file.write_text("".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8")
    out = tmp_path / "scores.jsonl"

    proc = subprocess.run([str(CONSOLE_SCRIPT), "score", str(pred_file), "--dataset", "shipped:bfcl",
                           "--json", str(out)], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "SAAG stage funnel over 4 calls" in proc.stdout
    scored = {row["id"]: row["correct"] for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert scored == {**{r["id"]: True for r in simple}, "wrong-name": False, irrelevant["id"]: True}
    summary = json.loads((tmp_path / "scores.summary.json").read_text(encoding="utf-8"))
    assert summary["accuracy"] == pytest.approx(4 / 5)
    assert summary["cascade"]["funnel"][0] == {"stage": 1, "reached": 4, "passed": 3}


def test_evaluate_and_compare_report_on_the_test_split_unless_told_otherwise() -> None:
    """Splits are sacred: GEPA sees train/val, so the default reported numbers come from test."""
    command = typer.main.get_command(app)
    for name in ("evaluate", "compare"):
        split = next(p for p in command.commands[name].params if p.name == "split")
        assert split.default == "test"


@pytest.mark.parametrize(("command", "default"), [("evaluate", "calibrated"), ("compare", "calibrated"),
                                                  ("score", "paper")])
def test_every_command_the_cascade_decides_in_offers_grounding(command: str, default: str) -> None:
    help_text = " ".join(runner.invoke(app, [command, "--help"], env=WIDE).output.split())
    assert "--grounding" in help_text and re.search(rf"default: \(?{default}\)?\]", help_text)


@pytest.mark.parametrize("command", [
    ["score", str(PREDICTIONS), "--dataset", str(DATASET)],
    ["evaluate", "--base", "fake", "--mechanism", "none", "--dataset", str(DATASET), "--split", "all"],
    ["compare", "reviewer@v1", "reviewer@v2", "--base", "fake", "--reviewer", "fake"],
    ["tune", "--space", str(Path(__file__).parents[1] / "experiments" / "spaces" / "offline-bfcl.toml")],
])
def test_json_dash_is_refused_before_any_work(command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``--json -`` used to write a file named '-' into the current folder after the whole run."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--json", "-"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: --json -: the tables go to stdout; give a file path for the JSON\n"
    assert not any(tmp_path.iterdir())


def test_evaluate_json_in_a_missing_folder_is_written_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to fail with a FileNotFoundError traceback after the run had finished."""
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "new" / "folder" / "summary.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--base", "fake", "--mechanism", "none", "--dataset", str(DATASET), "--split", "all",
              "--limit", "1", "--runs-dir", str(tmp_path / "runs"), "--json", str(out)])
    assert exit_info.value.code == 0
    assert json.loads(out.read_text())["n_examples"] == 1
    assert [p.name for p in out.parent.iterdir()] == ["summary.json"]  # no temp file left beside it


def test_report_and_prompt_export_write_to_stdout_for_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--out -`` used to write a file named '-' into the current folder."""
    monkeypatch.chdir(tmp_path)
    scores = tmp_path / "scores.jsonl"
    runner.invoke(app, ["score", str(PREDICTIONS), "--dataset", str(DATASET), "--json", str(scores)])
    before = set(tmp_path.iterdir())
    result = runner.invoke(app, ["report", str(scores), "--out", "-"])
    assert result.exit_code == 0 and result.output.lstrip().lower().startswith("<!doctype html>")
    dashed = runner.invoke(app, ["prompts", "export", "reviewer@v2", "--format", "txt", "--out", "-"])
    plain = runner.invoke(app, ["prompts", "export", "reviewer@v2", "--format", "txt"])
    assert dashed.exit_code == plain.exit_code == 0 and dashed.output == plain.output and plain.output.strip()
    assert set(tmp_path.iterdir()) == before


@pytest.mark.parametrize(("argv", "message"), [
    (["evaluate", "--bse", "x"], r"error: No such option: --bse \(Possible options: --base, .*\) "
                                 r"\(see saag-opt evaluate --help\)"),
    (["evaluate", "--base", "fake", "--workers", "0"], r"error: Invalid value for '--workers': .*"),
    (["score"], r"error: Missing argument 'predictions'\. \(see saag-opt score --help\)"),
])
def test_a_bad_option_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """click used to print a usage line, a hint and a boxed panel for these."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.fullmatch(message, err.strip()), err


def test_an_option_left_out_means_what_the_config_leaves_out() -> None:
    """``cli.common.DEFAULT_*`` are the commands' defaults; where the config has the field, they agree.

    Deliberate differences: evaluate and compare pick a base model (the set-up requires one), the
    CLI reports on test (the config's None is every split) and leaves the grounding to the set-up.
    """
    from saag_opt.evaluate.config import EvaluateConfig  # noqa: PLC0415 - heavy; this test only
    from saag_opt.optimize.config import OptimizeConfig  # noqa: PLC0415 - heavy; this test only

    command = typer.main.get_command(app)
    checked = 0
    for name, config in (("evaluate", EvaluateConfig), ("compare", EvaluateConfig), ("optimize", OptimizeConfig)):
        fields = config.option_fields()
        deliberate = {"grounding"} | ({"base", "split"} if name != "optimize" else set())
        for param in command.commands[name].params:
            if param.name in fields and param.name not in deliberate:
                expected = config.SETUP_DEFAULTS.get(param.name, fields[param.name].default)
                assert param.default == expected, (name, param.name)
                checked += 1
    assert checked > 40


@pytest.mark.parametrize(("extra", "warned"), [(["--batch", "--workers", "3"], True), (["--batch"], False),
                                               (["--workers", "3"], False)])
def test_workers_under_batch_is_one_warning_line(extra: list[str], warned: bool, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """--batch keeps every example in flight, so a typed --workers would do nothing: it says so, once."""
    for command in (["evaluate"], ["compare", "reviewer@v1", "reviewer@v2"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--base", "gpt-4o", "--reviewer", "gpt-5-mini", "--mechanism", "r1", "--limit", "2",
                  "--dry-run", *extra, "--runs-dir", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 0, err
        line = ("warning: --workers has no effect under --batch: every example is in flight at once (up to 512), "
                "each waiting on its batch\n")
        assert err == (line if warned else ""), command
