"""``tune --max-cost``: one hard cap over every process of a study, on every machine, and its test phase.

Why shared state: a study's LM calls come from several processes (``--processes N`` local workers,
the coordinator's warm-up, drain and test re-evaluation, and workers on other machines joining it
through ``--storage``), and ``lm.spend.cap.SpendCap`` only holds inside one. ``SharedSpendCap``
keeps its rule (every attempt reserves its worst case before it is sent and settles after, so
``settled + held <= max_cost`` at every instant) in one state every process reads and rewrites under
an exclusive lock: where the study lives (``spend_store``):

* sqlite, or a journal in the run directory: ``spend.json`` there, under an ``flock``;
* a journal elsewhere (a shared file system): ``<journal>.<study>.spend.json`` beside it;
* PostgreSQL: one row of table ``saag_opt_spend`` per study, locked with ``SELECT ... FOR UPDATE``,
  so workers on every machine book into one account (another database: each run's own file, said once).

A hold whose process died is settled at its worst case (what it may have been billed) by the next
process that looks: at once for a process of this host that is gone, after ``HOLD_GRACE`` seconds
without a sign of life for one elsewhere (a process with holds in flight beats every
``BEAT_SECONDS``). The state outlives the attempt, so a ``--resume`` counts what earlier attempts
spent, and a higher ``--max-cost`` there lifts the stop. Without ``fcntl`` (Windows) the file lock
covers this process only.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from saag_opt.atomic import atomic_write_json
from saag_opt.errors import CostCapReached
from saag_opt.lm.spend.accounting import CostLedger
from saag_opt.lm.spend.cap import ROUNDING_MARGIN, Hold, SpendCap
from saag_opt.tune.storage import StorageSpec, dead_local_worker, worker_id

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: the lock covers one process there
    fcntl = None  # type: ignore[assignment]

SPEND_FILE = "spend.json"
"""In the tune run directory: settled dollars, holds in flight, whether the cap stopped the run."""
POLL_SECONDS = 0.05
"""How often a refused hold looks again while other holds are in flight."""
BEAT_SECONDS = 10.0
"""How often a process with holds in flight says it is alive."""
HOLD_GRACE = 120.0
"""Seconds without a sign of life after which a hold of a process on another host is taken for dead."""
SPEND_TABLE = "saag_opt_spend"
"""The PostgreSQL table of the studies' accounts (one row per study)."""


class SpendStore(Protocol):
    """Where a shared cap's state lives: read it, or hold it exclusively and write it back if it changed."""

    def read(self) -> dict[str, Any]:
        """The state as last written (``{}`` before the first write)."""
        ...

    def state(self) -> AbstractContextManager[dict[str, Any]]:
        """The state under an exclusive lock, written back when the body ends (even by an exception)."""
        ...


class FileSpendStore:
    """The state in a JSON file, rewritten atomically under an ``flock`` (processes of one host, or NFS)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file_lock = _FileLock(path.with_name(path.name + ".lock"))
        self._thread_lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        """The file's state (``{}`` when absent or unreadable)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @contextmanager
    def state(self) -> Iterator[dict[str, Any]]:
        """Only written when it changed: a refused hold polls every ``POLL_SECONDS`` and used to rewrite the same file."""
        with self._thread_lock, self._file_lock.held():
            state = self.read()
            before = copy.deepcopy(state)
            try:
                yield state
            finally:
                if state and state != before:
                    atomic_write_json(self.path, state)


class SqlSpendStore:
    """The state in one row of ``saag_opt_spend`` (keyed by study), locked with ``SELECT ... FOR UPDATE``."""

    def __init__(self, url: str, key: str) -> None:
        import sqlalchemy  # noqa: PLC0415 - the [postgres] extra; only a database study needs it

        self._sql = sqlalchemy
        self.key = key
        self._engine = sqlalchemy.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2)
        with self._engine.begin() as conn:  # two machines starting together: one creates, the other waits
            conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": SPEND_TABLE})
            conn.execute(sqlalchemy.text(f"CREATE TABLE IF NOT EXISTS {SPEND_TABLE} "
                                         "(study TEXT PRIMARY KEY, state TEXT NOT NULL)"))

    def read(self) -> dict[str, Any]:
        """The study's row (``{}`` before its first write)."""
        with self._engine.connect() as conn:
            row = conn.execute(self._sql.text(f"SELECT state FROM {SPEND_TABLE} WHERE study = :k"),
                               {"k": self.key}).first()
        return _parsed(row[0]) if row is not None else {}

    @contextmanager
    def state(self) -> Iterator[dict[str, Any]]:
        """The row locked for this transaction; updated only when the state changed.

        Committed even when the body raises (a refused hold records the stop), as the file is; the
        body's exception is raised again after the commit.
        """
        text = self._sql.text
        raised: BaseException | None = None
        with self._engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {SPEND_TABLE} (study, state) VALUES (:k, '{{}}') "
                              "ON CONFLICT (study) DO NOTHING"), {"k": self.key})
            row = conn.execute(text(f"SELECT state FROM {SPEND_TABLE} WHERE study = :k FOR UPDATE"),
                               {"k": self.key}).first()
            state = _parsed(row[0]) if row is not None else {}
            before = copy.deepcopy(state)
            try:
                yield state
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the commit
                raised = exc
            if state != before:
                conn.execute(text(f"UPDATE {SPEND_TABLE} SET state = :s WHERE study = :k"),
                             {"s": json.dumps(state), "k": self.key})
        if raised is not None:
            raise raised

    def __deepcopy__(self, memo: dict[int, Any]) -> SqlSpendStore:
        return self


def _parsed(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def spend_store(run_dir: Path, storage: StorageSpec | None = None, study: str | None = None) -> SpendStore:
    """Where the cap of this study lives (see the module docstring): every process of the study picks the same."""
    if storage is not None and storage.kind == "rdb" and study:
        if storage.url.split(":", 1)[0].split("+", 1)[0] == "postgresql":
            return SqlSpendStore(storage.url, study)
        warnings.warn("--max-cost: the study's shared account is kept in PostgreSQL only; on this database each "
                      "machine's run caps its own spend (spend.json in its run directory)", UserWarning, stacklevel=2)
    journal = storage.file if storage is not None and storage.kind == "journal" else None
    if journal is not None and study and journal.parent.resolve() != run_dir.resolve():
        return FileSpendStore(journal.with_name(f"{journal.name}.{study}.spend.json"))
    return FileSpendStore(run_dir / SPEND_FILE)


@dataclass
class _FileHold(Hold):
    key: str = ""


class SharedSpendCap(SpendCap):
    """A ``SpendCap`` whose spend and holds live in ``spend.json``, shared by every process that opens it."""

    def __init__(self, where: Path | SpendStore, max_cost: float, *, restart: bool = False, spent: float = 0.0,
                 grace: float = HOLD_GRACE) -> None:
        """Open (or create) the cap's state: a file path, or a ``SpendStore``.

        ``restart``: this process starts (or resumes) the run: the state takes this ``max_cost`` and
        the stop of an earlier attempt is lifted when the new cap leaves room. ``spent``: what
        earlier attempts of the run are known to have spent (their run files); the state counts at
        least that (an attempt without ``--max-cost`` kept no account here). ``grace``: ``HOLD_GRACE``.
        """
        self.store: SpendStore = FileSpendStore(where) if isinstance(where, Path) else where
        self.path = getattr(self.store, "path", None)
        self.grace = float(grace)
        self._mine: set[str] = set()
        self._mine_lock = threading.Lock()
        self._beating: threading.Thread | None = None
        super().__init__(max_cost)  # validates max_cost; its counters stay unused
        with self._state() as state:
            if not state:
                state.update(spent=float(spent), holds={}, beats={}, reached=False, refused=None)
            if restart:
                state["spent"] = max(float(state["spent"]), float(spent))
                state["reached"] = state["spent"] >= self.max_cost - ROUNDING_MARGIN
                state["refused"] = "spend before this attempt already reached the cap" if state["reached"] else None
            state["max_cost"] = self.max_cost

    # -- what SpendCap exposes, read from the file ------------------------------------------------

    @property  # type: ignore[override]
    def reached(self) -> bool:
        """Whether any process of the run was refused for good (every later hold is refused too)."""
        return bool(self._read().get("reached"))

    @reached.setter
    def reached(self, value: bool) -> None:  # SpendCap.__init__ assigns it; the file decides
        pass

    @property
    def spent(self) -> float:
        """Dollars settled by every process of the run."""
        return float(self._read().get("spent") or 0.0)

    @property
    def held(self) -> float:
        """Dollars reserved by calls in flight, in every process."""
        return sum(float(h["dollars"]) for h in (self._read().get("holds") or {}).values())

    def message(self) -> str:
        """The one line a user reads when the run stops."""
        self.refused = self._read().get("refused")
        return super().message()

    # -- reserve and settle -----------------------------------------------------------------------

    def reserve(self, dollars: float, *, what: str = "the next LM call") -> Hold:
        """Hold ``dollars`` for one attempt, waiting while other processes' holds might free room.

        Raises:
            CostCapReached: the cap cannot take this call (or another process was already refused).
        """
        dollars = max(0.0, float(dollars))
        while True:
            with self._state() as state:
                _settle_dead(state, self.grace)
                spent = state["spent"]
                if state["reached"]:
                    raise CostCapReached(self._message(state))
                if spent + dollars > self.max_cost - ROUNDING_MARGIN:
                    state["reached"] = True
                    state["refused"] = (f"{what} could cost up to ${dollars:.4f} and ${spent:.4f} "
                                        f"of ${self.max_cost:g} is spent")
                    raise CostCapReached(self._message(state))
                held = sum(float(h["dollars"]) for h in state["holds"].values())
                if spent + held + dollars <= self.max_cost - ROUNDING_MARGIN:
                    key = uuid.uuid4().hex
                    state["holds"][key] = {"worker": worker_id(), "dollars": dollars, "at": time.time()}
                    break
            time.sleep(POLL_SECONDS)
        with self._mine_lock:
            self._mine.add(key)
            if self._beating is None or not self._beating.is_alive():
                self._beating = threading.Thread(target=self._beat, name="spend-cap-heartbeat", daemon=True)
                self._beating.start()
        return _FileHold(self, dollars, key=key)

    def _beat(self) -> None:
        """Say this process is alive while it has holds in flight (a hold elsewhere may last a long call)."""
        while True:
            time.sleep(BEAT_SECONDS)
            with self._mine_lock:
                if not self._mine:
                    self._beating = None
                    return
            try:
                with self._state() as state:
                    state.setdefault("beats", {})[worker_id()] = time.time()
            except Exception:  # noqa: BLE001 - a missed beat only risks the grace; the next one may pass
                continue

    def _settle(self, hold: Hold, actual: float) -> None:
        if hold.settled:
            return
        hold.settled = True
        key = getattr(hold, "key", "")
        with self._mine_lock:
            self._mine.discard(key)
        with self._state() as state:
            if state["holds"].pop(key, None) is not None:
                state["spent"] += max(0.0, float(actual))

    def _message(self, state: dict[str, Any]) -> str:
        self.refused = state.get("refused")
        return super().message()

    # -- the file ---------------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        return self.store.read()

    def _state(self) -> AbstractContextManager[dict[str, Any]]:
        return self.store.state()


def _settle_dead(state: dict[str, Any], grace: float = HOLD_GRACE) -> None:
    """Count the holds of processes that died at their worst case (what they may have been billed).

    Dead: a process of this host that is gone, or one that showed no sign of life (its hold, its
    beat) for ``grace`` seconds.
    """
    now, beats = time.time(), state.get("beats") or {}
    for key, hold in list(state["holds"].items()):
        worker = hold.get("worker")
        seen = max(float(hold.get("at") or now), float(beats.get(worker) or 0.0))
        if dead_local_worker(worker) or now - seen > grace:
            state["spent"] += float(hold["dollars"])
            del state["holds"][key]
    live = {h.get("worker") for h in state["holds"].values()}
    for worker in [w for w in beats if w not in live]:
        del beats[worker]


class _FileLock:
    """An exclusive ``flock`` on one file whose descriptor stays open (one open, mkdir and close less per use).

    ``flock`` belongs to the open description, so a forked child opens its own (an inherited one
    would share the parent's lock). Threads of one process take ``FileSpendStore._thread_lock`` first.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            if self._fd is not None:  # the parent's, inherited: closing this copy leaves the parent's lock alone
                os.close(self._fd)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd, self._pid = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644), os.getpid()
        return self._fd

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass


def tune_ledger(run_dir: Path, max_cost: float | None, *, restart: bool = False, spent: float = 0.0,
                storage: StorageSpec | None = None, study: str | None = None) -> CostLedger:
    """This process's ledger for a tune run: capped by the study's shared cap when ``max_cost`` is set.

    Every trial and test evaluation books into a child of it (``run_evaluation(..., ledger=)``).
    ``storage`` and ``study`` say where the cap lives (``spend_store``); without them, in the run directory.
    """
    if max_cost is None:
        return CostLedger()
    store = spend_store(run_dir, storage, study)
    return CostLedger(cap=SharedSpendCap(store, max_cost, restart=restart, spent=spent))


__all__ = ["SPEND_FILE", "FileSpendStore", "SharedSpendCap", "SpendStore", "SqlSpendStore", "spend_store", "tune_ledger"]
