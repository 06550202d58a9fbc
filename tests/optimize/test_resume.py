"""Kill a real ``saag-opt optimize`` process with SIGKILL mid-run, resume it, and check the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from saag_opt.artifacts.store import PromptStore
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "saag_opt.cli", "optimize", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"optimize exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


def test_sigkill_then_resume_completes_without_duplicate_versions(tmp_path: Path) -> None:
    dataset, prompts = world.write_world(tmp_path)
    env = dict(os.environ, SAAG_OPT_PROMPTS=prompts, SAAG_OPT_CACHE=str(tmp_path / "cache"),
               DSPY_CACHEDIR=str(tmp_path / "cache" / "dspy"), LITELLM_LOCAL_MODEL_COST_MAP="True")
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(world.handler, latency=0.03) as server:
        spec = f"fake@{server.url}"
        first = _cli(["--base", spec, "--reviewer", spec, "--dataset", dataset, "--mechanism", "r1",
                      "--max-metric-calls", "40", "--workers", "2", "--runs-dir", str(runs), "--no-test"], env)
        try:
            _wait_for(runs, first)
            while not any(runs.iterdir()):  # runs/ is made a moment before the run directory inside it
                time.sleep(0.02)
            _wait_for(next(runs.iterdir()) / "artifacts.json", first)  # a candidate was accepted and saved
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        run_dir = next(runs.iterdir())
        assert json.loads((run_dir / "run.json").read_text())["status"] == "started"  # died mid-run
        second = subprocess.run([sys.executable, "-m", "saag_opt.cli", "optimize", "--resume", str(run_dir)],
                                env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    header = json.loads((run_dir / "run.json").read_text())
    assert header["status"] == "success"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metric_calls"] >= 40 and summary["best_version"] == "v3-gepa"
    store = PromptStore(prompts)
    gepa_versions = [v.version for v in store.list("reviewer") if v.source == "gepa"]
    assert gepa_versions == ["v3-gepa"]  # the re-accepted candidate was not saved twice
    assert store.aliases("reviewer")["reviewer"]["best"] == "v3-gepa"


def test_a_run_recorded_before_the_proposer_option_resumes_as_the_rewrite_run_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from saag_opt.optimize import OptimizeConfig, run_optimize  # noqa: PLC0415
    from saag_opt.runfiles import read_header  # noqa: PLC0415

    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    with ScriptedOpenAIServer(world.handler) as server:
        first = run_optimize(world.config(tmp_path, server, proposer="rewrite", max_metric_calls=14,
                                          evaluate_test=False))
        header = json.loads((first.run_dir / "run.json").read_text())
        del header["config"]["proposer"]  # what such a run recorded
        (first.run_dir / "run.json").write_text(json.dumps(header))
        run_optimize(OptimizeConfig(resume=str(first.run_dir), max_metric_calls=24), overrides={"max_metric_calls"})
    assert read_header(first.run_dir).config["proposer"] == "rewrite"
