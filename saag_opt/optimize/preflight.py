"""``optimize --dry-run``: what a run is expected to cost, by role, before any model is opened."""

from __future__ import annotations

from saag_opt.artifacts import PromptStore
from saag_opt.evaluate.run import preflight_passes
from saag_opt.evaluation.estimate import Estimate
from saag_opt.optimize.budget import estimate_run, resolve_metric_calls
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.optimize.holdout import holdout_settings
from saag_opt.optimize.rollouts import work_for
from saag_opt.optimize.world import load_splits


def preflight_optimize(config: OptimizeConfig) -> Estimate:
    """``--dry-run``: GEPA's rollouts and reflection plus the seed-vs-best test phase, by role.

    Loads the splits and the seed prompt, opens no model.

    Raises:
        ConfigError, ArtifactError, DatasetError, RunError: as ``run_optimize`` would, before any work.
    """
    setup = config.setup
    seed = PromptStore(setup.prompts_dir).resolve(setup.prompt)
    train, val = load_splits(config)
    calls = resolve_metric_calls(config.budget_name, config.max_metric_calls,
                                 n_components=len(config.components), n_val=len(val),
                                 minibatch=config.minibatch)
    size = work_for(config.workload).rollout_size(train + val, *setup.mechanism.calls_per_example())
    total = estimate_run(config, seed.instructions, train + val, calls, size)  # GEPA's rollouts and reflection
    if config.evaluate_test:  # the seed-vs-best compare, priced as compare prices it (best's words: the seed's)
        test = preflight_passes(holdout_settings(config, setup.prompt), [setup.prompt, setup.prompt])
        total.merge(test)
        total.examples += test.examples
    return total


__all__ = ["preflight_optimize"]
