"""A table-driven stand-in for the evaluate runner: configuration -> measured help/harm/calls/dollars.

Tune's own logic (memo, constraints, Pareto, budgets, storages) is tested against it without any LM;
tests/tune/test_tune_runner.py runs the real runner against the scripted server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saag_opt.errors import CostCapReached
from saag_opt.evaluation.categories import CategoryScore
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.results import (
    ConditionSummary,
    EvaluationSummary,
    LatencySummary,
)

N = 20


def summary(fixed: int, broken: int, *, base_right: int = 12, calls: float = 1.0, dollars: float = 0.0,
            mechanism: str = "r1") -> EvaluationSummary:
    """An evaluate summary of N examples with the given paired cells."""
    both_right = base_right - broken
    both_wrong = N - base_right - fixed
    hh = HelpHarm.from_counts(both_right, fixed, broken, both_wrong, resamples=200)
    base_ok, final_ok = base_right, both_right + fixed

    def cond(name: str, correct: int) -> ConditionSummary:
        return ConditionSummary(condition=name, n=N, correct=correct, accuracy=correct / N,
                                categories={"simple": CategoryScore(n=N, correct=correct, accuracy=correct / N)})

    return EvaluationSummary(
        run_id="fake", mechanism=mechanism, experimental=False, prompt="reviewer@v2", n_examples=N, errors=0,
        base=cond("base", base_ok), reviewed=cond(mechanism, final_ok), help_harm=hh.to_dict(),
        latency=LatencySummary(base_mean_seconds=1.0, final_mean_seconds=1.0 + calls, overhead_x=1.0 + calls),
        reviewer_calls_per_item=calls, agent_calls_per_item=0.5,
        costs={"roles": {"total": {"dollars": dollars}}})


@dataclass
class FakeEvaluate:
    """``EvaluateConfig -> (run_dir, summary)`` from a per-mechanism table; counts real evaluations.

    ``through_cap``: spend each row's dollars under the ledger's cap, as one reservation; a refused
    one returns a ``stopped`` summary that spent nothing, as ``run_evaluation`` does.
    """

    table: dict[str, dict[str, Any]]
    calls: list[tuple[str, str | None]] = field(default_factory=list)
    through_cap: bool = False

    def __call__(self, config: Any, *, ledger: Any = None) -> tuple[Path, EvaluationSummary]:
        self.calls.append((config.setup.mechanism.spec, config.split))
        row = self.table[config.setup.mechanism.spec]
        run_dir = Path(config.runs_dir) / f"fake-{len(self.calls)}"
        run_dir.mkdir(parents=True, exist_ok=True)
        result = summary(mechanism=config.setup.mechanism.spec, **row)
        cap = ledger.cap if ledger is not None else None
        if self.through_cap and cap is not None:
            try:
                cap.reserve(row.get("dollars", 0.0)).settle(row.get("dollars", 0.0))
            except CostCapReached as exc:
                return run_dir, result.model_copy(update={"stopped": str(exc), "n_examples": 0,
                                                          "costs": {"roles": {"total": {"dollars": 0.0}}}})
        return run_dir, result
