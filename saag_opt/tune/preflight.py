"""``tune --dry-run``: the calls, tokens and dollars a tune run is expected to spend, by role.

A pass is priced as evaluate prices it (``evaluate.run.KINDS``: single calls, conversations, tau2's
simulated user), and the passes are added up the way a tune run spends:

* the base agent's round-0 answers once, on the trial split (every trial shares them through the
  base-prediction cache; ``--processes N`` asks them once before the workers start);
* one evaluate pass per distinct configuration tried, base calls cached: ``--trials N`` (or the
  whole grid) trials, at most one per configuration (a repeat is answered from the stored result
  for free), each the mean pass over the space's configurations (ranges at their midpoint);
* the test re-evaluation: the base answers on test once, then ``FRONT_GUESS`` configurations of
  the front (its size is known only after the trials).
"""

from __future__ import annotations

from typing import Any

from saag_opt.data.workload import workload
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import KINDS
from saag_opt.evaluation.estimate import Estimate
from saag_opt.tune.run import DEFAULT_TPE_TRIALS, TuneConfig, check_inputs
from saag_opt.tune.space import Range, Space, load_space

FRONT_GUESS = 3
"""Configurations of the Pareto front assumed re-evaluated on test."""


def preflight_tune(config: TuneConfig) -> Estimate:
    """``--dry-run``: trials and the test re-evaluation, by role; reads the space and data, opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``run_tune`` would, before any work.
    """
    space = load_space(config.space, config.overrides)
    check_inputs(space)
    configs = [c for c in (_config(space, p) for p in _points(space)) if c is not None]
    if not configs:
        raise ConfigError(f"{space.source}: no configuration of the space is valid (see search.*)")
    trials = config.trials if config.trials is not None else (
        DEFAULT_TPE_TRIALS if config.sampler == "tpe" else len(configs))
    distinct = min(trials, len(configs))
    examples = _items(configs[0], configs[0].split, configs[0].limit)
    total = Estimate("tune", len(examples), assumptions=[
        f"{distinct} distinct configurations tried ({trials} trials over {len(configs)} configurations; a "
        "repeat is free), each the mean over the space", "the trials' base answers are paid once"])
    total.merge(_base_pass(configs[0], examples))
    total.merge(_mean_pass(configs, examples, distinct))
    if not config.no_test:
        limit = config.test_limit if config.test_limit is not None else configs[0].limit
        test = _items(configs[0], "test", limit)
        front = min(FRONT_GUESS, distinct)
        total.merge(_base_pass(configs[0], test))
        total.merge(_mean_pass(configs, test, front))
        total.examples += len(test)
        total.assumptions.append(f"a Pareto front of {front} configurations re-evaluated on {len(test)} test "
                                 "examples (its size is known only after the trials)")
    return total


def _points(space: Space) -> list[dict[str, Any]]:
    """Every configuration of the space; a range without a grid step stands at its midpoint."""
    points = space.grid_points()
    if points is not None:
        return points
    fixed = {k: _midpoint(d) for k, d in space.search.items() if isinstance(d, Range) and d.grid() is None}
    coarse = space.model_copy(update={"search": {k: d for k, d in space.search.items() if k not in fixed}})
    return [{**p, **fixed} for p in (coarse.grid_points() or [{}])]


def _midpoint(dim: Range) -> float | int:
    middle = (dim.low + dim.high) / 2
    return round(middle) if dim.integer else middle


def _config(space: Space, params: dict[str, Any]) -> EvaluateConfig | None:
    """The trial's configuration, or None for a combination a trial would refuse at no cost."""
    try:
        return space.config(params)
    except ConfigError:
        return None


def _items(config: EvaluateConfig, split: str | None, limit: int | None) -> list[Any]:
    """The examples (or, on a multi-turn dataset, the entries) a pass over ``split`` runs."""
    return list(workload(config.dataset).load(split=split, limit=limit))


def _base_pass(config: EvaluateConfig, examples: list[Any]) -> Estimate:
    setup = config.setup
    return KINDS[config.workload.kind].estimate(config, examples, reviewer=None, instructions={}, command="tune",
                                                mechanism=setup.replace(mechanism="none").mechanism)


def _mean_pass(configs: list[EvaluateConfig], examples: list[Any], times: int) -> Estimate:
    """``times`` passes of the mean configuration over ``examples``, base calls cached."""
    out = Estimate("tune", len(examples))
    for config in configs:
        setup = config.setup
        version = setup.prompt_version()
        one = KINDS[config.workload.kind].estimate(
            config, examples, reviewer=setup.reviewer, mechanism=setup.mechanism, base_cached=True, command="tune",
            instructions=dict(version.instructions) if version is not None else {})
        for role, part in one.roles.items():
            out.add(role, part.scaled(times / len(configs)))
        out.assume(*one.assumptions)
    return out


__all__ = ["FRONT_GUESS", "preflight_tune"]
