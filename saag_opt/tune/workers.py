"""``--processes N``: N local worker processes on one study, supervised by the parent.

Each worker is ``python -m saag_opt.tune.worker``: it joins the study through the storage (a journal
file or PostgreSQL) exactly as a worker on another machine would, so there is one distributed
mode, optuna's. The parent only supervises: a worker killed by a signal has its RUNNING trial failed
and re-enqueued (``recover_dead_workers``) and is replaced; a worker that exits with an error is
not replaced (the same error would repeat) and the run fails with its log tail once the others end.

With an embedded model the workers share the parent's llama.cpp server (its URL goes to them in
``SAAG_OPT_LOCAL_URL``): two servers on 2 cores make every call about 10x slower, and a single server
answering one request at a time is what the hardware can do anyway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saag_opt.errors import ConfigError, RunError
from saag_opt.lm import local_base_url, parse_model_spec
from saag_opt.tune.space import Space
from saag_opt.tune.storage import StorageSpec, recover_dead_workers
from saag_opt.tune.study import TuneSettings, budget_left

WORKER_ENV = "SAAG_OPT_TUNE_WORKER"
"""Environment variable carrying a worker's job (JSON); keeps database passwords off the command line."""
SHARED_LOCAL_ENV = "SAAG_OPT_LOCAL_SHARED"
"""Set with ``SAAG_OPT_LOCAL_URL`` when that URL is the parent's own embedded server (same weights)."""


@dataclass(frozen=True)
class WorkerJob:
    """What a worker process needs to join the study."""

    space_path: str
    overrides: dict[str, Any]
    storage: str
    study: str
    trials_dir: str
    settings: dict[str, Any]
    seed_offset: int

    def to_env(self) -> str:
        """The job as JSON for ``WORKER_ENV``."""
        return json.dumps(self.__dict__)

    @classmethod
    def from_env(cls, text: str) -> WorkerJob:
        """Parse ``to_env``'s JSON."""
        return cls(**json.loads(text))


def local_model_names(space: Space) -> set[str]:
    """Embedded models any trial may use (fixed or searched base/reviewer)."""
    specs: list[Any] = []
    for key in ("base", "reviewer"):
        if key in space.fixed:
            specs.append(space.fixed[key])
        dim = space.search.get(key)
        if isinstance(dim, list):
            specs.extend(dim)
    return {parse_model_spec(s).model for s in specs if s is not None and parse_model_spec(s).kind == "local"}


def shared_model_env(space: Space) -> dict[str, str]:
    """Start the one embedded server the workers share (if any model is local) and return its env.

    Raises:
        ConfigError: two different embedded models with several workers (one server at a time).
        ModelUnavailableError: the server cannot start.
    """
    if os.environ.get("SAAG_OPT_LOCAL_URL"):
        return {}
    names = local_model_names(space)
    if not names:
        return {}
    if len(names) > 1:
        raise ConfigError(f"--processes: the space uses {len(names)} embedded models ({', '.join(sorted(names))}); "
                          "local workers share one llama.cpp server, so pick one or use --processes 1")

    return {"SAAG_OPT_LOCAL_URL": local_base_url(next(iter(names))), SHARED_LOCAL_ENV: "1"}


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    log_path: Path


@dataclass
class Supervisor:
    """Starts, watches and replaces local worker processes."""

    job: WorkerJob
    count: int
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    max_replacements: int | None = None
    replaced: int = 0
    failures: list[str] = field(default_factory=list)

    def _spawn(self, index: int, seed_offset: int) -> _Worker:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{index}.log"
        job = WorkerJob(**{**self.job.__dict__, "seed_offset": seed_offset})
        env = {**os.environ, **self.env, WORKER_ENV: job.to_env()}
        with open(log_path, "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "saag_opt.tune.worker"], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        return _Worker(index, process, log_path)

    def run(self, study: Any, space: Space, settings: TuneSettings, storage: StorageSpec,
            on_poll: Callable[[], None] | None = None) -> None:
        """Run until every worker has exited.

        Raises:
            RunError: a worker exited with an error (its log tail is in the message).
        """
        limit = self.max_replacements if self.max_replacements is not None else 2 * self.count
        workers = {i: self._spawn(i, i) for i in range(self.count)}
        next_offset = self.count
        try:
            while workers:
                for index, worker in list(workers.items()):
                    code = worker.process.poll()
                    if code is None:
                        continue
                    del workers[index]
                    if code == 0:
                        continue
                    if code < 0 and storage.kind != "rdb":
                        recover_dead_workers(study)
                    if code < 0 and self.replaced < limit and budget_left(study, space, settings):
                        self.replaced += 1
                        workers[index] = self._spawn(index, next_offset)
                        next_offset += 1
                    elif code > 0:
                        self.failures.append(f"worker {index} exited with code {code}; {worker.log_path}:\n"
                                             f"{_tail(worker.log_path)}")
                if on_poll is not None:
                    on_poll()
                time.sleep(0.2)
        finally:
            for worker in workers.values():
                _stop(worker.process)
        if self.failures:
            raise RunError(self.failures[0])


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate a worker we started (on Ctrl-C or an error in the parent)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


__all__ = ["SHARED_LOCAL_ENV", "WORKER_ENV", "Supervisor", "WorkerJob", "local_model_names", "shared_model_env"]
