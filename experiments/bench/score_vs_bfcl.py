"""Benchmark: SAAG cascade + ground-truth check vs BFCL's ast_checker on the same calls.

1,000 predictions (fixed seed) drawn from BFCL non-live gold-bearing categories: the gold call(s)
and perturbations of it (saag_opt.data.perturb). "Ours" = ``run_cascade`` on every call of a
prediction plus one ``check_truth``; "BFCL" = one ``ast_checker``. Inputs are prepared outside the
timed loops, each in its checker's own format. Each side runs ``--reps`` times; the best rep counts.
``cold`` clears check_truth's per-example plan cache before every rep (each example is compiled
inside the timing, the conservative number); ``warm`` keeps it.

Run: ``python experiments/bench/score_vs_bfcl.py`` (needs ``pip install --no-deps bfcl-eval==2026.3.23``).
The last line is ``ratio=<ours calls/s / BFCL calls/s>`` (cold).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from saag_opt.data.bfcl import load_bfcl
from saag_opt.data.perturb import perturbed_calls
from saag_opt.model import Example, ToolCall
from saag_opt.saag import run_cascade
from saag_opt.saag import truth
from saag_opt.saag.truth import check_truth

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
Item = tuple[Example, list[ToolCall]]


def _load_stub() -> Any:
    """tests/bfcl_stub.py, loaded by path (tests/ is not a package)."""
    path = Path(__file__).resolve().parents[2] / "tests" / "bfcl_stub.py"
    spec = importlib.util.spec_from_file_location("bfcl_stub", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bfcl_stub"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def sample_items(n: int, seed: int, gold_share: float = 0.3) -> list[Item]:
    """``n`` predictions: about ``gold_share`` gold, the rest perturbations, from all categories."""
    rng = random.Random(seed)
    golds: list[Item] = []
    perturbed: list[Item] = []
    for category in CATEGORIES:
        for example in load_bfcl(category):
            for kind, calls in perturbed_calls(example, random.Random(f"{seed}:{example.id}")):
                (golds if kind == "gold" else perturbed).append((example, calls))
    n_gold = round(n * gold_share)
    items = rng.sample(golds, n_gold) + rng.sample(perturbed, n - n_gold)
    rng.shuffle(items)
    return items


def _raw_functions() -> dict[str, list[dict[str, Any]]]:
    spec = importlib.util.find_spec("bfcl_eval")
    assert spec is not None and spec.submodule_search_locations
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    out: dict[str, list[dict[str, Any]]] = {}
    for category in CATEGORIES:
        for line in (data / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["id"]] = row["function"]
    return out


def _best(run: Callable[[], None], reps: int, before: Callable[[], None] = lambda: None) -> float:
    best = float("inf")
    for _ in range(reps):
        before()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Time both checkers and print their rates; the last line is the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    stub = _load_stub()
    loaded = stub.load_ast_checker()
    if loaded is None:
        sys.exit("bfcl-eval is not installed: pip install --no-deps bfcl-eval==2026.3.23")
    ast_checker, language = loaded
    model_name = stub.MODEL_NAME
    items = sample_items(args.n, args.seed)
    raw = _raw_functions()
    ours_in = [(calls, ex, ex.registry, ex.query) for ex, calls in items]
    bfcl_in = [(raw[ex.id], [{ex.registry.resolve(c.name) or c.name: dict(c.arguments)} for c in calls],
                list(ex.gold or ()), ex.category) for ex, calls in items]

    def ours() -> None:
        for calls, example, registry, query in ours_in:
            for call in calls:
                run_cascade(call, registry, query)
            check_truth(calls, example)

    def truth_only() -> None:
        for calls, example, _, _ in ours_in:
            check_truth(calls, example)

    def bfcl() -> None:
        for functions, output, gold, category in bfcl_in:
            ast_checker(functions, output, gold, language.PYTHON, category, model_name)

    n_calls = sum(len(calls) for _, calls in items)
    cold = _best(ours, args.reps, truth._PLANS.clear)
    warm = _best(ours, args.reps)
    truth_cold = _best(truth_only, args.reps, truth._PLANS.clear)
    ref = _best(bfcl, args.reps)
    print(f"items={len(items)} tool_calls={n_calls} categories={','.join(CATEGORIES)} seed={args.seed} "
          f"reps={args.reps} (best rep)")
    print(f"check_truth alone (cold): {len(items) / truth_cold:,.0f} calls/s")
    print(f"ours = run_cascade + check_truth (warm): {len(items) / warm:,.0f} calls/s")
    print(f"ours = run_cascade + check_truth (cold): {len(items) / cold:,.0f} calls/s")
    print(f"BFCL ast_checker: {len(items) / ref:,.0f} calls/s")
    print(f"check_truth alone vs BFCL (cold): {ref / truth_cold:.2f}x; cascade + truth (warm): {ref / warm:.2f}x")
    print(f"ratio={ref / cold:.2f}")


if __name__ == "__main__":
    main()
