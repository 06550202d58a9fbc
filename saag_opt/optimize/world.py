"""What an optimize process builds once: the opened review set-up, the reflection LM, the store, the splits.

The set-up is opened by ``agents.setup.open_setup``, the builder ``evaluate`` uses, so GEPA's
rollouts send the requests an evaluation of the same options sends (cache keys included). TEST
is loaded only by ``holdout``. The dataset's kind is resolved once (``OptimizeConfig.workload``) and
picks the run's ``rollouts.Work`` (single calls or conversations): the rollout, the metric, how the
rails read an item. Everything else of a run is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from saag_opt.agents.base import BasePredictionCache
from saag_opt.agents.setup import Condition, open_setup
from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.errors import RunError
from saag_opt.lm import CostLedger, SaagLM, open_lm, parse_model_spec
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.optimize.program import RolloutContext
from saag_opt.optimize.rollouts import Work, work_for
from saag_opt.paths import base_predictions_dir


@dataclass(frozen=True)
class World:
    """Everything a rollout needs, built once per process: the condition GEPA tunes and what GEPA adds."""

    condition: Condition
    """The seed's set-up, opened: agent, reviewer (seed instructions), mechanism, context."""
    reflection_lm: SaagLM
    store: PromptStore
    """Where the seed lives and each accepted candidate is saved."""
    context: RolloutContext
    """One rollout = ``work.rollout``'s with a candidate's reviewer (shared, never copied)."""
    ledger: CostLedger
    work: Work
    """What this kind of dataset plays, scores and reads (module docstring)."""

    @property
    def seed(self) -> PromptVersion:
        """The seed prompt version (in ``store``)."""
        seed = self.condition.prompt_version
        if seed is None:  # OptimizeConfig accepts only mechanisms that call the reviewer
            raise RunError("the optimize set-up has no reviewer prompt")
        return seed


def build_world(config: OptimizeConfig, ledger: CostLedger | None = None) -> World:
    """Open the set-up (base agent, reviewer on the seed, mechanism) and the reflection LM, on one ledger.

    ``ledger``: the run's (capped) ledger; None = a new one. A seed given as a file path is adopted
    into the store (its lineage needs it there).

    Raises:
        ModelUnavailableError: a model cannot be used (missing key points to ``--base local``).
        ArtifactError: the seed prompt reference does not resolve.
    """
    ledger = ledger if ledger is not None else CostLedger()
    setup = config.setup
    condition = open_setup(setup, ledger, BasePredictionCache(directory=base_predictions_dir()))
    store = PromptStore(setup.prompts_dir)
    seed = condition.prompt_version
    if seed is not None and not store.exists(seed.program, seed.version):
        condition = replace(condition, prompt_version=store.adopt(setup.prompt))
    reflection_lm = open_lm(parse_model_spec(config.reflection_spec), role="reflection", ledger=ledger,
                            temperature=1.0, max_tokens=config.reflection_max_tokens, **setup.call_options())
    work = work_for(config.workload)
    context = RolloutContext(work.rollout(condition), label=condition.mechanism.spec)
    return World(condition, reflection_lm, store, context, ledger, work)


def load_split(config: OptimizeConfig, split: str, limit: int | None) -> list[Any]:
    """One split's examples, or entries on a multi-turn dataset (split by entry, as ``evaluate`` splits them)."""
    return list(config.workload.load(split=split, limit=limit))


def load_splits(config: OptimizeConfig) -> tuple[list[Any], list[Any]]:
    """TRAIN and VAL examples or entries (TEST is loaded only for the final comparison).

    Raises:
        RunError: a split is empty.
    """
    train = load_split(config, "train", config.train_limit)
    val = load_split(config, "val", config.val_limit)
    if not train or not val:
        raise RunError(f"dataset {config.dataset!r} has {len(train)} train and {len(val)} val {config.workload.unit}; "
                       "GEPA needs both (lower --train-limit/--val-limit or use a larger dataset)")
    return train, val


__all__ = ["World", "build_world", "load_split", "load_splits"]
