"""``optimize`` refuses a tau2 dataset with one clear line, before any run directory exists; BFCL multi-turn it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.cli import main
from saag_opt.optimize import OptimizeConfig


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_optimize_refuses_a_simulated_user_and_says_what_works_instead(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["optimize", "--dataset", "tau2:retail", "--base", "gpt-4o", "--reviewer",
                  "gpt-4o-mini", "--runs-dir", str(tmp_path / "runs")], capsys)
    assert "is a tau2 dataset" in err and "BFCL multi-turn ones only (e.g. bfcl:multi_turn_base)" in err
    assert "saag-opt compare A B --dataset tau2:retail" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("dataset", ["bfcl:multi_turn_base", "bfcl:multi_turn_miss_param", "bfcl:multi_turn"])
def test_optimize_takes_every_bfcl_multi_turn_dataset(dataset: str) -> None:
    config = OptimizeConfig(dataset=dataset, base="gpt-4o", reviewer="gpt-4o-mini")
    assert config.workload.conversations
    assert not OptimizeConfig(base="gpt-4o", reviewer="gpt-4o-mini").workload.conversations
