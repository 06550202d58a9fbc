"""experiments/exp5_powered.sh: every stage's commands are valid saag-opt commands (planned with --dry-run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from saag_opt.data.bfcl import bfcl_available
from tests.conftest import requires

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "exp5_powered.sh"


@requires(None if bfcl_available() else "bfcl-eval data not installed (pip install --no-deps bfcl-eval)")
@pytest.mark.parametrize(("stage", "plans"), [("fixed", 4), ("tune", 1), ("gepa", 1), ("abstain", 2)])
def test_each_stage_plans_its_runs_on_the_powered_split_and_runs_nothing(tmp_path: Path, stage: str,
                                                                         plans: int) -> None:
    env = {**os.environ, "SAAG_OPT": f"{sys.executable} -m saag_opt.cli", "EXTRA": "--dry-run", "COLUMNS": "200"}
    out = subprocess.run(["bash", str(SCRIPT), stage, str(tmp_path / "out")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    assert out.count("Pre-flight estimate") == plans
    assert "320 examples" in out or stage != "fixed"  # test n = 320, stratified
    assert out.count("320 examples") == 2 or stage != "abstain"  # experiment 5's 320, then 320 no run had read
    assert not (tmp_path / "out").exists()  # a dry run writes no run directory


def test_an_unknown_stage_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "nonsense", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "unknown stage nonsense" in proc.stderr
