"""Two ``saag-opt tune`` worker processes on one study, one killed with SIGKILL mid-trial.

Shared by the journal test (always runs) and the PostgreSQL test (a real server from .ci/postgres.sh).
The processes are the real CLI, as a second machine would run it; the LM is a scripted server with a
per-call latency so that a trial lasts long enough to be caught RUNNING.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from saag_opt.tune.space import canonical_params
from saag_opt.tune.storage import WORKER_ATTR
from saag_opt.tune.study import DUPLICATE_ATTR, KEY_ATTR, retry_of

REPO = Path(__file__).resolve().parents[2]
GRID = {"mechanism": ["r1", "r2", "gate+r1"], "prompt": ["reviewer@v1", "reviewer@v2"]}


def write_space(path: Path, server_url: str) -> Path:
    path.write_text(f'[fixed]\nbase = "fake@{server_url}"\nreviewer = "fake@{server_url}"\n'
                    'dataset = "shipped:bfcl"\nlimit = 2\nretry_base_delay = 0.01\n'
                    '[search]\nmechanism = ["r1", "r2", "gate+r1"]\nprompt = ["reviewer@v1", "reviewer@v2"]\n',
                    encoding="utf-8")
    return path


@dataclass
class KillReport:
    killed_trial: int
    survivor_code: int
    survivor_output: str
    trials: list[Any]


def run_and_kill_one(space: Path, storage: str, study: str, runs_dir: Path, open_storage: Any,
                     *, heartbeat: int = 2, timeout: float = 240.0, extra: Sequence[str] = (),
                     env: dict[str, str] | None = None) -> KillReport:
    """Start two CLI workers on one study, SIGKILL the second one mid-trial, wait for the first.

    ``extra``: more ``tune`` options for both; ``env``: more environment variables for both.
    """
    env = {**os.environ, "SAAG_OPT_PROMPTS": str(REPO / "prompts"), "COLUMNS": "200", **(env or {})}
    cmd = [sys.executable, "-m", "saag_opt.cli", "tune", "--space", str(space), "--storage", storage, "--study",
           study, "--sampler", "grid", "--no-test", "--heartbeat", str(heartbeat), *extra]
    procs = [subprocess.Popen([*cmd, "--runs-dir", str(runs_dir / f"w{i}")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for i in range(2)]
    survivor, victim = procs
    try:
        killed = _kill_mid_trial(victim, study, open_storage, timeout)
        output, _ = survivor.communicate(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    trials = optuna.load_study(study_name=study, storage=open_storage()).get_trials()
    return KillReport(killed, survivor.returncode, output.decode(errors="replace"), trials)


def _kill_mid_trial(victim: subprocess.Popen[bytes], study: str, open_storage: Any, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    storage = None
    while time.monotonic() < deadline:
        if victim.poll() is not None:
            raise AssertionError(f"the victim exited first ({victim.returncode}): {victim.stdout.read().decode()}")  # type: ignore[union-attr]
        try:
            storage = storage or open_storage()
            trials = optuna.load_study(study_name=study, storage=storage).get_trials(states=(TrialState.RUNNING,))
        except KeyError:  # the study is not created yet
            trials = []
        mine = [t for t in trials if t.user_attrs.get(WORKER_ATTR, "").startswith(f"{victim.pid}@")]
        if mine and KEY_ATTR in mine[0].user_attrs:  # past suggest: inside the evaluation
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            return mine[0].number
        time.sleep(0.05)
    raise AssertionError("the victim never ran a trial")


def assert_each_configuration_completed_once(report: KillReport) -> None:
    """Every grid point has exactly one evaluated (non-repeat) COMPLETE trial; the killed one was retried."""
    assert report.survivor_code == 0, report.survivor_output
    states = {t.number: t.state for t in report.trials}
    assert states[report.killed_trial] == TrialState.FAIL, report.survivor_output
    assert not [t for t in report.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    evaluated = [canonical_params(t.params) for t in report.trials
                 if t.state == TrialState.COMPLETE and DUPLICATE_ATTR not in t.user_attrs]
    grid = {canonical_params({"mechanism": m, "prompt": p}) for m in GRID["mechanism"] for p in GRID["prompt"]}
    assert sorted(evaluated) == sorted(grid), (evaluated, report.survivor_output)
    retries = [t for t in report.trials if retry_of(t) == report.killed_trial]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    killed = next(t for t in report.trials if t.number == report.killed_trial)
    assert retries[0].params == killed.params
