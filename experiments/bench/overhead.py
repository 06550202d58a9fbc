"""Latency overhead of the reviewer, with and without the SAAG gate, on the embedded model.

Three evaluate runs over the same examples share one fresh base-prediction cache: ``none`` makes
every base call (its real latency is stored with the prediction), then ``r2`` and ``gate+r2`` reuse
that base prediction and add their own reviews/revisions. Each run's mean seconds per example
(base call included) divided by the base mean is its latency overhead; the paper reports 6.2x on
BFCL for the reviewer, our goal with the gate is <= 2x. Each run gets its own empty dspy LM cache
so that ``gate+r2`` does not replay the reviews ``r2`` already made: every review and revision is a
real call. One worker, because the embedded server serialises requests (queueing would inflate latency).

Also printed: the share of r2's fixes that gate+r2 keeps, |fixed(gate+r2) & fixed(r2)| / |fixed(r2)|
("n/a" when r2 fixes nothing). With the 0.5B model the reviewer is weak: read the numbers as the
pipeline working and as latency, not as reviewer quality.

Run: .venv/bin/python experiments/bench/overhead.py [--model local:qwen2.5-coder-0.5b] [--limit 20]
     [--reviewer MODEL] [--split test]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="saag-opt-bench-overhead-"))
os.environ["DSPY_CACHEDIR"] = str(WORK / "dspy-cache")  # before dspy is imported
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("SAAG_OPT_PROMPTS", str(ROOT / "prompts"))
sys.path.insert(0, str(ROOT))

from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import EvaluationResult, run_evaluation  # noqa: E402
from saag_opt.lm import stop_embedded_servers  # noqa: E402

MECHANISMS = ("none", "r2", "gate+r2")


def fixed_ids(result: EvaluationResult) -> set[str]:
    """Examples the base agent got wrong and the mechanism got right (errors excluded)."""
    base = {r.example_id: r for r in result.records if r.condition == "base"}
    return {r.example_id for r in result.records
            if r.condition != "base" and r.correct and r.error is None
            and r.example_id in base and not base[r.example_id].correct and base[r.example_id].error is None}


def kept_share(gate: set[str], review: set[str]) -> str:
    """|gate & review| / |review| as text, or "n/a" when the reviewer fixed nothing."""
    if not review:
        return "n/a"
    return f"{len(gate & review) / len(review):.2f} ({len(gate & review)}/{len(review)})"


def evaluate(args: argparse.Namespace, mechanism: str) -> tuple[EvaluationResult, float]:
    """One run; returns the result and its wall seconds."""
    config = EvaluateConfig(base=args.model, reviewer=args.reviewer or args.model, prompt=args.prompt,
                            mechanism=mechanism, dataset=args.dataset, split=args.split, limit=args.limit,
                            workers=1, runs_dir=WORK / "runs", cache_dir=WORK / "base-cache")
    os.environ["DSPY_CACHEDIR"] = str(WORK / f"dspy-cache-{mechanism}")  # run_evaluation configures it
    start = time.perf_counter()
    result = run_evaluation(config)
    return result, time.perf_counter() - start


def report(results: dict[str, tuple[EvaluationResult, float]]) -> None:
    """Per-mechanism lines, then the two overheads and the kept-fixes share (last lines)."""
    for mechanism, (result, wall) in results.items():
        s = result.summary
        lat = s.latency
        print(f"{mechanism:8s} n={s.n_examples} errors={s.errors} base_acc={s.base.accuracy:.2f} "
              f"final_acc={s.reviewed.accuracy:.2f} base_s={lat.base_mean_seconds or 0:.2f} "
              f"final_s={lat.final_mean_seconds or 0:.2f} reviewer_calls/item={s.reviewer_calls_per_item or 0:.2f} "
              f"gated_share={'-' if s.gated_share is None else f'{s.gated_share:.2f}'} wall={wall:.1f}s "
              f"help_harm=({s.help_harm.fixed} fixed, {s.help_harm.broken} broken)")
    overhead: dict[str, Any] = {m: results[m][0].summary.latency.overhead_x for m in ("r2", "gate+r2")}
    fixes = {m: fixed_ids(results[m][0]) for m in ("r2", "gate+r2")}
    print(f"overhead_r2={_x(overhead['r2'])} (paper, BFCL reviewer: 6.2x)")
    print(f"overhead_gate+r2={_x(overhead['gate+r2'])} (goal <= 2x)")
    print(f"r2_fixes_kept_by_gate={kept_share(fixes['gate+r2'], fixes['r2'])}")


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def main() -> None:
    """Parse flags, run none / r2 / gate+r2, print the overheads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b", help="base model (and reviewer by default)")
    parser.add_argument("--reviewer", default=None, help="reviewer model (default: --model)")
    parser.add_argument("--prompt", default="reviewer@v2")
    parser.add_argument("--dataset", default="shipped:bfcl")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=20)
    args = parser.parse_args()
    try:
        results = {m: evaluate(args, m) for m in MECHANISMS}
    finally:
        stop_embedded_servers()
    print(f"run directories: {WORK / 'runs'}")
    report(results)


if __name__ == "__main__":
    main()
