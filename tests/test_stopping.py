"""SIGTERM/Ctrl-C stop a run within seconds, keep whole examples, mark it interrupted, and a rerun resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from saag_opt import stopping
from saag_opt.data import load_dataset
from saag_opt.evaluation.results import read_run
from saag_opt.lm.retry import with_retries
from saag_opt.model import Example
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.evaluate.scripted_replies import chat, right
from tests.optimize import optimize_world as opt_world

REPO = Path(__file__).resolve().parents[1]
DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 12


@pytest.fixture(autouse=True)
def _fresh_stop_state() -> Iterator[None]:
    stopping.reset()
    yield
    stopping.reset()


def test_signal_raises_run_interrupted_in_the_main_thread_and_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(stopping.RunInterrupted) as info, stopping.stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this wait
    assert info.value.signal_name == "SIGTERM" and info.value.exit_code == 143
    assert isinstance(info.value, KeyboardInterrupt) and stopping.requested()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_deferred_section_is_finished_before_the_stop_is_raised() -> None:
    done = []
    with pytest.raises(stopping.RunInterrupted), stopping.stop_on_signals():
        with stopping.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler ran here, and did not raise
            done.append("second record")
        done.append("after the section")
    assert done == ["second record"]


def test_thread_pool_cancels_queued_work_and_does_not_wait_for_running_work() -> None:
    release, started = threading.Event(), []

    def job(i: int) -> int:
        started.append(i)
        release.wait(10)
        return i

    began = time.monotonic()
    with pytest.raises(stopping.RunInterrupted):
        with stopping.thread_pool(1) as pool:
            futures = [pool.submit(job, i) for i in range(5)]
            while not started:
                time.sleep(0.01)
            raise stopping.RunInterrupted(signal.SIGINT)
    assert time.monotonic() - began < 2, "waited for the running job"
    assert started == [0] and all(f.cancelled() for f in futures[1:])
    release.set()


def test_retries_stop_once_a_stop_is_requested() -> None:
    calls = []

    def failing() -> None:
        calls.append(1)
        stopping.request_stop()
        raise TimeoutError("transient")

    began = time.monotonic()
    with pytest.raises(TimeoutError):
        with_retries(failing, attempts=5, base_delay=5.0, retry_on=(TimeoutError,))
    assert calls == [1] and time.monotonic() - began < 1


# ------------------------------------------------------------------ a real evaluate process


class _World:
    """Base agent always right, reviewer always approves; each reply takes ``latency`` seconds."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def example_in(self, request: dict) -> Example:
        text = "\n".join(str(m.get("content")) for m in request["messages"])
        return max((ex for ex in self.examples if ex.query and ex.query in text), key=lambda ex: len(ex.query))

    def __call__(self, request: dict) -> Reply:
        if "tools" in request:
            return right(self.example_in(request))
        return chat({"error": "False", "feedback": ""})


def _evaluate_cmd(url: str, runs: Path) -> list[str]:
    return [sys.executable, "-m", "saag_opt.cli", "evaluate", "--base", f"fake@{url}", "--reviewer", f"fake@{url}",
            "--prompt", "reviewer@v1", "--mechanism", "r1", "--dataset", DATASET, "--split", SPLIT,
            "--limit", str(LIMIT), "--workers", "2", "--runs-dir", str(runs)]


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), SAAG_OPT_CACHE=str(tmp_path / "cache"),
                DSPY_CACHEDIR=str(tmp_path / "cache" / "dspy"),
                SAAG_OPT_PROMPTS=str(REPO / "prompts"), OPENAI_API_KEY="sk-test", LITELLM_LOCAL_MODEL_COST_MAP="True")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _sigterm_when(cmd: list[str], env: dict[str, str], cwd: Path, ready: Callable[[], bool],
                  what: str) -> tuple[int, str, float]:
    """Run ``cmd``, send SIGTERM once ``ready()`` holds: (exit code, stderr, seconds from signal to exit)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{what} in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.integration
def test_sigterm_stops_evaluate_within_seconds_and_resume_finishes_the_same_run(tmp_path: Path) -> None:
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    world = _World(examples)
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(world, latency=0.4) as server:
        code, err, took = _sigterm_when(
            _evaluate_cmd(server.url, runs), _env(tmp_path), tmp_path,
            lambda: runs.exists() and len(_lines(next(runs.iterdir()) / "records.jsonl")) >= 4,
            "no example finished")
        assert code == 143, err
        assert took < 5, f"took {took:.1f} s to stop"
        assert "Traceback" not in err
        (run_dir,) = runs.iterdir()
        assert f"is marked interrupted; continue it with: saag-opt evaluate --resume {run_dir}" in err
        run = read_run(run_dir)
        assert run.header.status == "interrupted" and "SIGTERM" in run.header.error.message
        finished = {r.example_id for r in run.records}
        conditions = {(r.example_id, r.condition) for r in run.records}
        assert 2 <= len(finished) < LIMIT, "the stop came too late to test anything"
        assert conditions == {(i, c) for i in finished for c in ("base", "r1")}, "a half-written example"
        assert run.summary is None

        # Resume with empty caches: a finished example asked again would reach the server.
        server.reset(world)
        rerun = subprocess.run([sys.executable, "-m", "saag_opt.cli", "evaluate", "--resume", str(run_dir)],
                               env=_env(tmp_path / "fresh"), cwd=tmp_path, capture_output=True, text=True,
                               timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        asked = [world.example_in(r.body).id for r in server.chat_requests]
    assert not set(asked) & finished, "the resume repeated LM calls of finished examples"
    assert len(asked) == 2 * (LIMIT - len(finished)), "one base call and one review per unfinished example"
    assert list(runs.iterdir()) == [run_dir], "a resume must not start a new run directory"
    run = read_run(run_dir)
    assert run.header.status == "success" and run.header.error is None
    rows = sorted((r.example_id, r.condition) for r in run.records)
    assert rows == sorted((e.id, c) for e in examples for c in ("base", "r1")), "each example exactly once"
    assert run.summary is not None and run.summary.n_examples == LIMIT
    assert (run_dir / "report.html").is_file()


@pytest.mark.integration
def test_sigterm_stops_optimize_within_seconds_and_resume_finishes_it(tmp_path: Path) -> None:
    dataset, prompts = opt_world.write_world(tmp_path)
    env = dict(_env(tmp_path), SAAG_OPT_PROMPTS=prompts, DSPY_CACHEDIR=str(tmp_path / "cache" / "dspy"))
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(opt_world.handler, latency=0.1) as server:
        spec = f"fake@{server.url}"
        cmd = [sys.executable, "-m", "saag_opt.cli", "optimize", "--base", spec, "--reviewer", spec, "--dataset", dataset,
               "--mechanism", "r1", "--max-metric-calls", "40", "--workers", "2", "--runs-dir", str(runs), "--no-test"]
        code, err, took = _sigterm_when(cmd, env, tmp_path, lambda: len(server.chat_requests) >= 10,  # inside GEPA
                                        "optimize made no progress")
        assert code == 143 and took < 5, (took, err[-2000:])
        (run_dir,) = runs.iterdir()
        header = json.loads((run_dir / "run.json").read_text())
        assert header["status"] == "interrupted" and "SIGTERM" in header["error"]["message"]
        resumed = subprocess.run([sys.executable, "-m", "saag_opt.cli", "optimize", "--resume", str(run_dir)],
                                 env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "success"
