"""A REAL PostgreSQL server (started by .ci/postgres.sh, URL in SAAG_OPT_TEST_POSTGRES_URL): two
``saag-opt tune`` workers on one study, one killed with SIGKILL mid-trial; the heartbeat fails its
trial, RetryHeartbeatStaleTrialCallback re-enqueues it, and every configuration completes exactly once.

Skipped only on a developer machine without the variable; under CI (CI=true) a missing server fails.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import signal
import threading
import time
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


def _book_until_refused(url: str, study: str, cap: float, seed: int, out: str, grace: float) -> None:
    from saag_opt.tune.spend import SharedSpendCap, SqlSpendStore  # noqa: PLC0415 - a spawned process
    from tests.tune.test_tune_cap import book  # noqa: PLC0415

    Path(out).write_text(repr(book(SharedSpendCap(SqlSpendStore(url, study), cap, grace=grace), seed, 0.002, 0.01)))


def _hold_and_wait(url: str, study: str, cap: float, ready: str) -> None:
    from saag_opt.tune.spend import SharedSpendCap, SqlSpendStore  # noqa: PLC0415 - a spawned process

    SharedSpendCap(SqlSpendStore(url, study), cap).reserve(0.3)  # never settled: this process is killed
    Path(ready).write_text("held")
    time.sleep(600)


def test_workers_on_postgres_book_into_one_account_that_never_passes_the_cap_and_a_killed_ones_hold_counts(
        tmp_path: Path, postgres_url: str) -> None:
    """Processes standing for machines: one killed while its call is in flight, then two booking until refused."""
    from saag_opt.errors import CostCapReached  # noqa: PLC0415
    from saag_opt.tune.spend import SharedSpendCap, SqlSpendStore  # noqa: PLC0415

    study, cap, grace = f"cap-{uuid.uuid4().hex[:8]}", 1.0, 2.0
    context = multiprocessing.get_context("spawn")
    coordinator = SharedSpendCap(SqlSpendStore(postgres_url, study), cap, restart=True, grace=grace)
    ready = tmp_path / "ready"
    holder = context.Process(target=_hold_and_wait, args=(postgres_url, study, cap, str(ready)))
    holder.start()
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    assert coordinator.held == pytest.approx(0.3)  # in flight: nobody may spend it
    outs = [tmp_path / f"paid-{n}" for n in range(2)]
    workers = [context.Process(target=_book_until_refused, args=(postgres_url, study, cap, n, str(out), grace))
               for n, out in enumerate(outs)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert all(w.exitcode == 0 for w in workers)
    paid = sum(float(out.read_text()) for out in outs)
    # the killed worker's hold was settled at its worst case (silent past the grace, or refused first)
    assert coordinator.spent <= cap and coordinator.held == 0
    assert coordinator.spent == pytest.approx(0.3 + paid) and coordinator.reached
    with pytest.raises(CostCapReached):
        coordinator.reserve(0.001)


def test_tune_ledgers_of_one_study_on_two_machines_share_its_account(tmp_path: Path, postgres_url: str) -> None:
    from saag_opt.tune.spend import SqlSpendStore, tune_ledger  # noqa: PLC0415

    study, storage = f"ledger-{uuid.uuid4().hex[:8]}", parse_storage(postgres_url)
    first = tune_ledger(tmp_path / "machine-a", 1.0, restart=True, storage=storage, study=study).cap
    second = tune_ledger(tmp_path / "machine-b", 1.0, storage=storage, study=study).cap
    assert isinstance(first.store, SqlSpendStore) and isinstance(second.store, SqlSpendStore)
    first.reserve(0.5).settle(0.4)
    held = second.reserve(0.5)
    assert second.spent == pytest.approx(0.4) and first.held == pytest.approx(0.5)
    held.settle(0.1)
    assert first.spent == pytest.approx(0.5) and not (tmp_path / "machine-a" / "spend.json").exists()


CAP = 0.02
"""Dollars: above one call's worst case at the priced hook's gpt-4o rates (400-token replies, ~$0.006), below
the grid's spend, so the cap stops the study part way."""


def test_two_tune_workers_on_postgres_one_killed_never_book_more_than_the_cap(
        tmp_path: Path, postgres_url: str) -> None:
    from saag_opt.tune.spend import SqlSpendStore  # noqa: PLC0415

    study = f"capped-{uuid.uuid4().hex[:8]}"
    spec = parse_storage(postgres_url)
    hook = Path(__file__).parent / "priced"  # its sitecustomize prices the workers' fake@ calls at gpt-4o's rates
    env = {"PYTHONPATH": f"{hook}{os.pathsep}{REPO}", "SAAG_OPT_TEST_GPT4O_PRICES": "1"}
    with ScriptedOpenAIServer(World(), latency=0.3) as slow:
        report = run_and_kill_one(write_space(tmp_path / "space.toml", slow.url), postgres_url, study,
                                  tmp_path / "runs", lambda: open_storage(spec, heartbeat=2),
                                  extra=["--max-cost", str(CAP)], env=env)
    assert report.survivor_code == 0, report.survivor_output
    account = SqlSpendStore(postgres_url, study).read()
    booked = sum(json.loads(p.read_text())["roles"]["total"]["dollars"]
                 for p in (tmp_path / "runs" / "w0").rglob("costs.json"))
    assert account["reached"] and not account["holds"]  # stopped by the cap; the killed worker's holds settled
    assert 0 < booked <= account["spent"] + 1e-12 and account["spent"] <= CAP  # (float sums in another order)
    assert f"--max-cost ${CAP:g} reached" in " ".join(report.survivor_output.split())
