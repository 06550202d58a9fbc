"""Entry point of one local worker process: ``python -m saag_opt.tune.worker`` (job in the env).

Started by ``Supervisor``; a worker on another machine runs ``saag-opt tune --storage URL --study
NAME`` instead, which ends in the same ``run_trials``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import optuna

from saag_opt.errors import SaagOptError
from saag_opt.tune.space import load_space
from saag_opt.tune.storage import open_storage, parse_storage
from saag_opt.tune.study import TuneSettings, open_study, run_trials
from saag_opt.tune.workers import WORKER_ENV, WorkerJob


def main() -> int:
    """Join the study and run trials until the budget is spent; a user error is one line, exit 2."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    job = WorkerJob.from_env(os.environ[WORKER_ENV])
    try:
        space = load_space(job.space_path, job.overrides)
        settings = TuneSettings(**job.settings)
        storage = parse_storage(job.storage)
        study, _ = open_study(space, open_storage(storage, heartbeat=settings.heartbeat), job.study, settings,
                              create=False, seed_offset=job.seed_offset)
        run_trials(study, space, settings, storage, Path(job.trials_dir))
    except SaagOptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
