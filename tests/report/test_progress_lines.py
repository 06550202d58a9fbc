"""Progress where nobody watches a terminal: evaluate and compare print one short line per event on
stdout when it is not a terminal (``saag-opt evaluate ... > log``); on a terminal the bar alone shows
it, and stderr keeps only what went wrong."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from saag_opt.evaluation.conversation_records import VERB as MULTI_TURN_VERB
from saag_opt.events import RunEvent
from saag_opt.report.format import resume_command
from saag_opt.report.live import EvaluationLines, with_lines
from saag_opt.testing import ScriptedOpenAIServer
from tests.tune.test_tune_runner import World

REPO = Path(__file__).resolve().parents[2]
LIMIT = 4


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), SAAG_OPT_CACHE=str(tmp_path / "cache"),
                DSPY_CACHEDIR=str(tmp_path / "cache" / "dspy"), SAAG_OPT_PROMPTS=str(REPO / "prompts"),
                COLUMNS="200", LITELLM_LOCAL_MODEL_COST_MAP="True")


@pytest.mark.integration
@pytest.mark.parametrize("verb", ["evaluate", "compare"])
def test_a_piped_run_prints_a_line_per_example_with_count_errors_and_spend(tmp_path: Path, verb: str) -> None:
    with ScriptedOpenAIServer(World()) as server:
        models = ["--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}"]
        what = ["reviewer@v1", "reviewer@v2"] if verb == "compare" else ["--prompt", "reviewer@v1"]
        proc = subprocess.run([sys.executable, "-m", "saag_opt.cli", verb, *what, *models, "--mechanism", "r1",
                               "--dataset", "shipped:bfcl", "--limit", str(LIMIT), "--workers", "1",
                               "--runs-dir", str(tmp_path / "runs")],
                              env=_env(tmp_path), cwd=tmp_path, capture_output=True,  # both pipes
                              text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    passes = ["evaluate"] if verb == "evaluate" else ["compare base", "compare A", "compare B"]
    for label in passes:
        pattern = re.compile(rf"{label} (\d+)/{LIMIT} done, 0 errors, \$0\.0000 \(\S+\)")
        done = [int(m.group(1)) for m in map(pattern.fullmatch, lines) if m]
        assert done == list(range(1, LIMIT + 1)), proc.stderr
        assert any(line.startswith(f"{label} 0/{LIMIT} examples: ") for line in lines)
    if verb == "compare":
        assert "compare: evaluating A = v1" in lines and "compare: evaluating the base agent alone" in lines
    assert all(len(line) < 160 for line in lines)
    assert " done, " not in proc.stderr  # stderr keeps errors only


def test_lines_count_errors_and_add_the_roles_spend() -> None:
    out = io.StringIO()
    seen: list[RunEvent] = []
    lines = EvaluationLines(seen.append, Console(file=out, width=200), "evaluate")
    costs = {"roles": {"base": {"dollars": 0.01}, "reviewer": {"dollars": 0.0025}, "total": {"dollars": 0.0125}}}
    lines(RunEvent("run_started", "run directory r", {"run_dir": "r", "total": 2, "done": 0}))
    lines(RunEvent("example_finished", "1/2 a", {"done": 1, "total": 2, "example_id": "a", "error": "boom",
                                                 "costs": costs}))
    lines(RunEvent("run_finished", "done: r", {"run_dir": "r"}))
    assert out.getvalue().splitlines() == ["evaluate 0/2 examples: r", "evaluate 1/2 done, 1 error, $0.0125 (a)"]
    assert [e.kind for e in seen] == ["run_started", "example_finished", "run_finished"]  # the bar still gets all


def test_on_a_terminal_the_bar_alone_shows_progress() -> None:
    def sink(event: RunEvent) -> None:
        return None

    def console(terminal: bool) -> Console:
        return Console(file=io.StringIO(), force_terminal=terminal)

    assert with_lines(sink, console(True), out=console(True)) is sink
    for bar, out in ((True, False), (False, True), (False, False)):  # a log, or no bar: lines on stdout
        assert isinstance(with_lines(sink, console(bar), out=console(out)), EvaluationLines)


def test_a_multi_turn_run_is_resumed_with_the_evaluate_command() -> None:
    assert resume_command("runs/x", verb=MULTI_TURN_VERB) == "saag-opt evaluate --resume runs/x"
    assert resume_command("runs/y", verb="tune") == "saag-opt tune --space SPACE.toml --resume runs/y"
