"""A server that hangs or fails at the command line: --request-timeout, and runs where every example failed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import saag_opt.lm.retry
from saag_opt.cli import main
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
    from typer.main import get_command

    from saag_opt.cli import app

    option = next(p for p in get_command(app).commands[command].params if p.name == "request_timeout")
    assert option.opts == ["--request-timeout"] and option.default is None


def test_optimize_request_timeout_reaches_every_role(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from saag_opt.optimize import OptimizeConfig
    from saag_opt.optimize.world import build_world

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    with ScriptedOpenAIServer() as server:
        config = OptimizeConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                request_timeout=0.5, runs_dir=str(tmp_path / "runs"))
        world = build_world(config)
    assert [lm.kwargs.get("timeout") for lm in (world.agent.lm, world.reviewer_lm, world.reflection_lm)] == [0.5] * 3
