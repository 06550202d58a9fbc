"""experiments/exp6_multiturn.sh and exp7_tau2.sh: the runs each plans (layout, models, options), and that
they are valid saag-opt commands (planned with ``--dry-run``, which runs nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from saag_opt.data.tau2_package import missing as tau2_missing
from tests.conftest import requires
from tests.episodes.world import needs_bfcl

ROOT = Path(__file__).resolve().parents[2]
EXP6 = ROOT / "experiments" / "exp6_multiturn.sh"
EXP7 = ROOT / "experiments" / "exp7_tau2.sh"


def _run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), *args], cwd=ROOT, env={**os.environ, "COLUMNS": "200", **env},
                          capture_output=True, text=True, timeout=600, check=False)


def _plan(tmp_path: Path, script: Path, *args: str, **env: str) -> list[list[str]]:
    """The commands the script would run, one per line, from a stand-in saag-opt that prints its arguments."""
    fake = tmp_path / "saag-opt"
    fake.write_text('#!/usr/bin/env bash\necho "SAAG_OPT_LOCAL_CTX=$SAAG_OPT_LOCAL_CTX $*"\n', encoding="utf-8")
    fake.chmod(0o755)
    proc = _run(script, *args, SAAG_OPT=str(fake), **env)
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in proc.stdout.splitlines()]


def _flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_exp6_runs_r2_and_gate_on_both_multi_turn_datasets_with_the_embedded_model_and_a_long_context(
        tmp_path: Path) -> None:
    plan = _plan(tmp_path, EXP6)
    assert [(_flag(c, "--dataset"), _flag(c, "--mechanism")) for c in plan] == [
        ("bfcl:multi_turn_base", "r2"), ("bfcl:multi_turn_base", "gate+r2"),
        ("bfcl:multi_turn_miss_param", "r2"), ("bfcl:multi_turn_miss_param", "gate+r2")]
    for command in plan:
        assert command[0] == "SAAG_OPT_LOCAL_CTX=16384" and command[1] == "evaluate"
        assert (_flag(command, "--base"), _flag(command, "--reviewer")) == ("local", "local")
        assert (_flag(command, "--split"), _flag(command, "--limit"), _flag(command, "--prompt")) == (
            "test", "30", "reviewer@v2")
    assert [_flag(c, "--runs-dir") for c in plan] == [
        f"runs/exp6/local+local/bfcl_{d}/{v}" for d in ("multi_turn_base", "multi_turn_miss_param")
        for v in ("r2-v2", "gate+r2-v2")]


def test_exp6_model_reviewer_limit_out_and_context_are_overridable(tmp_path: Path) -> None:
    plan = _plan(tmp_path, EXP6, "gpt-4o", "gpt-4o-mini", "5", "out", SAAG_OPT_LOCAL_CTX="8192", EXTRA="--max-cost 3",
                 LOCK="")
    assert len(plan) == 4 and all(c[0] == "SAAG_OPT_LOCAL_CTX=8192" for c in plan)
    assert {(_flag(c, "--base"), _flag(c, "--reviewer"), _flag(c, "--limit"), _flag(c, "--max-cost")) for c in plan} == {
        ("gpt-4o", "gpt-4o-mini", "5", "3")}
    assert _flag(plan[0], "--runs-dir") == "out/gpt-4o+gpt-4o-mini/bfcl_multi_turn_base/r2-v2"


@needs_bfcl
def test_exp6_plans_valid_commands_and_runs_nothing(tmp_path: Path) -> None:
    proc = _run(EXP6, "local", "local", "30", str(tmp_path / "out"), SAAG_OPT=f"{sys.executable} -m saag_opt.cli",
                EXTRA="--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("Pre-flight estimate: evaluate (30 examples") == 4  # 30 of each test split's 51
    assert not (tmp_path / "out").exists()  # a dry run writes no run directory


def test_exp7_local_runs_the_embedded_model_as_agent_reviewer_and_user_on_three_domains(tmp_path: Path) -> None:
    plan = _plan(tmp_path, EXP7)
    assert [(_flag(c, "--dataset"), _flag(c, "--mechanism")) for c in plan] == [
        (f"tau2:{d}", m) for d in ("mock", "airline", "retail") for m in ("r2", "gate+r2")]
    for command in plan:
        assert command[0] == "SAAG_OPT_LOCAL_CTX=16384"
        assert {_flag(command, f) for f in ("--base", "--reviewer", "--user-model")} == {"local"}
        assert (_flag(command, "--split"), _flag(command, "--limit"), _flag(command, "--tau2-trials")) == ("test", "10", "1")
        assert _flag(command, "--prompt") == "reviewer@v2" and "--max-cost" not in command
        assert _flag(command, "--max-steps") == "30"  # the 1.5B rarely finishes: a bound on each run
    assert _flag(plan[1], "--runs-dir") == "runs/exp7/local+local/tau2_mock/gate+r2-v2"


def test_exp7_paper_is_gpt_4o_with_r5_v1_three_trials_four_domains_and_a_cost_cap(tmp_path: Path) -> None:
    plan = _plan(tmp_path, EXP7, "paper", "out")
    assert [(_flag(c, "--dataset"), _flag(c, "--mechanism")) for c in plan] == [
        (f"tau2:{d}", m) for d in ("mock", "airline", "retail", "telecom") for m in ("r5", "gate+r5")]
    for command in plan:
        assert {_flag(command, f) for f in ("--base", "--reviewer", "--user-model")} == {"gpt-4o"}
        assert (_flag(command, "--tau2-trials"), _flag(command, "--prompt"), _flag(command, "--max-cost")) == (
            "3", "reviewer@v1", "50")
        assert _flag(command, "--limit") == "10" and "--max-steps" not in command  # tau2's own 100
    assert _flag(plan[6], "--runs-dir") == "out/gpt-4o+gpt-4o/tau2_telecom/r5-v1"
    whole = _plan(tmp_path, EXP7, "paper", LIMIT="", MAX_COST="200", DOMAINS="airline")
    assert len(whole) == 2 and "--limit" not in whole[0] and _flag(whole[0], "--max-cost") == "200"


@requires(tau2_missing())
@pytest.mark.parametrize(("setting", "examples"), [("local", 9), ("paper", 27)])
def test_exp7_plans_valid_commands_with_the_user_simulator_and_runs_nothing(tmp_path: Path, setting: str,
                                                                            examples: int) -> None:
    proc = _run(EXP7, setting, str(tmp_path / "out"), SAAG_OPT=f"{sys.executable} -m saag_opt.cli", EXTRA="--dry-run",
                DOMAINS="mock")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(f"Pre-flight estimate: evaluate ({examples} examples") == 2  # mock's 9 tasks (x 3 trials for paper)
    assert "│ user " in proc.stdout  # tau2's user simulator is in the estimate
    assert not (tmp_path / "out").exists()


def test_exp7_refuses_an_unknown_setting_in_one_line(tmp_path: Path) -> None:
    proc = _run(EXP7, "nonsense", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip() == "unknown setting nonsense (local or paper)"
