"""Every ``saag-opt report`` command README and the docs show runs as shown, its ``runs/<verb>`` placeholders
filled with finished runs of that verb (the session fixtures), and writes the one page it names."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from saag_opt.cli import app
from tests.report.checks import check_page
from tests.test_readme_plans import readme_commands

COMMANDS = readme_commands(("report",), placeholders=True)
runner = CliRunner()


def test_the_docs_show_a_report_command() -> None:
    assert COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_each_report_command_in_the_docs_writes_its_page(command: str, eval_runs: dict[str, Path],
                                                         optimize_run: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    finished = {"evaluate": eval_runs["evaluate"], "compare": eval_runs["compare"], "optimize": optimize_run}
    argv = [str(finished[m.group(1)]) if (m := re.fullmatch(r"runs/<(\w+)>", a)) else a
            for a in shlex.split(command)[1:]]
    assert not [a for a in argv if "<" in a], f"a placeholder this test cannot fill: {command}"
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    page = tmp_path / argv[argv.index("--out") + 1]
    data = check_page(page.read_text(encoding="utf-8"))
    assert len(data["runs"]) == sum(a.startswith("runs/<") for a in shlex.split(command))
