"""experiments/bench/proposals_per_iteration.py runs optimize with 1 and N proposals per iteration and compares."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "proposals_per_iteration.py"


@pytest.mark.integration
def test_both_arms_run_on_the_same_budget_and_the_comparison_is_printed_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    dataset, prompts = world.write_world(tmp_path)
    spec = importlib.util.spec_from_file_location("proposals_per_iteration", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with ScriptedOpenAIServer(world.handler) as server:
        code = module.main(["--model", f"fake@{server.url}", "--dataset", dataset, "--seed-store", prompts,
                            "--mechanism", "r1", "--proposals", "2", "--train-limit", "6", "--val-limit", "4",
                            "--max-metric-calls", "12", "--minibatch", "2",
                            "--saag-opt", str(Path(sys.executable).with_name("saag-opt"))])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    arms = {line.split(":")[0]: line for line in lines[:-1]}
    assert set(arms) == {"proposals=1", "proposals=2"}
    for line in arms.values():  # the scripted reviewer improves only through the keyword: one candidate enters
        assert "1 entered the pool" in line and "0 quarantined" in line and "+2 val examples" in line
    last = dict(part.split("=") for part in lines[-1].split())
    assert last["proposals"] == "2" and last["pool_1"] == "1" and last["pool_N"] == "1"
    assert last["pool_ratio"] == "1.00" and last["top_val_1"] == last["top_val_N"] == "1.000"
    assert float(last["seconds_ratio"]) > 0
