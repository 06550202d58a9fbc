"""experiments/bench/tau2_gold_replay.py replays the gold through the tau2 agent and prints ``reward1=N/M`` last."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from saag_opt.data.tau2_package import missing
from tests.conftest import requires

pytestmark = [pytest.mark.integration, requires(missing())]

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "tau2_gold_replay.py"


def test_the_replay_scores_every_replayable_mock_and_telecom_task_and_prints_the_count_last(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("tau2_gold_replay", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--domain", "mock", "--domain", "telecom", "--limit", "9"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "reward1=17/17"  # mock 8 (its ninth has nothing to replay) + the first 9 telecom tasks
    assert any(line.startswith("SKIPPED mock/update_task_with_history_and_env_assertions") for line in lines)
    assert any(line.startswith("telecom: reward1=9/9") for line in lines)
