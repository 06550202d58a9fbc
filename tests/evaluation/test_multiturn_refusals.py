"""``optimize`` refuses a multi-turn dataset with one clear line, before any run directory exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.cli import main


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_optimize_refuses_conversations_and_says_what_works_instead(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["optimize", "--dataset", "bfcl:multi_turn_miss_param", "--base", "gpt-4o", "--reviewer",
                  "gpt-4o-mini", "--runs-dir", str(tmp_path / "runs")], capsys)
    assert "`saag-opt optimize` does not run conversations yet" in err and "saag-opt compare A B" in err
    assert not (tmp_path / "runs").exists()

