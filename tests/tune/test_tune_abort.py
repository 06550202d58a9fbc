"""A tune that stops because a model went away ends with our one line, not optuna's warnings before it."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from saag_opt.cli import main
from saag_opt.testing import Fault, ScriptedOpenAIServer

REPO = Path(__file__).resolve().parents[2]


def test_a_tune_abort_prints_only_our_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    """optuna logged 'Trial 0 failed with parameters ...' and 'Trial 0 failed with value None.' first."""
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))
    verbosity = optuna.logging.get_verbosity()
    with ScriptedOpenAIServer(lambda _: Fault(401, message="invalid key")) as server:
        space = tmp_path / "space.toml"
        space.write_text(f'[fixed]\nbase = "fake@{server.url}"\nreviewer = "fake@{server.url}"\n'
                         'dataset = "shipped:bfcl"\nlimit = 2\n[search]\nmechanism = ["r1", "r2"]\n', encoding="utf-8")
        with pytest.raises(SystemExit) as exit_info:
            main(["tune", "--space", str(space), "--trials", "2", "--no-test", "--runs-dir", str(tmp_path / "runs")])
    err = capfd.readouterr().err
    assert exit_info.value.code == 2
    assert "Trial 0 failed" not in err, err
    assert err.startswith("error: ") and "rejected the API key" in err and err.count("\n") == 1, err
    assert optuna.logging.get_verbosity() == optuna.logging.WARNING, "silenced for the abort only (tune sets WARNING)"
    optuna.logging.set_verbosity(verbosity)
