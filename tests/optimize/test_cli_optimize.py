"""``saag-opt optimize`` command: flags, the final table, user errors as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saag_opt.cli import main
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world


def test_missing_key_is_one_line_pointing_to_local(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    dataset, prompts = world.write_world(tmp_path)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", prompts)
    with pytest.raises(SystemExit) as exit_info:
        main(["optimize", "--dataset", dataset, "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "error: OPENAI_API_KEY is not set: export it, or run offline with --base local --reviewer local"


def test_budget_and_max_metric_calls_are_exclusive(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["optimize", "--budget", "light", "--max-metric-calls", "50", "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    assert "give either budget or max_metric_calls, not both" in capsys.readouterr().err


@pytest.mark.parametrize("mechanism", ["binary", "saag"])
def test_mechanism_without_reviewer_is_one_line_exit_2(tmp_path: Path, capsys, mechanism: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["optimize", "--mechanism", mechanism, "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: mechanism: '{mechanism}' never calls the LLM reviewer")
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_run_prints_the_seed_vs_best_table(tmp_path: Path, monkeypatch, capsys) -> None:
    dataset, prompts = world.write_world(tmp_path)
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps narrower tables
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        with pytest.raises(SystemExit) as exit_info:
            main(["optimize", "--base", spec, "--reviewer", spec, "--dataset", dataset, "--mechanism", "r1",
                  "--max-metric-calls", "30", "--workers", "2", "--runs-dir", str(tmp_path / "runs"),
                  "--minibatch", "2", "--seed", "3", "--proposer", "edit", "--store", prompts,
                  "--json", str(tmp_path / "summary.json")])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr()
    assert "TEST accuracy %: base vs seed vs best" in out.out and "best (v3-gepa)" in out.out and "seed (v2)" in out.out
    assert "TEST: help / harm" in out.out
    assert "estimate" in out.err and "LM calls" in out.err
    assert (tmp_path / "summary.json").is_file()
    run = next((tmp_path / "runs").glob("*-optimize"))
    config = json.loads((run / "run.json").read_text())["config"]
    assert (config["minibatch"], config["seed"], config["proposer"]) == (2, 3, "edit")  # the flags reach the record
    assert (Path(prompts) / "reviewer" / "v3-gepa.json").is_file()  # --store received the new version
