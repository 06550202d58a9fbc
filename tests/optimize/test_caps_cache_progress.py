"""optimize on the scripted server with priced models: --max-cost is never passed (test phase
included, summed over resumes), re-runs and resumes buy nothing twice, and progress is live."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dspy.utils import parallelizer
from gepa.core import engine
from rich.console import Console

from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.optimize.bars import library_bars_off
from saag_opt.report.optimize_tables import OptimizeProgress
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration
PRICE = ModelPrice(input=2.5e-6, output=1e-5, cached_input=1.25e-6, max_output_tokens=400)
"""gpt-4o's rates for the scripted model (reflection replies are capped by reflection_max_tokens)."""
FULL_RUN_DOLLARS = 0.0483
"""What the uncapped run below spends at PRICE (GEPA $0.034 + test $0.014), measured."""


@pytest.fixture()
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(world.handler) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))  # a private LM cache: counts are exact
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)


def _config(tmp_path: Path, server: ScriptedOpenAIServer, **extra: object) -> OptimizeConfig:
    return world.config(tmp_path, server, **({"reflection_max_tokens": 1000} | extra))


def _bodies(server: ScriptedOpenAIServer) -> list[str]:
    return [json.dumps(r.body, sort_keys=True) for r in server.chat_requests]


def _spent(run_dir: Path) -> float:
    return json.loads((run_dir / "costs.json").read_text())["roles"]["total"]["dollars"]


@pytest.mark.parametrize(("cap", "where"), [(0.02, "gepa"), (0.045, "test")])
def test_max_cost_is_never_passed_gepa_and_test_phase_included(tmp_path: Path, server, cap: float,
                                                                where: str) -> None:
    events = []
    result = run_optimize(_config(tmp_path, server, max_cost=cap), on_event=events.append)
    assert result.status == "stopped" and _spent(result.run_dir) <= cap  # zero overshoot
    assert result.costs["roles"]["total"]["dollars"] == _spent(result.run_dir)
    stops = [e.message for e in events if e.kind == "stopped"]
    assert stops and f"--max-cost ${cap:g} reached" in stops[0]
    header = json.loads((result.run_dir / "run.json").read_text())
    assert header["status"] == "stopped"
    if where == "gepa":
        assert result.stopped_by == "max_cost" and result.test is None and result.metric_calls < 40
    else:  # GEPA finished; the test phase ran into the cap and says so
        assert result.metric_calls >= 40 and "--max-cost" in result.test.stopped
        comparison = result.test.comparison
        assert comparison is None or comparison.matched < 4


def test_a_resumed_capped_run_counts_earlier_spend_and_repeats_no_request(tmp_path: Path, server) -> None:
    first = run_optimize(_config(tmp_path, server, max_cost=0.02))
    before, spent_before = set(_bodies(server)), _spent(first.run_dir)
    server.reset()
    more = OptimizeConfig(resume=str(first.run_dir), max_cost=1.0, base="gpt-4o-mini")
    second = run_optimize(more, overrides={"max_cost"})
    assert second.status == "success" and second.test is not None and second.best_version == "v3-gepa"
    assert not before & set(_bodies(server))  # nothing finished before the stop was bought again
    assert _spent(second.run_dir) >= spent_before + 0.01  # costs.json adds up both attempts
    assert _spent(second.run_dir) <= 1.0


def test_an_identical_optimize_rerun_makes_zero_requests(tmp_path: Path, server) -> None:
    first = run_optimize(_config(tmp_path, server))
    made = len(server.chat_requests)
    again = run_optimize(_config(tmp_path, server))
    assert made > 20 and len(server.chat_requests) == made  # zero new requests, test phase included
    assert again.run_dir != first.run_dir and again.val_scores == first.val_scores
    accuracy = [r.test.comparison.b.accuracy.accuracy for r in (first, again)]
    assert accuracy == [1.0, 1.0]


def test_progress_events_report_rollouts_accepted_best_val_and_spend(tmp_path: Path, server) -> None:
    events = []
    run_optimize(_config(tmp_path, server, evaluate_test=False), on_event=events.append)
    progress = [e.data for e in events if e.kind == "progress"]
    assert progress and all(p["budget"] == 40 for p in progress)
    rollouts = [p["rollouts"] for p in progress]
    assert rollouts == sorted(rollouts) and rollouts[-1] >= 40
    assert progress[-1]["accepted"] == 1 and progress[-1]["best_val"] == 1.0
    spend = [p["spent"] for p in progress]
    assert spend == sorted(spend) and 0 < spend[-1] <= FULL_RUN_DOLLARS


def test_the_cli_bar_shows_the_progress_events_and_silences_gepas_own_bar(tmp_path: Path, server) -> None:
    original = engine.tqdm
    out = io.StringIO()
    bar = OptimizeProgress(Console(file=out, force_terminal=True, width=160))
    with bar:
        assert engine.tqdm is not original  # one bar on screen, not two
        run_optimize(_config(tmp_path, server, evaluate_test=False), on_event=bar)
        task = bar.progress.tasks[0]
        assert (task.completed, task.total) == (40, 40)
        assert "accepted 1" in task.fields["status"] and "best val 1.000" in task.fields["status"]
    assert engine.tqdm is original
    assert "optimize:" in out.getvalue() and "GEPA finished" in out.getvalue()  # other events print as lines


def test_a_redirected_optimize_log_has_our_lines_and_no_library_bar_redraws(tmp_path: Path, server) -> None:
    dataset, prompts = world.write_world(tmp_path)
    spec = f"fake@{server.url}"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), SAAG_OPT_PROMPTS=prompts)
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:  # not terminals
        done = subprocess.run([sys.executable, "-m", "saag_opt.cli", "optimize", "--base", spec, "--reviewer", spec,
                               "--dataset", dataset, "--mechanism", "r1", "--max-metric-calls", "30", "--workers", "2",
                               "--runs-dir", str(tmp_path / "runs"), "--test-limit", "2"],
                              env=env, cwd=tmp_path, stdout=out, stderr=err, timeout=300)
    stdout, stderr = (tmp_path / "out.log").read_text(), (tmp_path / "err.log").read_text()
    assert done.returncode == 0, stderr[-2000:]
    for log in (stdout, stderr):
        assert "it/s]" not in log and "%|" not in log and "\r" not in log, "a tqdm bar was drawn into the log"
    assert "optimize: run directory" in stderr and "optimize: candidate 1 -> reviewer@v3-gepa" in stderr
    assert "GEPA candidates on val" in stdout


def test_library_bars_are_silenced_only_inside_the_block() -> None:
    gepa_bar, dspy_bars = engine.tqdm, parallelizer.tqdm
    with library_bars_off(gepa=True, dspy=False):  # a terminal: dspy's own bars stay as they are
        assert engine.tqdm is not gepa_bar and parallelizer.tqdm is dspy_bars
    with library_bars_off():
        bar = parallelizer.tqdm.tqdm(total=3, file=sys.stdout, disable=False)  # what dspy's executor asks for
        assert bar.disable and engine.tqdm(total=3).disable
        parallelizer.tqdm.tqdm._instances.clear()  # the class API dspy's Evaluate also uses still works
    assert (engine.tqdm, parallelizer.tqdm) == (gepa_bar, dspy_bars)
