"""``optimize --dry-run``: what a run is expected to cost, by role, before any model is opened."""

from __future__ import annotations

from saag_opt.artifacts import PromptStore
from saag_opt.evaluation.estimate import Estimate, estimate_episodes, estimate_evaluation
from saag_opt.optimize.budget import estimate_run, resolve_metric_calls
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.optimize.world import load_split, load_splits


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
    total = estimate_run(config, seed.instructions, train + val, calls)  # GEPA's rollouts and reflection
    if config.evaluate_test:
        test = load_split(config, "test", config.test_limit)
        estimate = estimate_episodes if config.conversations else estimate_evaluation
        for cached in (False, True):  # seed, then best (its base calls are the seed pass's)
            total.merge(estimate(test, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                                 instructions=seed.instructions, base_cached=cached))
        total.examples += len(test)
    return total


__all__ = ["preflight_optimize"]
