"""The storage ladder's parsing and the journal's recovery of a dead worker's trial."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.tune.storage import (
    RETRY_ATTR,
    WORKER_ATTR,
    dead_local_worker,
    open_storage,
    parse_storage,
    recover_dead_workers,
)


def test_storage_specs() -> None:
    assert parse_storage("journal:/tmp/s.journal").kind == "journal"
    assert parse_storage("runs/x.db").url == f"sqlite:///{Path('runs/x.db')}"
    assert parse_storage("sqlite:///a.db").parallel is False
    pg = parse_storage("postgresql://user:secret@db.example:5432/optuna")
    assert pg.kind == "rdb" and pg.parallel and pg.text.endswith("secret@db.example:5432/optuna")
    assert pg.redacted == "postgresql://user:***@db.example:5432/optuna" and "secret" not in pg.redacted
    with pytest.raises(ConfigError, match="--storage 'nonsense': use sqlite:///PATH"):
        parse_storage("nonsense")
    with pytest.raises(ConfigError, match="journal: needs a file path"):
        parse_storage("journal:")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_dead_local_worker_only_for_this_host_and_a_gone_pid() -> None:
    host = socket.gethostname()
    assert dead_local_worker(f"{_dead_pid()}@{host}")
    assert not dead_local_worker(f"{os.getpid()}@{host}")
    assert not dead_local_worker(f"{_dead_pid()}@another-machine")  # cannot know: leave it
    assert not dead_local_worker(None) and not dead_local_worker("garbage")


def test_journal_recovery_fails_and_re_enqueues_only_dead_workers_trials(tmp_path: Path) -> None:
    storage = open_storage(parse_storage(f"journal:{tmp_path / 'study.journal'}"))
    study = optuna.create_study(storage=storage, study_name="s", directions=["maximize"])
    host = socket.gethostname()
    owners = {"dead": f"{_dead_pid()}@{host}", "alive": f"{os.getpid()}@{host}", "remote": "1@elsewhere"}
    numbers = {}
    for name, owner in owners.items():
        trial = study.ask({"mechanism": optuna.distributions.CategoricalDistribution(["r1", "r2", "r3"])})
        trial.set_user_attr(WORKER_ATTR, owner)
        numbers[name] = trial.number
    assert recover_dead_workers(study) == [numbers["dead"]]
    assert recover_dead_workers(study) == []  # the second pass finds nothing to do
    by_number = {t.number: t for t in study.get_trials()}
    assert by_number[numbers["dead"]].state == TrialState.FAIL
    assert by_number[numbers["alive"]].state == by_number[numbers["remote"]].state == TrialState.RUNNING
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].user_attrs[RETRY_ATTR] == numbers["dead"]
    assert waiting[0].system_attrs["fixed_params"] == by_number[numbers["dead"]].params  # run with the same config


def test_a_database_that_cannot_be_opened_is_one_line_without_the_password(tmp_path: Path) -> None:
    """A refused PostgreSQL connection or a damaged sqlite file used to be a sqlalchemy traceback."""
    damaged = tmp_path / "study.db"
    damaged.write_bytes(b"garbage, not sqlite")
    with pytest.raises(ModelUnavailableError, match=r"^--storage sqlite:///.*study\.db: cannot open the database: "
                                                    r"file is not a database$"):
        open_storage(parse_storage(str(damaged)))
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelUnavailableError, match=r"cannot open the database|driver is missing") as info:
        open_storage(parse_storage(f"postgresql://saag:s3cret-pw@127.0.0.1:{port}/study"))
    assert "s3cret-pw" not in str(info.value) and "\n" not in str(info.value)
