"""A server that hangs or fails at the command line: --request-timeout, and runs where every example failed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.main import get_command

import saag_opt.lm.retry
from saag_opt.cli import app, main
from saag_opt.optimize import OptimizeConfig
from saag_opt.optimize.world import build_world
from saag_opt.testing import Fault, ScriptedOpenAIServer
from saag_opt.testing.scripted_server import echo_handler

DATASET = Path(__file__).parents[1] / "fixtures" / "predictions" / "dataset.jsonl"
HANGS_ON = "triangle"  # simple_python_0; --limit 2 also takes multiple_0, which the server answers


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
    monkeypatch.setattr(saag_opt.lm.retry, "backoff_delay", lambda *_, **__: 0.01)  # the retries, not their waits


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0)


def _hangs(request: dict) -> object:
    text = json.dumps(request.get("messages"))
    return Fault("timeout", delay=5.0) if HANGS_ON in text else echo_handler(request)


def test_request_timeout_turns_a_hanging_server_into_retries_then_an_example_error(tmp_path: Path) -> None:
    """Without the option each hanging call waited the client's 600 s, five times over."""
    with ScriptedOpenAIServer(_hangs) as server:
        started = time.monotonic()
        code = _run(["evaluate", "--base", f"fake@{server.url}", "--mechanism", "none", "--dataset", str(DATASET),
                     "--split", "all", "--limit", "2", "--request-timeout", "0.5", "--runs-dir", str(tmp_path / "runs")])
        seconds = time.monotonic() - started
        hung = [r for r in server.chat_requests if HANGS_ON in json.dumps(r.body)]
    assert code == 0
    assert len(hung) == 5, "one attempt and the 4 retries, each cut off at 0.5 s"
    assert seconds < 20, f"took {seconds:.1f} s"
    run_dir = next((tmp_path / "runs").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["config"]["request_timeout"] == 0.5
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    errors = {r["example_id"]: r["error"] for r in rows if r["condition"] == "base"}
    assert errors["multiple_0"] is None
    assert errors["simple_python_0"] and "after 5 attempt(s)" in errors["simple_python_0"]


@pytest.mark.parametrize("command", ["evaluate", "compare", "optimize"])
def test_request_timeout_is_an_option_of_every_command_that_calls_models(command: str) -> None:
    option = next(p for p in get_command(app).commands[command].params if p.name == "request_timeout")
    assert option.opts == ["--request-timeout"] and option.default is None


def test_optimize_request_timeout_reaches_every_role(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    with ScriptedOpenAIServer() as server:
        config = OptimizeConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                request_timeout=0.5, runs_dir=str(tmp_path / "runs"))
        world = build_world(config)
    roles = (world.condition.agent.lm, world.condition.reviewer_lm, world.reflection_lm)
    assert [lm.kwargs.get("timeout") for lm in roles] == [0.5] * 3


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [
    ["evaluate", "--mechanism", "none"],
    ["compare", "reviewer@v1", "reviewer@v2", "--mechanism", "r1"],
])
def test_a_run_where_every_example_failed_is_a_failed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """A server answering every call with a 5xx used to end with every example an error, the tables and exit 0."""
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(lambda _: Fault(503, message="overloaded")) as server:
        code = _run([*command, "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--dataset",
                     str(DATASET), "--split", "all", "--limit", "2", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr()
    assert code == 1
    line = err.err.strip()
    assert "\n" not in line and "Traceback" not in err.err and "Accuracy" not in err.out
    assert line.startswith("error: all 2 examples failed, the first with: LMCallError: ") and "overloaded" in line
    run_dir = next((tmp_path / "runs").iterdir())
    header = json.loads((run_dir / "run.json").read_text())
    assert header["status"] == "error" and "all 2 examples failed" in header["error"]["message"]
    assert header["error"]["traceback"] is None


def test_a_run_with_some_errors_still_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def fails_one(request: dict) -> object:
        return Fault(503) if HANGS_ON in json.dumps(request.get("messages")) else echo_handler(request)

    with ScriptedOpenAIServer(fails_one) as server:
        code = _run(["evaluate", "--base", f"fake@{server.url}", "--mechanism", "none", "--dataset", str(DATASET),
                     "--split", "all", "--limit", "2", "--runs-dir", str(tmp_path / "runs")])
    assert code == 0 and "Accuracy" in capsys.readouterr().out
    run_dir = next((tmp_path / "runs").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "success"
