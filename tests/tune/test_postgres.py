"""A REAL PostgreSQL server (started by .ci/postgres.sh, URL in SAAG_OPT_TEST_POSTGRES_URL): two
``saag-opt tune`` workers on one study, one killed with SIGKILL mid-trial; the heartbeat fails its
trial, RetryHeartbeatStaleTrialCallback re-enqueues it, and every configuration completes exactly once.

Skipped only on a developer machine without the variable; under CI (CI=true) a missing server fails.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from saag_opt.errors import ModelUnavailableError
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune.storage import lost_schema_race, open_storage, parse_storage
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
WORKERS = 6


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


def test_workers_opening_an_empty_database_at_the_same_moment_all_get_the_storage(postgres_url: str) -> None:
    """Two machines started together on a new database: PostgreSQL lets one ``CREATE TABLE`` through and
    gives the other a unique violation; every worker must still open the storage (CI saw the loser exit 2)."""
    fresh = f"race_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {fresh}"))
    spec = parse_storage(postgres_url.rsplit("/", 1)[0] + f"/{fresh}")
    barrier = threading.Barrier(WORKERS)
    outcomes: list[object] = [None] * WORKERS

    def open_together(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = open_storage(spec, heartbeat=2)
        except Exception as exc:  # noqa: BLE001 - the assertion below reports whatever a worker raised
            outcomes[i] = exc

    try:
        threads = [threading.Thread(target=open_together, args=(i,)) for i in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        failures = [o for o in outcomes if isinstance(o, BaseException) or o is None]
        assert not failures, failures
        studies = {optuna.create_study(study_name="shared", storage=s, load_if_exists=True)._study_id
                   for s in outcomes}
        assert len(studies) == 1  # one schema, one study: nobody got a half-made database
    finally:
        for storage in outcomes:
            engine = getattr(storage, "engine", None)
            if engine is not None:
                engine.dispose()
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {fresh} WITH (FORCE)"))
        admin.dispose()


def test_a_refused_connection_is_not_taken_for_a_schema_race() -> None:
    """Only a lost ``CREATE TABLE`` race is retried; a server that is not there fails at once, cleanly."""
    if importlib.util.find_spec("psycopg") is None:  # without the driver the error is another (and clean too)
        skip_or_fail("the PostgreSQL driver is missing: pip install -e '.[postgres]'")
    spec = parse_storage("postgresql://saag@127.0.0.1:9/nowhere")
    with pytest.raises(ModelUnavailableError, match="cannot open the database") as info:
        open_storage(spec)
    assert not lost_schema_race(info.value.__cause__ or info.value)
