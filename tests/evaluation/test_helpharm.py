"""Help/harm counts, conditional rates, McNemar exact p and the paired bootstrap CI."""

from __future__ import annotations

import json
import math
import random
import time

import pytest
from pydantic import BaseModel

from saag_opt.evaluation.helpharm import HelpHarm, _binomial, bootstrap_net_change_ci, bootstrap_rate_ci, mcnemar_exact


def _pairs(both_right: int, fixed: int, broken: int, both_wrong: int) -> list[tuple[bool, bool]]:
    return ([(True, True)] * both_right + [(False, True)] * fixed + [(True, False)] * broken
            + [(False, False)] * both_wrong)


def test_counts_and_conditional_rates() -> None:
    hh = HelpHarm.from_pairs(_pairs(80, 10, 2, 8))
    assert (hh.both_right, hh.fixed, hh.broken, hh.both_wrong, hh.n) == (80, 10, 2, 8, 100)
    assert hh.helpfulness == pytest.approx(10 / 18)   # fixed / base wrong
    assert hh.harmfulness == pytest.approx(2 / 82)    # broken / base right
    assert hh.ratio == pytest.approx((10 / 18) / (2 / 82))
    assert hh.base_accuracy == pytest.approx(0.82)
    assert hh.final_accuracy == pytest.approx(0.90)
    assert hh.net_change == pytest.approx(0.08)


def test_ratio_inf_when_no_harm_and_none_when_nothing_happens() -> None:
    assert HelpHarm.from_counts(5, 3, 0, 2).ratio == math.inf
    assert HelpHarm.from_counts(5, 0, 0, 2).ratio is None
    assert HelpHarm.from_counts(5, 0, 0, 2).to_dict()["ratio"] is None
    assert HelpHarm.from_counts(5, 3, 0, 2).to_dict()["ratio"] == "inf"


def test_rates_undefined_without_denominator() -> None:
    all_right = HelpHarm.from_counts(4, 0, 0, 0)
    assert all_right.helpfulness is None and all_right.harmfulness == 0.0
    empty = HelpHarm.from_pairs([])
    assert empty.n == 0 and empty.net_change is None and empty.ci_low is None and empty.p_value == 1.0


@pytest.mark.parametrize(("fixed", "broken", "expected"), [
    # scipy.stats.binomtest(2, 12, 0.5).pvalue = 2 * (1 + 12 + 66) / 4096 = 0.0385742...
    (10, 2, 0.03857421875),
    (2, 10, 0.03857421875),
    # binomtest(0, 6).pvalue = 2 / 64
    (6, 0, 0.03125),
    # binomtest(5, 25).pvalue = 2 * (1+25+300+2300+12650+53130) / 2**25 = 0.00407731...
    (20, 5, 2 * 68406 / 2**25),
    # symmetric table: the doubled tail exceeds 1 and is capped
    (5, 5, 1.0),
    (0, 0, 1.0),
    (1, 0, 1.0),
])
def test_mcnemar_exact_known_values(fixed: int, broken: int, expected: float) -> None:
    assert mcnemar_exact(fixed, broken) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="counts must be >= 0"):
        mcnemar_exact(-1, 3)


def test_bootstrap_ci_is_seeded_and_brackets_the_estimate() -> None:
    a = bootstrap_net_change_ci(80, 10, 2, 8, seed=7)
    b = bootstrap_net_change_ci(80, 10, 2, 8, seed=7)
    assert a == b
    assert a is not None
    lo, hi = a
    assert lo < 0.08 < hi
    # Normal approximation: se = sqrt((pf + pb - (pf - pb)^2) / n) = 0.0337 -> 0.08 +- 0.066.
    assert lo == pytest.approx(0.08 - 1.96 * 0.0337, abs=0.02)
    assert hi == pytest.approx(0.08 + 1.96 * 0.0337, abs=0.02)


def test_bootstrap_ci_degenerate_when_no_discordant_pairs() -> None:
    assert bootstrap_net_change_ci(50, 0, 0, 50) == (0.0, 0.0)
    assert bootstrap_net_change_ci(0, 0, 0, 0) is None


def test_bootstrap_ci_negative_when_reviewer_harms() -> None:
    hh = HelpHarm.from_counts(60, 1, 20, 19, seed=3)
    assert hh.ci_high is not None and hh.ci_high < 0
    assert hh.p_value < 0.001


def test_binomial_sampler_has_the_right_moments() -> None:
    rng = random.Random(1)
    draws = [_binomial(rng, 40, 0.3) for _ in range(4000)]
    mean = sum(draws) / len(draws)
    var = sum((d - mean) ** 2 for d in draws) / len(draws)
    assert mean == pytest.approx(12.0, abs=0.25)
    assert var == pytest.approx(8.4, rel=0.1)
    assert all(0 <= d <= 40 for d in draws)
    assert _binomial(rng, 10, 0.0) == 0 and _binomial(rng, 10, 1.0) == 10


def test_bootstrap_is_fast_on_large_tables() -> None:
    start = time.perf_counter()
    bootstrap_net_change_ci(8000, 900, 300, 800)
    assert time.perf_counter() - start < 5.0


def test_bootstrap_rate_ci_brackets_the_rate_and_narrows_with_n() -> None:
    small = bootstrap_rate_ci(3, 10, seed=1)
    large = bootstrap_rate_ci(300, 1000, seed=1)
    assert small is not None and large is not None
    assert small[0] <= 0.3 <= small[1] and large[0] <= 0.3 <= large[1]
    assert large[1] - large[0] < small[1] - small[0]
    assert bootstrap_rate_ci(0, 0) is None
    assert bootstrap_rate_ci(5, 5) == (1.0, 1.0)
    with pytest.raises(ValueError, match="successes <= n"):
        bootstrap_rate_ci(6, 5)


def test_help_harm_is_a_model_whose_json_is_the_old_dict_and_reads_back() -> None:
    """``help_harm`` was a ``dict`` in three summary models; the bytes on disk stay ``to_dict``'s."""
    class Holder(BaseModel):
        help_harm: HelpHarm

    hh = HelpHarm.from_counts(5, 3, 0, 2, seed=1)
    held = Holder(help_harm=hh)
    assert held.model_dump(mode="json")["help_harm"] == hh.to_dict()
    assert list(json.loads(held.model_dump_json())["help_harm"]) == list(hh.to_dict())  # same keys, same order
    assert Holder.model_validate_json(held.model_dump_json()).help_harm == hh  # "inf" ratio included
    assert hh.net_change_ci95 == (hh.ci_low, hh.ci_high) and HelpHarm.from_pairs([]).net_change_ci95 is None
