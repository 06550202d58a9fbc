"""Budgets, the cost estimate and the --max-cost stopper."""

from __future__ import annotations

import pytest

from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.evaluation.estimate import THINKING_TOKENS, Estimate
from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.optimize.budget import (
    auto_metric_calls,
    estimate_gepa,
    resolve_metric_calls,
)
from saag_opt.optimize.callbacks import CostStopper


def test_auto_budget_matches_dspy_table() -> None:
    assert auto_metric_calls("light", n_components=1, n_val=10) == 420
    assert auto_metric_calls("medium", n_components=1, n_val=30) == 840


def test_resolve_requires_exactly_one_budget() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_metric_calls("light", 100, n_components=1, n_val=4, minibatch=3)
    with pytest.raises(ConfigError, match="use at least 14"):
        resolve_metric_calls(None, 13, n_components=1, n_val=4, minibatch=3)
    assert resolve_metric_calls(None, 14, n_components=1, n_val=4, minibatch=3) == 14


PRICES = {"gpt-4o-mini": ModelPrice(0.25e-6, 2e-6, 0.25e-6), "gpt-4o": ModelPrice(2.5e-6, 10e-6, 2.5e-6),
          "gpt-5-mini": ModelPrice(0.25e-6, 2e-6, 0.25e-6)}


def _gepa(base: str = "gpt-4o") -> Estimate:
    return estimate_gepa(rollouts=60, reviews_per_rollout=1.5, revisions_per_rollout=0.75,
                         review_tokens=(1000, 100), base_tokens=(800, 50), reflection_tokens=(3000, 1000),
                         minibatch=3, reviewer="gpt-4o-mini", base=base, reflection="gpt-4o-mini", examples=30)


def test_estimate_counts_reflection_and_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICES.get(spec.model))
    est = _gepa()
    assert {r: v.calls for r, v in est.roles.items()} == {"reviewer": 90, "base": 45, "reflection": 20}
    expected = (90 * 1000 * 0.25 + 90 * 100 * 2 + 45 * 800 * 2.5 + 45 * 50 * 10 + 20 * 3000 * 0.25
                + 20 * 1000 * 2) / 1e6
    assert est.total.dollars == pytest.approx(expected, abs=1e-9) and est.total.calls == 155
    assert est.roles["base"].model == "gpt-4o" and est.examples == 30
    assert est.assumptions[0].startswith("60 rollouts on train/val; 1.50 reviews and 0.75 base revisions per rollout")


def test_gepa_prices_a_reasoning_base_models_thinking_as_evaluate_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reasoning base model thinks before each revision in GEPA's rollouts too (the reflection never does)."""
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICES.get(spec.model))
    plain, reasoning = _gepa("gpt-4o").roles, _gepa("gpt-5-mini").roles
    assert reasoning["base"].completion_tokens == plain["base"].completion_tokens + 45 * THINKING_TOKENS
    assert reasoning["reflection"] == plain["reflection"]


def test_a_model_without_a_known_price_is_unknown_not_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICES.get(spec.model))
    est = _gepa("gpt-9-unlisted")
    assert est.roles["base"].dollars is None and est.total.dollars is None
    assert est.roles["reviewer"].dollars is not None and est.to_dict()["roles"]["total"]["dollars"] is None
    assert "unknown dollars" in est.headline()


def test_cost_stopper_ends_gepa_once_the_cap_refused_a_call() -> None:
    cap = SpendCap(1.0)
    stops: list[str] = []
    stopper = CostStopper(cap, on_stop=stops.append)
    cap.reserve(0.6).settle(0.6)
    assert not stopper(None)  # spend alone is no reason to stop: only a refused call is
    with pytest.raises(CostCapReached):
        cap.reserve(0.5)
    assert stopper(None) and stopper(None) and len(stops) == 1 and "--max-cost $1 reached" in stops[0]


def test_spend_cap_rejects_non_positive_cap() -> None:
    with pytest.raises(ConfigError, match="max_cost: must be > 0"):
        SpendCap(0)


def test_an_edit_proposer_is_estimated_at_one_rule_of_json_a_reply() -> None:
    from saag_opt.optimize.budget import estimate_run  # noqa: PLC0415
    from saag_opt.optimize.calls import CALLS  # noqa: PLC0415
    from saag_opt.optimize.config import OptimizeConfig  # noqa: PLC0415
    from saag_opt.optimize.edits import EDIT_REPLY_TOKENS  # noqa: PLC0415
    from tests.optimize.optimize_world import make_examples  # noqa: PLC0415

    examples = make_examples(6, "train")
    per_call = {}
    for proposer in ("add", "rewrite"):
        config = OptimizeConfig(base="local", reviewer="local", proposer=proposer, max_metric_calls=12)
        size = CALLS.rollout_size(examples, *config.setup.mechanism.calls_per_example())
        numbers = estimate_run(config, {"review": "Review the calls."}, examples, 12, size).roles["reflection"]
        per_call[proposer] = numbers.completion_tokens / numbers.calls
    assert per_call["add"] == EDIT_REPLY_TOKENS and per_call["rewrite"] > 10 * EDIT_REPLY_TOKENS
