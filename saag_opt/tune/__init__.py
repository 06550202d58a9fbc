"""``saag-opt tune``: optuna over reviewer configurations, from one process to many machines.

``space`` reads SPACE.toml, ``study`` holds the objective and samplers, ``storage`` the storage
ladder (sqlite, journal file, PostgreSQL), ``workers`` the local worker processes, ``results`` the
trials file, Pareto set and test re-evaluation, ``spend`` the ``--max-cost`` cap every process of a
run shares, ``preflight`` the ``--dry-run`` estimate, ``run`` ties them together.
"""

from saag_opt.tune.results import TestResult, TrialRow, TuneSummary
from saag_opt.tune.run import TuneConfig, TuneOutcome, run_tune
from saag_opt.tune.space import METRICS, Range, Space, load_space, parse_space
from saag_opt.tune.storage import StorageSpec, parse_storage
from saag_opt.tune.study import TuneSettings, trial_metrics

__all__ = [
    "METRICS",
    "Range",
    "Space",
    "StorageSpec",
    "TestResult",
    "TrialRow",
    "TuneConfig",
    "TuneOutcome",
    "TuneSettings",
    "TuneSummary",
    "load_space",
    "parse_space",
    "parse_storage",
    "run_tune",
    "trial_metrics",
]
