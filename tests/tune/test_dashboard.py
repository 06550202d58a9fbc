"""optuna-dashboard opens a study ``tune`` wrote: the real dashboard server on 127.0.0.1, read
through its own HTTP API (``/api/studies``, ``/api/studies/<id>``), for the sqlite and the journal
storage; and the tune HTML report links the study's storage with the command that opens it."""

from __future__ import annotations

import importlib.util
import json
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.report.html import write_report
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune import TuneConfig, run_tune
from saag_opt.tune.storage import parse_storage
from tests.conftest import requires
from tests.optimize import optimize_world
from tests.report.checks import check_page

pytestmark = pytest.mark.integration

DASHBOARD = Path(sys.executable).with_name("optuna-dashboard")
needs_dashboard = requires(None if importlib.util.find_spec("optuna_dashboard") and DASHBOARD.is_file() else
                           "optuna-dashboard is not installed (pip install 'saag-opt[dashboard]')")


def _tune(tmp_path: Path, storage: str | None) -> Any:
    dataset, prompts = optimize_world.write_world(tmp_path)
    space = tmp_path / "space.toml"
    space.write_text('[fixed]\nprompt = "reviewer@v2"\nretry_base_delay = 0.01\n'
                     '[search]\nmechanism = ["r1", "gate+r1"]\n', encoding="utf-8")
    with ScriptedOpenAIServer(optimize_world.handler) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAAG_OPT_PROMPTS", prompts)
        spec = f"fake@{server.url}"
        return run_tune(TuneConfig(space=space, overrides={"base": spec, "reviewer": spec, "dataset": dataset},
                                   sampler="grid", no_test=True, storage=storage, runs_dir=tmp_path / "runs"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 - 127.0.0.1, a server this test started
        return json.loads(reply.read())


@pytest.fixture
def dashboard() -> Iterator[Any]:
    """``start(storage_arg) -> base URL``: the README's command on a free port, stopped after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(argument: str) -> str:
        port = _free_port()
        process = subprocess.Popen([str(DASHBOARD), argument, "--host", "127.0.0.1", "--port", str(port), "--quiet"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"optuna-dashboard exited: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                _get(f"{url}/api/meta")
                return url
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise AssertionError("optuna-dashboard did not answer within 60 s")

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


@needs_dashboard
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_the_dashboard_reads_the_study_its_trials_and_both_objectives(
        kind: str, tmp_path: Path, dashboard: Any) -> None:
    storage = f"journal:{tmp_path / 'study.journal'}" if kind == "journal" else None  # None: tune's sqlite study.db
    outcome = _tune(tmp_path, storage)
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    spec = parse_storage(summary["storage"])
    assert spec.kind == kind
    command = shlex.split(spec.dashboard_command)  # what the report and README tell a user to run
    assert command[0] == "optuna-dashboard"
    url = dashboard(command[1])

    studies = _get(f"{url}/api/studies")["study_summaries"]
    (study,) = [s for s in studies if s["study_name"] == summary["study"]]
    assert study["directions"] == ["maximize", "minimize"]
    detail = _get(f"{url}/api/studies/{study['study_id']}")
    assert detail["name"] == summary["study"] and detail["objective_names"] == ["help", "harm"]
    rows = {r["number"]: r for r in map(json.loads, (outcome.run_dir / "trials.jsonl").read_text().splitlines())}
    shown = {t["number"]: t for t in detail["trials"]}
    assert set(shown) == set(rows) and len(rows) == 2
    for number, trial in shown.items():
        row = rows[number]
        assert trial["state"] == "Complete" and row["state"] == "COMPLETE"
        assert trial["values"] == [row["values"]["help"], row["values"]["harm"]]
        assert {p["name"]: p["param_external_value"] for p in trial["params"]} == {"mechanism": row["params"]["mechanism"]}
    assert {t["number"] for t in detail["best_trials"]} >= {n for n, r in rows.items() if r["pareto"]}


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_the_tune_report_links_the_study_storage_and_the_command_that_opens_it(kind: str, tmp_path: Path) -> None:
    storage = f"journal:{tmp_path / 'study.journal'}" if kind == "journal" else None
    outcome = _tune(tmp_path, storage)
    page = write_report(outcome.run_dir).read_text(encoding="utf-8")
    check_page(page)  # still self-contained: the file link loads nothing
    study_file = outcome.run_dir / "study.db" if kind == "sqlite" else tmp_path / "study.journal"
    stored = json.loads((outcome.run_dir / "summary.json").read_text())["storage"]
    assert f'<a href="{study_file.resolve().as_uri()}">{stored}</a>' in page
    argument = f"sqlite:///{study_file.resolve()}" if kind == "sqlite" else str(study_file.resolve())
    assert f"<dt>open with</dt><dd>optuna-dashboard {argument}</dd>" in page


def test_the_dashboard_command_masks_a_server_password_and_quotes_a_path() -> None:
    assert parse_storage("postgresql://u:secret-pw@db/optuna").dashboard_command == \
        "optuna-dashboard 'postgresql://u:***@db/optuna'"
    assert parse_storage("journal:/x y/study.journal").dashboard_command == "optuna-dashboard '/x y/study.journal'"
