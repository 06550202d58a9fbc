"""GEPA budgets and the up-front cost estimate (the --max-cost stopper is ``callbacks.CostStopper``).

A GEPA *metric call* is one program rollout. Our rollouts never re-pay the base agent's first
answer (it is cached), so a rollout costs the reviewer's calls plus the base agent's revisions
after a rejection. Reflection calls are outside ``max_metric_calls`` entirely; dspy.GEPA cannot cap
them (``max_reflection_cost`` is refused), so ``--max-cost`` is our own ``SpendCap``, which every
LM call of every role (reflection and the test phase included) reserves under before it is sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from saag_opt.choices import BudgetName, values
from saag_opt.errors import ConfigError
from saag_opt.lm import is_reasoning_model, parse_model_spec, price_call
from saag_opt.optimize.edits import EDIT_REPLY_TOKENS

if TYPE_CHECKING:
    from saag_opt.optimize.config import OptimizeConfig

AUTO_CANDIDATES: dict[BudgetName, int] = {"light": 6, "medium": 12, "heavy": 18}
"""dspy.GEPA's ``AUTO_RUN_SETTINGS`` (number of candidates each preset aims for)."""


FEEDBACK_CHARS_PER_STEP = 250
"""Assumed characters of a conversation's feedback per step (proposal, verdict, result: ``episode_feedback``)."""


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


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M tokens (0 for local or unknown models)."""

    input: float = 0.0
    output: float = 0.0

    def dollars(self, tokens_in: float, tokens_out: float) -> float:
        """Cost of a token count."""
        return (tokens_in * self.input + tokens_out * self.output) / 1e6


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a run is expected to spend, printed before it starts (an estimate, not a bound)."""

    rollouts: int
    reviewer_calls: int
    base_calls: int
    reflection_calls: int
    lm_calls: int
    tokens: int
    dollars: float
    assumptions: str
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per role (reviewer, base, reflection): calls, prompt and completion tokens, dollars."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly copy."""
        return asdict(self)


def estimate_cost(*, rollouts: int, reviews_per_rollout: float, revisions_per_rollout: float,
                  review_tokens: tuple[float, float], base_tokens: tuple[float, float],
                  reflection_tokens: tuple[float, float], minibatch: int, reviewer_price: Price,
                  base_price: Price, reflection_price: Price, base_note: str = "base first answers cached"
                  ) -> CostEstimate:
    """Rollouts x reviewer/base calls x tokens x price, plus one reflection call per iteration.

    An iteration spends about ``2 * minibatch`` rollouts (parent and child on the same minibatch),
    so reflection calls are ``rollouts / (2 * minibatch)``, doubled for a possible ``max_chars``
    compression call (a rewrite) or a second request (an edit). ``base_note``: what the base-agent count
    assumes (the assumptions line).
    """
    reviewer_calls = math.ceil(rollouts * reviews_per_rollout)
    base_calls = math.ceil(rollouts * revisions_per_rollout)
    reflection_calls = 2 * math.ceil(rollouts / max(1, 2 * minibatch))
    roles = {role: {"calls": calls, "prompt_tokens": int(calls * size[0]), "completion_tokens": int(calls * size[1]),
                    "dollars": round(price.dollars(calls * size[0], calls * size[1]), 4)}
             for role, calls, size, price in (("reviewer", reviewer_calls, review_tokens, reviewer_price),
                                              ("base", base_calls, base_tokens, base_price),
                                              ("reflection", reflection_calls, reflection_tokens, reflection_price))}
    dollars = (reviewer_price.dollars(reviewer_calls * review_tokens[0], reviewer_calls * review_tokens[1])
               + base_price.dollars(base_calls * base_tokens[0], base_calls * base_tokens[1])
               + reflection_price.dollars(reflection_calls * reflection_tokens[0],
                                          reflection_calls * reflection_tokens[1]))
    tokens = int(reviewer_calls * sum(review_tokens) + base_calls * sum(base_tokens)
                 + reflection_calls * sum(reflection_tokens))
    note = (f"{reviews_per_rollout:.2f} reviews and {revisions_per_rollout:.2f} base revisions per rollout; "
            f"{base_note}; reflection calls not capped by max_metric_calls")
    return CostEstimate(rollouts=rollouts, reviewer_calls=reviewer_calls, base_calls=base_calls,
                        reflection_calls=reflection_calls, lm_calls=reviewer_calls + base_calls + reflection_calls,
                        tokens=tokens, dollars=round(dollars, 4), assumptions=note, roles=roles)


def estimate_run(config: OptimizeConfig, seed_instructions: Mapping[str, str], examples: Sequence[Any],
                 rollouts: int) -> CostEstimate:
    """Up-front estimate of the GEPA phase from the examples' prompt sizes and the models' prices.

    On a multi-turn dataset a rollout is one reviewed conversation: a review per step (the steps
    and each step's prompt measured from the entries, ``evaluation.estimate.episode_step_sizes``),
    every step's proposal counted uncached (the run leaves the cached base run at its first change),
    and the reflection reads a conversation's feedback per minibatch entry. Needs no open model:
    ``--dry-run`` calls it too.
    """
    from saag_opt.evaluation.estimate import (  # noqa: PLC0415 - heavy: dspy; optimize.summary, a run reader, imports this
        CHARS_PER_TOKEN,
        THINKING_TOKENS,
        episode_step_sizes,
        prompt_tokens,
    )

    reviews, revisions = config.setup.mechanism.calls_per_example()
    if config.conversations:
        steps, chars = episode_step_sizes(examples, sample_size=20)
        prompt = chars / CHARS_PER_TOKEN
        reviews, revisions = steps * reviews, steps * (1.0 + revisions)
        feedback = steps * FEEDBACK_CHARS_PER_STEP / CHARS_PER_TOKEN
        base_note = f"one reviewed conversation of {steps:.1f} steps per rollout, every proposal counted uncached"
    else:
        prompt, feedback = prompt_tokens(examples, sample_size=20), 0.0
        base_note = "base first answers cached"
    instr = sum(len(t) for t in seed_instructions.values()) / CHARS_PER_TOKEN

    def price(text: str) -> Price:
        model = parse_model_spec(text)
        per_in, per_out = price_call(model, 1_000_000, 0), price_call(model, 0, 1_000_000)
        return Price(per_in or 0.0, per_out or 0.0)

    think = THINKING_TOKENS if is_reasoning_model(parse_model_spec(config.reviewer_spec)) else 0
    reflect_in = config.minibatch * (prompt + feedback + 400) + instr + 600
    # a rewrite may fill max_chars (and its compression retry); an edit is one rule of JSON (and one retry)
    reflect_out = (config.max_chars / CHARS_PER_TOKEN + 2000 if config.proposer == "rewrite"
                   else float(EDIT_REPLY_TOKENS))
    return estimate_cost(rollouts=rollouts, reviews_per_rollout=reviews, revisions_per_rollout=revisions,
                         review_tokens=(prompt + instr + 250, 120 + think), base_tokens=(prompt + 200, 60),
                         reflection_tokens=(reflect_in, reflect_out), minibatch=config.minibatch,
                         reviewer_price=price(config.reviewer_spec), base_price=price(config.setup.base),
                         reflection_price=price(config.reflection_spec), base_note=base_note)


__all__ = ["AUTO_CANDIDATES", "FEEDBACK_CHARS_PER_STEP", "CostEstimate", "Price", "auto_metric_calls",
           "estimate_cost", "estimate_run", "minimum_metric_calls", "resolve_metric_calls"]
