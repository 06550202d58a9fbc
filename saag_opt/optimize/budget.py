"""GEPA budgets and the up-front cost estimate of its phase (the --max-cost stopper is ``callbacks.CostStopper``).

A GEPA *metric call* is one program rollout. Our rollouts never re-pay the base agent's first
answer (it is cached), so a rollout costs the reviewer's calls plus the base agent's revisions
after a rejection. Reflection calls are outside ``max_metric_calls`` entirely; dspy.GEPA cannot cap
them (``max_reflection_cost`` is refused), so ``--max-cost`` is our own ``SpendCap``, which every
LM call of every role (reflection and the test phase included) reserves under before it is sent.

The estimate is every verb's ``evaluation.estimate.Estimate``: GEPA's reviewer, base and reflection
calls as its roles, the rollout budget and the per-rollout rates as its assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from saag_opt.choices import BudgetName, values
from saag_opt.errors import ConfigError
from saag_opt.evaluation.estimate import (
    CHARS_PER_TOKEN,
    REPLY_TOKENS,
    Estimate,
    role_estimate,
)
from saag_opt.optimize.edits import EDIT_REPLY_TOKENS

if TYPE_CHECKING:
    from saag_opt.optimize.config import OptimizeConfig

AUTO_CANDIDATES: dict[BudgetName, int] = {"light": 6, "medium": 12, "heavy": 18}
"""dspy.GEPA's ``AUTO_RUN_SETTINGS`` (number of candidates each preset aims for)."""


def auto_metric_calls(budget: BudgetName, *, n_components: int, n_val: int) -> int:
    """dspy.GEPA's ``auto_budget`` formula, evaluated here so the estimate can be printed first."""
    import dspy  # noqa: PLC0415 - heavy: dspy; optimize.summary, a run reader, imports this

    if budget not in AUTO_CANDIDATES:
        raise ConfigError(f"budget: expected {', '.join(values(BudgetName))}, got {budget!r}")
    # auto_budget reads no instance state; calling it unbound avoids building a GEPA object.
    return int(dspy.GEPA.auto_budget(None, num_preds=max(n_components, 1),  # type: ignore[arg-type]
                                     num_candidates=AUTO_CANDIDATES[budget], valset_size=n_val))


def minimum_metric_calls(n_val: int, minibatch: int) -> int:
    """Fewest rollouts that can produce one candidate: seed val eval + one minibatch pair + a val eval."""
    return 2 * n_val + 2 * minibatch


def resolve_metric_calls(budget: BudgetName | None, max_metric_calls: int | None, *, n_components: int,
                         n_val: int, minibatch: int) -> int:
    """Turn ``--budget`` / ``--max-metric-calls`` into a cumulative rollout cap.

    Raises:
        ConfigError: both or neither given, or a cap too small to try a single candidate.
    """
    if (budget is None) == (max_metric_calls is None):
        raise ConfigError(f"budget: give exactly one of --budget ({'|'.join(values(BudgetName))}) or --max-metric-calls")
    calls = max_metric_calls if max_metric_calls is not None else \
        auto_metric_calls(budget, n_components=n_components, n_val=n_val)  # type: ignore[arg-type]
    floor = minimum_metric_calls(n_val, minibatch)
    if calls < floor:
        raise ConfigError(f"max_metric_calls: {calls} rollouts cannot test a single candidate with {n_val} val "
                          f"examples and minibatch {minibatch}; use at least {floor} (2*val + 2*minibatch)")
    return calls


def estimate_gepa(*, rollouts: int, reviews_per_rollout: float, revisions_per_rollout: float,
                  review_tokens: tuple[float, float], base_tokens: tuple[float, float],
                  reflection_tokens: tuple[float, float], minibatch: int, reviewer: str, base: str, reflection: str,
                  examples: int = 0, base_note: str = "base first answers cached") -> Estimate:
    """Rollouts x reviewer/base calls x tokens x price, plus one reflection call per iteration.

    An iteration spends about ``2 * minibatch`` rollouts (parent and child on the same minibatch),
    so reflection calls are ``rollouts / (2 * minibatch)``, doubled for a possible ``max_chars``
    compression call (a rewrite) or a second request (an edit). Token sizes are (prompt, reply) per
    call; a reasoning reviewer or base model adds ``THINKING_TOKENS`` a reply (``role_estimate``).
    ``examples``: the train and val examples the rollouts draw on. ``base_note``: what the
    base-agent count assumes (said in the assumptions).
    """
    est = Estimate("optimize", examples, assumptions=[
        f"{rollouts} rollouts on train/val; {reviews_per_rollout:.2f} reviews and {revisions_per_rollout:.2f} base "
        f"revisions per rollout; {base_note}; reflection calls not capped by max_metric_calls"])
    for role, model, calls, (prompt, reply) in (
            ("reviewer", reviewer, math.ceil(rollouts * reviews_per_rollout), review_tokens),
            ("base", base, math.ceil(rollouts * revisions_per_rollout), base_tokens),
            ("reflection", reflection, 2 * math.ceil(rollouts / max(1, 2 * minibatch)), reflection_tokens)):
        est.add(role, role_estimate(model, role, calls, prompt, reply))
    return est


class RolloutSize(NamedTuple):
    """What one rollout of a kind of work asks, on average (``rollouts.Work.rollout_size``)."""

    reviews: float
    """Reviewer calls."""
    revisions: float
    """Base-agent calls (revisions; on a conversation every step's proposal too)."""
    prompt: float
    """Tokens of one reviewed prompt (the item, without the instructions)."""
    feedback: float
    """Tokens of the feedback one reflected item adds."""
    base_note: str
    """How the base agent's calls are counted, for the estimate's assumptions."""


def estimate_run(config: OptimizeConfig, seed_instructions: Mapping[str, str], examples: Sequence[Any],
                 rollouts: int, size: RolloutSize) -> Estimate:
    """Up-front estimate of the GEPA phase from the examples' prompt sizes and the models' prices.

    ``size``: what one rollout asks, from the run's kind of work (``rollouts.Work.rollout_size``: on a
    multi-turn dataset a rollout is one reviewed conversation). Needs no open model: ``--dry-run`` calls it too.
    """
    reviews, revisions, prompt, feedback, base_note = size
    instr = sum(len(t) for t in seed_instructions.values()) / CHARS_PER_TOKEN

    reflect_in = config.minibatch * (prompt + feedback + 400) + instr + 600
    # a rewrite may fill max_chars (and its compression retry); an edit is one rule of JSON (and one retry)
    reflect_out = (config.max_chars / CHARS_PER_TOKEN + 2000 if config.proposer == "rewrite"
                   else float(EDIT_REPLY_TOKENS))
    return estimate_gepa(rollouts=rollouts, reviews_per_rollout=reviews, revisions_per_rollout=revisions,
                         review_tokens=(prompt + instr + 250, REPLY_TOKENS["reviewer"]),
                         base_tokens=(prompt + 200, REPLY_TOKENS["base"]), reflection_tokens=(reflect_in, reflect_out),
                         minibatch=config.minibatch, reviewer=config.reviewer_spec, base=config.setup.base,
                         reflection=config.reflection_spec, examples=len(examples), base_note=base_note)


__all__ = ["AUTO_CANDIDATES", "RolloutSize", "auto_metric_calls", "estimate_gepa",
           "estimate_run", "minimum_metric_calls", "resolve_metric_calls"]
