"""Benchmark: SAAG cascade + ground-truth check vs BFCL's ast_checker on the same predictions.

1,000 predictions (fixed seed) drawn from BFCL non-live gold-bearing categories: the gold call(s)
and perturbations of it (saag_opt.data.perturb). "Ours" is what ``saag-opt score`` does per
prediction (without JSON output): ``diagnose_with_gold`` (the cascade on every call) plus ``check_truth``;
"BFCL" is one ``ast_checker``. The cascade builds its psi correction texts on first read and score
never reads them, so "ours" does not either; the cost of reading them all is printed for
information. Inputs are prepared outside the timed loops, each in its checker's own format.

Honest timing: every repetition of ours starts cold. ``saag_opt.saag.clear_caches()`` empties every
cache the SAAG core keeps (prepared queries, tool shapes, compiled gold) before each repetition, so
per-query/per-example preparation is timed for the first prediction that needs it, as when scoring
1,000 new predictions. Repetitions of both sides alternate in one run (the machine is shared) and
the best repetition of each side counts. ``warm`` (caches kept) is printed for information only.

Run: ``python experiments/bench/score_vs_bfcl.py`` (needs ``pip install --no-deps bfcl-eval==2026.3.23``).
The last line is ``ratio=<ours predictions/s / BFCL predictions/s>`` (cold, default path).
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
from saag_opt.saag import clear_caches, diagnose_with_gold
from saag_opt.saag.truth import check_truth

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
Item = tuple[Example, tuple[ToolCall, ...]]


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
                (golds if kind == "gold" else perturbed).append((example, tuple(calls)))
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


def _interleaved(runs: dict[str, tuple[Callable[[], None], bool]], reps: int) -> dict[str, float]:
    """Best wall time per run over ``reps`` alternating repetitions; cold runs clear caches first.

    Runs go in dict order, so a warm run placed right after a cold one finds its caches full.
    """
    best = {name: float("inf") for name in runs}
    for _ in range(reps):
        for name, (run, cold) in runs.items():
            if cold:
                clear_caches()
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    """Time both checkers and print their rates; the last line is the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    stub = _load_stub()
    loaded = stub.load_ast_checker()
    if loaded is None:
        sys.exit("bfcl-eval is not installed: pip install --no-deps bfcl-eval==2026.3.23")
    ast_checker, language = loaded
    model_name = stub.MODEL_NAME
    items = sample_items(args.n, args.seed)
    raw = _raw_functions()
    bfcl_in = [(raw[ex.id], [{ex.registry.resolve(c.name) or c.name: dict(c.arguments)} for c in calls],
                list(ex.gold or ()), ex.category) for ex, calls in items]

    def ours() -> None:  # what score_predictions does per prediction
        for example, calls in items:
            diagnose_with_gold(calls, example)
            check_truth(calls, example)

    def with_corrections() -> None:  # as if the texts were built eagerly
        for example, calls in items:
            diagnose_with_gold(calls, example).corrections  # noqa: B018 - reading builds them
            check_truth(calls, example)

    def cascade_only() -> None:
        for example, calls in items:
            diagnose_with_gold(calls, example)

    def truth_only() -> None:
        for example, calls in items:
            check_truth(calls, example)

    def bfcl() -> None:
        for functions, output, gold, category in bfcl_in:
            ast_checker(functions, output, gold, language.PYTHON, category, model_name)

    best = _interleaved({"ours": (ours, True), "warm": (ours, False), "bfcl": (bfcl, False),
                         "cascade": (cascade_only, True), "truth": (truth_only, True),
                         "corrections": (with_corrections, True)}, args.reps)
    n, n_calls = len(items), sum(len(calls) for _, calls in items)
    print(f"predictions={n} tool_calls={n_calls} categories={','.join(CATEGORIES)} seed={args.seed} "
          f"reps={args.reps} (best rep, alternating; ours cold = clear_caches() before each rep)")
    print(f"diagnose_with_gold alone, cold: {n / best['cascade']:,.0f} predictions/s "
          f"({best['cascade'] / n_calls * 1e6:.1f} us/call)")
    print(f"check_truth alone, cold: {n / best['truth']:,.0f} predictions/s ({best['bfcl'] / best['truth']:.2f}x BFCL)")
    print(f"ours = diagnose_with_gold + check_truth, warm (info only): {n / best['warm']:,.0f} predictions/s "
          f"({best['bfcl'] / best['warm']:.2f}x BFCL)")
    print(f"ours + reading every correction text, cold (info only): {n / best['corrections']:,.0f} predictions/s "
          f"({best['bfcl'] / best['corrections']:.2f}x BFCL)")
    print(f"ours = diagnose_with_gold + check_truth, cold: {n / best['ours']:,.0f} predictions/s")
    print(f"BFCL ast_checker: {n / best['bfcl']:,.0f} predictions/s")
    print(f"ratio={best['bfcl'] / best['ours']:.2f}")


if __name__ == "__main__":
    main()
