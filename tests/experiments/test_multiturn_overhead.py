"""experiments/bench/multiturn_overhead.py runs offline on the scripted server and prints ``ratio=`` last."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.episodes.world import needs_bfcl

pytestmark = [pytest.mark.integration, needs_bfcl]

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "multiturn_overhead.py"


def test_the_overhead_bench_times_both_conditions_and_prints_the_ratio_last(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("multiturn_overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--limit", "2"]) == 0  # every gold replay valid in both conditions
    lines = capsys.readouterr().out.strip().splitlines()
    base, reviewed = (json.loads(line) for line in lines[:2])
    assert (base["condition"], reviewed["condition"]) == ("none", "r2")
    assert base["steps_per_entry"] == reviewed["steps_per_entry"] > 0
    assert base["requests_per_entry"] == base["steps_per_entry"]  # one proposal per step
    assert reviewed["requests_per_entry"] == 2 * reviewed["steps_per_entry"]  # and one review per step
    ratio = float(lines[-1].removeprefix("ratio="))
    assert lines[-1].startswith("ratio=") and ratio == pytest.approx(
        reviewed["mean_s_per_entry"] / base["mean_s_per_entry"], rel=0.01)
