"""optimize checks its inputs before it creates a run directory: a bad start leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.cli import main
from tests.optimize import optimize_world as world

FIXTURE = Path(__file__).parents[1] / "fixtures" / "predictions" / "dataset.jsonl"  # train and test rows, no val


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0)


@pytest.mark.parametrize(("case", "message"), [
    ("missing key", "error: OPENAI_API_KEY is not set"),
    ("unknown seed prompt", "error: "),
    ("no val split", "GEPA needs both"),
])
def test_a_failed_start_leaves_no_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str], case: str, message: str) -> None:
    """A config, key or split error used to leave an errored runs/<ts>-optimize/ behind."""
    dataset, prompts = world.write_world(tmp_path)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", prompts)
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))
    argv = ["optimize", "--dataset", dataset, "--runs-dir", str(tmp_path / "runs"), "--mechanism", "r1"]
    if case == "missing key":
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
        argv += ["--base", "fake", "--reviewer", "fake"]
        argv += ["--prompt", "reviewer@nope"] if case == "unknown seed prompt" else ["--dataset", str(FIXTURE)]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_error_on_a_piped_stderr_is_the_only_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The progress bar drew nothing on a pipe but printed a blank line when it stopped, ahead of the error."""
    dataset, prompts = world.write_world(tmp_path)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", prompts)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert _run(["optimize", "--dataset", dataset, "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: OPENAI_API_KEY is not set") and err.count("\n") == 1, repr(err)
