"""tune through the real evaluate runner against the scripted OpenAI-compatible server: shared base
answers, trials on val and the Pareto set on test, the CLI, local worker processes, and a journal
study that survives a worker killed with SIGKILL."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import jsonlines
import pytest
from typer.testing import CliRunner

from saag_opt.cli import app, main
from saag_opt.data import load_dataset
from saag_opt.evaluation.results import read_run
from saag_opt.testing import Reply, ScriptedOpenAIServer, ScriptedWorld, read_request
from saag_opt.testing.scripted_world import BaseRequest, ReviewRequest
from saag_opt.tune import TuneConfig, run_tune
from saag_opt.tune.storage import open_storage, parse_storage
from tests.evaluate.scripted_replies import right, wrong
from tests.tune.kill_workers import (
    assert_each_configuration_completed_once,
    run_and_kill_one,
    write_space,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


class World(ScriptedWorld):
    """The base agent answers in text (wrong) when an example's number is even and a call is expected;
    the reviewer flags a text answer, and the revision after feedback is right."""

    def __init__(self) -> None:
        super().__init__()
        self.examples = load_dataset("shipped:bfcl")

    def base(self, request: BaseRequest) -> Reply:
        hits = [ex for ex in self.examples if ex.query and ex.query in request.text]
        example = max(hits, key=lambda ex: len(ex.query))
        base_wrong = int(example.id.rsplit("_", 1)[-1]) % 2 == 0 and example.expect != "no_call"
        return wrong(example) if base_wrong and not request.revising else right(example)

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        return "cannot help" in request.tentative_calls, "Call the right function."


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(World()) as srv:
        yield srv


def _space(tmp_path: Path, server: ScriptedOpenAIServer) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(f'[fixed]\nbase = "fake@{server.url}"\nreviewer = "fake@{server.url}"\n'
                    'dataset = "shipped:bfcl"\nlimit = 6\nretry_base_delay = 0.01\n'
                    '[search]\nmechanism = ["r1", "gate+r1"]\nprompt = ["reviewer@v1", "reviewer@v2"]\n'
                    '[constraints]\nreviewer_calls_per_item = 2.0\n', encoding="utf-8")
    return path


def _base_requests(server: ScriptedOpenAIServer) -> int:
    """First proposals of the base agent (not revisions) the server was asked for."""
    return sum(isinstance(r, BaseRequest) and not r.revising for r in map(read_request, _bodies(server)))


def _bodies(server: ScriptedOpenAIServer) -> list[dict]:
    return [r.body or {} for r in server.chat_requests]


def test_trials_share_base_answers_run_on_val_and_the_front_is_re_evaluated_on_test(
        tmp_path: Path, server: ScriptedOpenAIServer) -> None:
    outcome = run_tune(TuneConfig(space=_space(tmp_path, server), sampler="grid", runs_dir=tmp_path / "runs",
                                  test_limit=4))
    n_val, n_test = len(load_dataset("shipped:bfcl", split="val", limit=6)), 4
    assert _base_requests(server) == n_val + n_test  # each example's base answer was asked for once
    with jsonlines.open(outcome.run_dir / "trials.jsonl") as reader:
        rows = list(reader)
    assert len(rows) == 4 and all(r["state"] == "COMPLETE" and r["feasible"] for r in rows)
    assert all(r["values"]["help"] > 0 and r["values"]["harm"] == 0 for r in rows)
    for row in rows:
        run = read_run(row["run_dir"])
        assert Path(row["run_dir"]).parent == outcome.run_dir / "trials"
        assert {r.split for r in run.records} == {"val"} and run.header.config["mechanism"] == row["params"]["mechanism"]
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["pareto"] and len(summary["test"]) == len(summary["pareto"])
    for test in summary["test"]:
        run = read_run(test["run_dir"])
        assert {r.split for r in run.records} == {"test"} and test["summary"]["n_examples"] == n_test
        assert set(test["summary"]["base"]["categories"]) and "mcnemar_p" in test["summary"]["help_harm"]
        assert Path(test["run_dir"]).parent == outcome.run_dir / "test"


def test_cli_prints_trials_and_the_front_and_writes_json(tmp_path: Path, server: ScriptedOpenAIServer) -> None:
    out = tmp_path / "tune.json"
    result = CliRunner().invoke(app, ["tune", "--space", str(_space(tmp_path, server)), "--trials", "5",
                                      "--runs-dir", str(tmp_path / "runs"), "--limit", "3", "--json", str(out)],
                                env=WIDE)
    assert result.exit_code == 0, result.output
    assert "Trials (5)" in result.output and "Pareto front re-evaluated on TEST" in result.output
    assert "TEST accuracy per category" in result.output and "repeats answered from stored results" in result.output
    summary = json.loads(out.read_text())
    assert summary["states"]["COMPLETE"] == 5 and summary["space"]["fixed"]["limit"] == 3


def test_cli_bad_space_is_one_line_and_exit_2(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text('[fixed]\nbase = "gpt-4o"\n[search]\nmechanism = ["r1", "r-two"]\nreviewer = ["gpt-5-mini"]\n')
    with pytest.raises(SystemExit) as info:
        main(["tune", "--space", str(space), "--runs-dir", str(tmp_path / "runs")])
    assert info.value.code == 2
    assert not (tmp_path / "runs").exists()  # nothing written for a bad space


def test_cli_bad_space_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.toml"
    space.write_text('[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\n[search]\nmechanism = ["r1"]\n'
                     '[objectives]\nhelpfulness = "maximize"\n')
    with pytest.raises(SystemExit):
        main(["tune", "--space", str(space)])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {space}: objectives.helpfulness: unknown metric")


def test_local_worker_processes_share_one_journal_study(tmp_path: Path, server: ScriptedOpenAIServer) -> None:
    outcome = run_tune(TuneConfig(space=_space(tmp_path, server), sampler="grid", workers=2, no_test=True,
                                  runs_dir=tmp_path / "runs"))
    n_val = len(load_dataset("shipped:bfcl", split="val", limit=6))
    assert _base_requests(server) == n_val  # asked once by the parent before the workers started
    assert (outcome.run_dir / "study.journal").is_file() and outcome.role == "coordinator"
    rows = outcome.rows
    assert all(r.state == "COMPLETE" for r in rows)
    evaluated = [json.dumps(r.params, sort_keys=True) for r in rows if r.duplicate_of is None]
    assert len(evaluated) == len(set(evaluated)) == 4  # a worker racing to the last point waits and repeats it
    workers = {r.worker for r in rows}
    assert all(not w.startswith(f"{os.getpid()}@") for w in workers)  # the workers ran them, not the parent
    assert sorted(p.name for p in (outcome.run_dir / "workers").iterdir()) == ["worker-0.log", "worker-1.log"]
    assert len(list((outcome.run_dir / "base").iterdir())) == 1  # the warm-up: one mechanism=none run


def test_journal_study_survives_a_worker_killed_mid_trial(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(World(), latency=0.3) as slow:
        path = tmp_path / "study.journal"
        report = run_and_kill_one(write_space(tmp_path / "space.toml", slow.url), f"journal:{path}", "kill-test",
                                  tmp_path / "runs", lambda: open_storage(parse_storage(f"journal:{path}")))
    assert_each_configuration_completed_once(report)
