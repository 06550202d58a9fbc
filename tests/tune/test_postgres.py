"""A REAL PostgreSQL server (started by .ci/postgres.sh, URL in SAAG_OPT_TEST_POSTGRES_URL): two
``saag-opt tune`` workers on one study, one killed with SIGKILL mid-trial; the heartbeat fails its
trial, RetryHeartbeatStaleTrialCallback re-enqueues it, and every configuration completes exactly once.

Skipped only on a developer machine without the variable; under CI (CI=true) a missing server fails.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune.storage import open_storage, parse_storage
from tests.conftest import skip_or_fail
from tests.tune.kill_workers import (
    assert_each_configuration_completed_once,
    run_and_kill_one,
    write_space,
)
from tests.tune.test_tune_runner import World

pytestmark = pytest.mark.integration

URL_ENV = "SAAG_OPT_TEST_POSTGRES_URL"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def postgres_url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        skip_or_fail(f"{URL_ENV} is not set: source .ci/postgres.sh to start a throwaway PostgreSQL "
                     "(.ci/run does)")
    return url


def test_two_workers_on_postgres_one_killed_every_configuration_completes_once(
        tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    study = f"kill-{uuid.uuid4().hex[:8]}"
    spec = parse_storage(postgres_url)
    assert spec.kind == "rdb"
    with ScriptedOpenAIServer(World(), latency=0.3) as slow:
        report = run_and_kill_one(write_space(tmp_path / "space.toml", slow.url), postgres_url, study,
                                  tmp_path / "runs", lambda: open_storage(spec, heartbeat=2))
    assert_each_configuration_completed_once(report)
    killed = next(t for t in report.trials if t.number == report.killed_trial)
    retry = next(t for t in report.trials if t.system_attrs.get("failed_trial") == report.killed_trial)
    assert retry.system_attrs["retry_history"] == [report.killed_trial]  # the heartbeat callback's record
    assert killed.params == retry.params
