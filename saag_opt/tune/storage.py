"""The storage ladder: sqlite (one process), a journal file (local workers), PostgreSQL (many machines).

Optuna's own storages, nothing home-made (docs/design.md §12).

* ``sqlite:///PATH`` (or a path ending in ``.db``): one process. sqlite's locking breaks under
  parallel writers, so more than one worker on it is refused.
* ``journal:PATH``: ``JournalStorage(JournalFileBackend(PATH))``, an append-only log safe for local
  processes (and NFS). It has no heartbeat: ``recover_dead_workers`` fails the RUNNING trials of
  workers that are provably dead (same host, pid gone) and re-enqueues their parameters.
* ``postgresql://...`` (any SQLAlchemy URL but sqlite): ``RDBStorage`` with a heartbeat; a trial
  whose worker stops beating is failed and retried by ``RetryHeartbeatStaleTrialCallback`` the next
  time any worker starts a trial.
"""

from __future__ import annotations

import os
import shlex
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from saag_opt.credentials import mask_url_secrets, redacted_url
from saag_opt.errors import ConfigError, ModelUnavailableError

StorageKind = Literal["sqlite", "journal", "rdb"]

WORKER_ATTR = "worker"
"""Trial user attribute: ``pid@host`` of the process that ran it."""
RETRY_ATTR = "retry_of"
"""Trial user attribute: the number of the dead worker's trial this one re-runs."""


@dataclass(frozen=True)
class StorageSpec:
    """A parsed ``--storage`` value."""

    kind: StorageKind
    url: str
    """``sqlite:///...``, a journal file path, or an SQLAlchemy URL."""

    @property
    def parallel(self) -> bool:
        """Whether several processes may share it."""
        return self.kind != "sqlite"

    @property
    def text(self) -> str:
        """What to pass as ``--storage`` to another process (passwords included: never log it)."""
        return f"journal:{self.url}" if self.kind == "journal" else self.url

    @property
    def file(self) -> Path | None:
        """The study's file (sqlite database or journal), None for a database server."""
        if self.kind == "rdb":
            return None
        return Path(self.url.removeprefix("sqlite:///") if self.kind == "sqlite" else self.url)

    @property
    def dashboard_command(self) -> str:
        """The shell command that opens the study in optuna-dashboard (``pip install 'saag-opt[dashboard]'``).

        optuna-dashboard takes a sqlite URL as is and a journal file by its path; a server's URL is
        shown with its password masked (type it in).
        """
        return f"optuna-dashboard {shlex.quote(self.redacted if self.kind == 'rdb' else self.url)}"

    @property
    def redacted(self) -> str:
        """``text`` with its credentials masked (``saag_opt.credentials``), for run files and messages."""
        return redacted_url(self.url) if self.kind == "rdb" else self.text


def parse_storage(text: str) -> StorageSpec:
    """``sqlite:///x.db`` | ``x.db`` | ``journal:PATH`` | ``postgresql://...``.

    Raises:
        ConfigError: an empty or unrecognised value.
    """
    raw = (text or "").strip()
    if raw.startswith("journal:"):
        path = raw.removeprefix("journal:")
        if not path:
            raise ConfigError("--storage journal: needs a file path, e.g. journal:runs/study.journal")
        return StorageSpec("journal", str(Path(path).expanduser()))
    if raw.startswith("sqlite:///"):
        return StorageSpec("sqlite", raw)
    if raw.endswith(".db") and "://" not in raw:
        return StorageSpec("sqlite", f"sqlite:///{Path(raw).expanduser()}")
    if "://" in raw and not raw.startswith("sqlite"):
        return StorageSpec("rdb", raw)
    raise ConfigError(f"--storage {raw!r}: use sqlite:///PATH (one process), journal:PATH (local workers) "
                      "or postgresql://user:pass@host/db (many machines)")


def open_storage(spec: StorageSpec, *, heartbeat: int = 60, max_retry: int = 3) -> Any:
    """The optuna storage object for ``spec``.

    Raises:
        ModelUnavailableError: the database cannot be reached or its driver is missing.
    """
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module
    from optuna.storages import (  # noqa: PLC0415 - heavy: optuna; the report imports this module
        JournalStorage,
        RDBStorage,
        RetryHeartbeatStaleTrialCallback,
    )
    from optuna.storages.journal import JournalFileBackend  # noqa: PLC0415 - heavy: optuna; the report imports this module

    if spec.kind == "journal":
        Path(spec.url).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(spec.url))
    from sqlalchemy.exc import SQLAlchemyError  # noqa: PLC0415 - heavy: optuna; the report imports this module

    from saag_opt.lm.retry import with_retries  # noqa: PLC0415 - keeps this module import-light for the report

    try:
        if spec.kind == "sqlite":
            Path(spec.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            return RDBStorage(spec.url, engine_kwargs={"connect_args": {"timeout": 300}})
        def server_storage() -> Any:
            with warnings.catch_warnings():  # the heartbeat is experimental, and it is the point of this storage
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(spec.url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=heartbeat,
                                  grace_period=2 * heartbeat,
                                  heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry))

        return with_retries(server_storage, attempts=SCHEMA_RACE_ATTEMPTS, base_delay=0.2, max_delay=2.0,
                            retry_on=lost_schema_race)
    except ImportError as exc:
        raise ModelUnavailableError(f"--storage {spec.redacted}: the database driver is missing ({exc}); "
                                    "pip install 'saag-opt[postgres]'") from exc
    except (optuna.exceptions.StorageInternalError, SQLAlchemyError, OSError) as exc:
        # A refused connection arrives as sqlalchemy's OperationalError, a damaged sqlite file as DatabaseError.
        reason = str(exc.__cause__ or exc).strip().splitlines()[0]
        raise ModelUnavailableError(f"--storage {spec.redacted}: cannot open the database: "
                                    f"{_without_password(reason, spec)}") from exc


SCHEMA_RACE_ATTEMPTS = 6
"""How often opening a server database is tried when another worker was creating optuna's tables."""

_SCHEMA_RACE_MARKS = ("already exists", "duplicate key", "pg_type_typname_nsp_index", "unique constraint")


def lost_schema_race(exc: BaseException) -> bool:
    """Whether ``exc`` is another worker creating optuna's tables at the same moment as this one.

    Why: on an empty database each worker's ``RDBStorage`` runs ``CREATE TABLE`` and inserts the
    schema version; PostgreSQL lets exactly one of two simultaneous creators through and gives the
    other a unique-violation (``pg_type_typname_nsp_index``) or "already exists". Trying again then
    finds the tables made, so two machines started together both get the study.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if any(mark in str(seen) for mark in _SCHEMA_RACE_MARKS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _without_password(text: str, spec: StorageSpec) -> str:
    """``text`` with the storage URL's credentials masked (driver messages may quote the URL)."""
    return mask_url_secrets(text, spec.url) if spec.kind == "rdb" else text


def worker_id() -> str:
    """``pid@host`` of this process (recorded on every trial it runs)."""
    return f"{os.getpid()}@{socket.gethostname()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_local_worker(worker: str | None) -> bool:
    """True only when ``worker`` ran on this host and its process is gone (other hosts: unknown)."""
    if not worker or "@" not in worker:
        return False
    pid_text, host = worker.split("@", 1)
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    return not _alive(int(pid_text))


def recover_dead_workers(study: Any) -> list[int]:
    """Fail the RUNNING trials of dead local workers and enqueue their parameters again.

    Why: a journal storage has no heartbeat, so a ``kill -9`` leaves the trial RUNNING forever.
    Only provably dead workers are touched; when two processes recover at once, ``tell`` lets one
    win and the other skips, so a trial is re-enqueued once. Returns ``(failed, retried)`` pairs
    (``retried`` None when another process won the race).
    """
    import optuna  # noqa: PLC0415 - heavy: optuna; the report imports this module
    from optuna.trial import TrialState  # noqa: PLC0415 - heavy: optuna; the report imports this module

    out: list[int] = []
    # A handle without the study's sampler: ``tell`` runs the sampler's after_trial hook, and
    # BruteForceSampler's calls ``study.stop()``, which raises outside ``optimize``.
    plain = None
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not dead_local_worker(trial.user_attrs.get(WORKER_ATTR)):
            continue
        plain = plain or optuna.load_study(study_name=study.study_name, storage=study._storage,
                                           sampler=optuna.samplers.RandomSampler())
        try:
            plain.tell(trial.number, state=TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
            continue
        plain.enqueue_trial(trial.params, user_attrs={RETRY_ATTR: trial.number})
        out.append(trial.number)
    return out


__all__ = ["RETRY_ATTR", "SCHEMA_RACE_ATTEMPTS", "WORKER_ATTR", "StorageKind", "StorageSpec", "dead_local_worker",
           "lost_schema_race", "open_storage", "parse_storage", "recover_dead_workers", "worker_id"]
