"""``--config FILE.toml`` on evaluate, compare, optimize and security: SPACE.toml's ``[fixed]`` table, read by one reader.

A file's value reaches the config (and run.json), a flag given overrides it, and a key that is not
an option is one error line naming the file and the key.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from saag_opt.cli import main
from saag_opt.runfiles import read_header
from tests.conftest import requires

FIXTURES = Path(__file__).parent / "fixtures" / "predictions"
DATASET = FIXTURES / "dataset.jsonl"
needs_agentdojo = requires(None if importlib.util.find_spec("agentdojo") else
                           "the agentdojo extra is not installed (pip install 'saag-opt[agentdojo]')")


class _Stop(Exception):
    """Raised by a spy: the command built its config and got as far as the library."""


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _spy(monkeypatch: pytest.MonkeyPatch, module: str, attribute: str) -> list[Any]:
    """Replace ``module.attribute`` by a spy that keeps its first argument and stops the command."""
    seen: list[Any] = []

    def spy(config: Any, *_: Any, **__: Any) -> None:
        seen.append(config)
        raise _Stop

    monkeypatch.setattr(importlib.import_module(module), attribute, spy)
    return seen


def _stopped(argv: list[str]) -> None:
    with pytest.raises(_Stop):
        main(argv)


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_evaluate_runs_with_the_files_options_and_records_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    config = _toml(tmp_path, f'base = "fake"\nmechanism = "none"\ndataset = "{DATASET}"\nsplit = "all"\nlimit = 3\n'
                             f'skip = 1\nruns_dir = "{tmp_path / "runs"}"\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--config", str(config), "--limit", "1"])
    assert exit_info.value.code == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    header = read_header(run_dir)
    recorded = {k: header.config.get(k) for k in ("base", "mechanism", "dataset", "split", "limit", "skip")}
    assert recorded == {"base": "fake", "mechanism": "none", "dataset": str(DATASET), "split": None, "limit": 1,
                        "skip": 1}
    assert header.args_passed["limit"] == 1 and header.args_passed["skip"] == 1  # typed and from the file


def test_evaluate_flags_and_environment_override_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch, "saag_opt.evaluate.run", "preflight_evaluate")
    config = _toml(tmp_path, 'base = "gpt-4o-mini"\nreviewer = "gpt-4o-mini"\nmechanism = "r1"\nlimit = 7\n'
                             'temperature = 0.5\nmax_cost = 2.5\n')
    monkeypatch.setenv("SAAG_OPT_BASE", "gpt-4o")
    _stopped(["evaluate", "--config", str(config), "--limit", "2", "--dry-run"])
    (built,) = seen
    assert (built.setup.base, built.setup.reviewer, built.setup.mechanism.spec) == ("gpt-4o", "gpt-4o-mini", "r1")
    assert (built.limit, built.setup.reviewer_temperature, built.max_cost) == (2, 0.5, 2.5)


def test_a_bad_value_in_the_file_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _toml(tmp_path, "limit = 0\n")
    err = _error(["evaluate", "--config", str(config), "--mechanism", "none", "--dry-run"], capsys)
    assert err == f"error: limit: Input should be greater than or equal to 1 (limit from {config})"


@pytest.mark.parametrize(("verb", "extra"), [("evaluate", []), ("compare", ["reviewer@v1", "reviewer@v2"]),
                                             ("optimize", []), pytest.param("security", [], marks=needs_agentdojo)])
def test_an_unknown_key_is_one_line_naming_the_file_and_the_key(verb: str, extra: list[str], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = _toml(tmp_path, 'colour = "red"\n')
    err = _error([verb, *extra, "--config", str(config), "--dry-run"], capsys)
    article = "an" if verb in ("evaluate", "optimize") else "a"
    assert err.startswith(f"error: {config}: colour: not {article} {verb} option; choose from [")


def test_a_file_that_is_not_toml_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _toml(tmp_path, "limit = = 2\n")
    assert _error(["evaluate", "--config", str(config), "--dry-run"], capsys).startswith(
        f"error: {config}: not valid TOML: ")


def test_compare_evaluates_both_versions_with_the_files_options(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch, "saag_opt.compare.run", "preflight_compare")
    config = _toml(tmp_path, 'reviewer = "gpt-5-mini"\nmechanism = "r1"\nlimit = 9\nseed = 7\nworkers = 3\n')
    _stopped(["compare", "reviewer@v1", "reviewer@v2", "--config", str(config), "--workers", "2", "--dry-run"])
    (built,) = seen
    evaluation = built.evaluation
    assert (evaluation.setup.reviewer, evaluation.setup.mechanism.spec, evaluation.limit) == ("gpt-5-mini", "r1", 9)
    assert (evaluation.workers, built.seed) == (2, 7)


def test_optimize_takes_gepas_options_from_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch, "saag_opt.optimize.preflight", "preflight_optimize")
    config = _toml(tmp_path, 'reviewer = "gpt-4o-mini"\nminibatch = 5\nproposer = "edit"\ntrain_limit = 8\n'
                             'evaluate_test = false\n')
    _stopped(["optimize", "--config", str(config), "--train-limit", "4", "--dry-run"])
    (built,) = seen
    assert (built.setup.reviewer, built.minibatch, built.proposer) == ("gpt-4o-mini", 5, "edit")
    assert (built.train_limit, built.evaluate_test) == (4, False)


@needs_agentdojo
def test_security_runs_the_files_suites_and_records_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _toml(tmp_path, 'suites = ["banking"]\nattacks = ["important_instructions"]\nlimit = 3\nbenign = false\n'
                             'guard = false\n')
    seen = _spy(monkeypatch, "saag_opt.security.run", "preflight_security")
    _stopped(["security", "--config", str(config), "--user-tasks", "1", "--runs-dir", str(tmp_path / "runs")])
    (built,) = seen
    assert (built.suites, built.attacks, built.limit, built.benign, built.guard) == (
        ["banking"], ["important_instructions"], 1, False, False)
    monkeypatch.undo()
    with pytest.raises(SystemExit) as exit_info:
        main(["security", "--config", str(config), "--user-tasks", "1", "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code in (0, None)
    (run_dir,) = (tmp_path / "runs").glob("*-security")
    header = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    assert {k: header["config"][k] for k in ("suites", "attacks", "limit", "benign", "guard")} == {
        "suites": ["banking"], "attacks": ["important_instructions"], "limit": 1, "benign": False, "guard": False}
