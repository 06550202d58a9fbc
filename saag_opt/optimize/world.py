"""What an optimize process builds once: LMs on one ledger, the frozen base agent, the mechanism, the seed.

Also the TRAIN/VAL splits GEPA sees (TEST is loaded only by ``holdout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from saag_opt.errors import RunError
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.paths import base_predictions_dir
from saag_opt.saag.modes import INTERVENTION_GROUNDING, ModeName


@dataclass
class World:
    """Everything a rollout needs, built once per process."""

    ledger: Any
    agent: Any
    mechanism: Any
    mech_ctx: Any
    reviewer_lm: Any
    reflection_lm: Any
    store: Any
    seed: Any
    context: Any
    components: tuple[str, ...]
    saag_informed: bool = False
    """The reviewer also sees the gold-free SAAG report (``OptimizeConfig.saag_informed``)."""
    grounding: ModeName = INTERVENTION_GROUNDING
    """Stage-3 mode of that report and of the gate."""


def build_world(config: OptimizeConfig, ledger: Any = None) -> World:
    """Open the LMs (one ledger), the frozen base agent, the mechanism and the seed prompt.

    ``ledger``: the run's (capped) ledger; None = a new one.

    Raises:
        ModelUnavailableError: a model cannot be used (missing key points to ``--base local``).
        ArtifactError: the seed prompt reference does not resolve.
    """
    from saag_opt.agents.base import BaseAgent, BasePredictionCache
    from saag_opt.agents.mechanisms import MechanismContext, parse_mechanism
    from saag_opt.artifacts.store import PromptStore
    from saag_opt.lm import CostLedger, open_lm, parse_model_spec
    from saag_opt.lm.retry import call_options
    from saag_opt.optimize.program import RolloutContext

    ledger = ledger if ledger is not None else CostLedger()
    options = call_options(request_timeout=config.request_timeout)
    base_lm = open_lm(parse_model_spec(config.base), role="base", ledger=ledger, **options)  # fails fast (no key)
    reviewer_lm = open_lm(config.reviewer, role="reviewer", ledger=ledger, **options)
    reflection_lm = open_lm(config.reflection_spec, role="reflection", ledger=ledger, temperature=1.0,
                            max_tokens=config.reflection_max_tokens, **options)
    store = PromptStore(config.prompts_dir)
    seed = store.resolve(config.prompt)
    if not store.exists(seed.program, seed.version):  # a seed given as a file path: lineage needs it stored
        seed = store.adopt(config.prompt)
    mechanism = parse_mechanism(config.mechanism)
    agent = BaseAgent(base_lm, ledger=ledger)  # same LM settings (cache key) as the evaluation runner's agent
    mech_ctx = MechanismContext(cache=BasePredictionCache(directory=base_predictions_dir()),
                                on_unusable=config.on_unusable, grounding=config.grounding)
    context = RolloutContext(lambda ex, rev: mechanism.run(ex, agent, rev, ctx=mech_ctx), label=config.mechanism)
    return World(ledger, agent, mechanism, mech_ctx, reviewer_lm, reflection_lm, store, seed, context,
                 mechanism.components, config.saag_informed, config.grounding)


def build_reviewer(world: World, instructions: Mapping[str, str]) -> Any:
    """The reviewer evaluate would build for these options (``make_reviewer``), talking to the reviewer LM.

    GEPA copies it per candidate and changes only the instructions, so every rollout puts the same
    request in front of the reviewer as ``evaluate`` (``--saag-informed``: the SAAG report too).
    """
    from saag_opt.agents.reviewer import make_reviewer

    reviewer = make_reviewer(dict(instructions), saag_informed=world.saag_informed,
                             grounding=world.grounding)
    reviewer.set_lm(world.reviewer_lm)
    return reviewer


def load_splits(config: OptimizeConfig) -> tuple[list[Any], list[Any]]:
    """TRAIN and VAL examples (TEST is loaded only for the final comparison).

    Raises:
        RunError: a split is empty.
    """
    from saag_opt.data import load_dataset

    train = load_dataset(config.dataset, split="train", limit=config.train_limit)
    val = load_dataset(config.dataset, split="val", limit=config.val_limit)
    if not train or not val:
        raise RunError(f"dataset {config.dataset!r} has {len(train)} train and {len(val)} val examples; "
                       "GEPA needs both (lower --train-limit/--val-limit or use a larger dataset)")
    return train, val



__all__ = ["World", "build_reviewer", "build_world", "load_splits"]
