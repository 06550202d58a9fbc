"""Help / harm statistics for a reviewer (Reinforced Agent paper §4.1; docs/design.md §6).

Pure: no LM, no I/O (``HelpHarm`` is a pydantic model so that summaries hold it typed). Every number
comes from the paired 2x2 table of (base correct, final correct) per example. The rates are
*conditional* (helpfulness over the base agent's errors, harmfulness over its correct answers)
because that is the only reading consistent with the paper's numbers (docs/design.md §6).
McNemar's exact test and the bootstrap interval both use only the discordant pairs / the four cell
counts, so they are cheap for any dataset size.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_serializer, model_validator

BOOTSTRAP_RESAMPLES = 2000
"""Default number of paired bootstrap resamples for the net-change interval."""


def mcnemar_exact(fixed: int, broken: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of ``fixed`` vs ``broken`` at p = 0.5.

    Raises:
        ValueError: if a count is negative.
    """
    if fixed < 0 or broken < 0:
        raise ValueError(f"counts must be >= 0, got fixed={fixed}, broken={broken}")
    n = fixed + broken
    if n == 0:
        return 1.0
    k = min(fixed, broken)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def _binomial(rng: random.Random, n: int, p: float) -> int:
    """Binomial draw by inversion from the pmf (exact; O(n) worst case, no numpy needed)."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - _binomial(rng, n, 1.0 - p)
    u = rng.random()
    q = 1.0 - p
    pmf = q**n
    if pmf == 0.0:  # underflow for large n: normal approximation is accurate there
        return max(0, min(n, round(rng.gauss(n * p, math.sqrt(n * p * q)))))
    cdf, k = pmf, 0
    while u > cdf and k < n:
        pmf *= (n - k) / (k + 1) * (p / q)
        k += 1
        cdf += pmf
    return k


def bootstrap_net_change_ci(
    both_right: int, fixed: int, broken: int, both_wrong: int, *,
    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile CI of the net accuracy change under paired (per-example) resampling.

    Resampling n examples with replacement is a multinomial draw over the four cells; only the
    fixed and broken counts matter, so each resample is two binomial draws. None when n = 0.
    """
    n = both_right + fixed + broken + both_wrong
    if n == 0:
        return None
    rng = random.Random(seed)
    p_fixed = fixed / n
    p_broken_rest = broken / (n - fixed) if n > fixed else 0.0
    deltas = []
    for _ in range(resamples):
        f = _binomial(rng, n, p_fixed)
        b = _binomial(rng, n - f, p_broken_rest)
        deltas.append((f - b) / n)
    deltas.sort()
    alpha = (1.0 - level) / 2.0
    lo = deltas[int(math.floor(alpha * (resamples - 1)))]
    hi = deltas[int(math.ceil((1.0 - alpha) * (resamples - 1)))]
    return (lo, hi)


def bootstrap_rate_ci(successes: int, n: int, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap CI of a rate ``successes / n``; None when n = 0.

    The rates are helpfulness (over the base errors) and harmfulness (over the base-correct
    answers); each resample is one binomial draw.

    Raises:
        ValueError: counts out of range.
    """
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return None
    rng = random.Random(seed)
    rates = sorted(_binomial(rng, n, successes / n) / n for _ in range(resamples))
    alpha = (1.0 - level) / 2.0
    return (rates[int(math.floor(alpha * (resamples - 1)))], rates[int(math.ceil((1.0 - alpha) * (resamples - 1)))])


class HelpHarm(BaseModel):
    """Paired 2x2 table of base-vs-final correctness with the paper's derived rates.

    ``helpfulness = fixed / base_wrong``, ``harmfulness = broken / base_right`` (None when the
    denominator is 0); ``ratio = help / harm`` (``inf`` when harm is 0 and help > 0, None when both
    are 0 or undefined); ``net_change`` = final accuracy - base accuracy.

    On disk (every ``help_harm`` of a summary) it is ``to_dict``'s shape: the four cells, the derived
    rates, ``mcnemar_p`` and ``net_change_ci95``; reading one back keeps the cells, p and CI and
    derives the rest again.
    """

    model_config = ConfigDict(frozen=True)

    both_right: int
    """Base right, final right."""
    fixed: int
    """Base wrong, final right."""
    broken: int
    """Base right, final wrong."""
    both_wrong: int
    """Base wrong, final wrong."""
    p_value: float
    """Two-sided exact McNemar p of fixed vs broken (``mcnemar_p`` on disk)."""
    ci_low: float | None = None
    """Paired bootstrap 95% CI of ``net_change``, low end (``net_change_ci95[0]`` on disk)."""
    ci_high: float | None = None
    """High end of the same interval."""

    @model_validator(mode="before")
    @classmethod
    def _from_disk(cls, data: Any) -> Any:
        """Read the ``to_dict`` shape (derived keys are recomputed, so they are dropped here)."""
        if not isinstance(data, Mapping) or "mcnemar_p" not in data:
            return data
        ci = data.get("net_change_ci95") or (None, None)
        return {"both_right": data.get("both_right"), "fixed": data.get("fixed"), "broken": data.get("broken"),
                "both_wrong": data.get("both_wrong"), "p_value": data["mcnemar_p"], "ci_low": ci[0],
                "ci_high": ci[1]}

    @model_serializer
    def _to_disk(self) -> dict[str, object]:
        return self.to_dict()

    @classmethod
    def from_counts(cls, both_right: int, fixed: int, broken: int, both_wrong: int, *,
                    seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> HelpHarm:
        """Build from the four cell counts."""
        ci = bootstrap_net_change_ci(both_right, fixed, broken, both_wrong, resamples=resamples, seed=seed)
        return cls(both_right=both_right, fixed=fixed, broken=broken, both_wrong=both_wrong,
                   p_value=mcnemar_exact(fixed, broken), ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bool, bool]], *, seed: int = 0,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> HelpHarm:
        """Build from ``(base_correct, final_correct)`` per example."""
        cells = [0, 0, 0, 0]
        for base_ok, final_ok in pairs:
            cells[{(True, True): 0, (False, True): 1, (True, False): 2, (False, False): 3}[
                (bool(base_ok), bool(final_ok))]] += 1
        return cls.from_counts(*cells, seed=seed, resamples=resamples)

    @property
    def n(self) -> int:
        """Number of paired examples."""
        return self.both_right + self.fixed + self.broken + self.both_wrong

    @property
    def base_right(self) -> int:
        """Examples the base agent got right."""
        return self.both_right + self.broken

    @property
    def base_wrong(self) -> int:
        """Examples the base agent got wrong."""
        return self.fixed + self.both_wrong

    @property
    def helpfulness(self) -> float | None:
        """Share of base errors the reviewer fixed."""
        return self.fixed / self.base_wrong if self.base_wrong else None

    @property
    def harmfulness(self) -> float | None:
        """Share of base-correct answers the reviewer broke."""
        return self.broken / self.base_right if self.base_right else None

    @property
    def ratio(self) -> float | None:
        """Benefit-to-risk ratio help/harm; inf when harm is 0 but help is not."""
        help_, harm = self.helpfulness or 0.0, self.harmfulness or 0.0
        if harm == 0.0:
            return math.inf if help_ > 0.0 else None
        return help_ / harm

    @property
    def base_accuracy(self) -> float | None:
        """Accuracy of the base agent alone."""
        return self.base_right / self.n if self.n else None

    @property
    def final_accuracy(self) -> float | None:
        """Accuracy after review."""
        return (self.both_right + self.fixed) / self.n if self.n else None

    @property
    def net_change(self) -> float | None:
        """Final accuracy minus base accuracy, as a fraction."""
        return (self.fixed - self.broken) / self.n if self.n else None

    @property
    def net_change_ci95(self) -> tuple[float, float] | None:
        """``(ci_low, ci_high)``, or None when there was nothing to resample."""
        return (self.ci_low, self.ci_high) if self.ci_low is not None and self.ci_high is not None else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (``inf`` ratio spelled as the string "inf"); what ``model_dump`` writes."""
        ratio = self.ratio
        return {
            "n": self.n, "both_right": self.both_right, "fixed": self.fixed, "broken": self.broken,
            "both_wrong": self.both_wrong, "helpfulness": self.helpfulness, "harmfulness": self.harmfulness,
            "ratio": "inf" if ratio == math.inf else ratio, "base_accuracy": self.base_accuracy,
            "final_accuracy": self.final_accuracy, "net_change": self.net_change,
            "mcnemar_p": self.p_value, "net_change_ci95": [self.ci_low, self.ci_high] if self.ci_low is not None else None,
        }
