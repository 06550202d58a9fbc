"""Benchmark: the runtime guard's gate-only path vs BFCL's ast_checker on the same 1,000 predictions.

Predictions are those of score_vs_bfcl.py (same sampler, seed 0: about 30% gold calls, the rest
perturbations from saag_opt.data.perturb, over simple_python, multiple, parallel, parallel_multiple).
"Guard" is ``Guard.review(messages, tools, tool_calls)`` of a cascade-only guard (no reviewer), fed
what a live agent hands over: chat messages, OpenAI function tools (JSON Schema, OpenAI-safe names)
and OpenAI ``tool_calls`` with JSON-string arguments. Each decision reads the input, builds the
registry, runs the gold-free cascade and the gate, and returns a JSON-ready Decision with the
report. "BFCL" is one ``ast_checker`` call per prediction, inputs in its own format. Both inputs are
prepared outside the timed loops.

Honest timing: the machine is shared, so the sides alternate within one run and the best repetition
of each counts (garbage collection off in the timed loops, as timeit does). Every guard repetition
starts cold: ``clear_caches()`` empties the SAAG core's per-query and per-tool memos and the guard's
registry memo is emptied, as for 1,000 turns of 1,000 different agents. For information, one run
keeps the registry memo (the same tool lists as an earlier turn, what one agent does, with new
queries) and one times the cascade alone on inputs read beforehand. The load average is printed.

Also printed: the share of decisions the gate lets through without an LLM call (the cascade passes
cleanly), split into gold and perturbed predictions, and what the rest would become.

Run: ``python experiments/bench/guard_overhead.py`` (needs ``pip install --no-deps bfcl-eval==2026.3.23``).
The last line is ``ratio=<guard seconds per decision / ast_checker seconds per prediction>`` (goal <= 2.0).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from saag_opt.model import Example, ToolCall
from saag_opt.runtime import Guard
from saag_opt.runtime.inputs import read_input
from saag_opt.saag import check_calls, clear_caches


def _score_bench() -> Any:
    """score_vs_bfcl.py, loaded by path: the same sampler, BFCL data and stub."""
    path = Path(__file__).resolve().with_name("score_vs_bfcl.py")
    spec = importlib.util.spec_from_file_location("score_vs_bfcl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def openai_inputs(example: Example, calls: tuple[ToolCall, ...]) -> tuple[list, list, list]:
    """What an agent loop would pass: messages, OpenAI function tools, OpenAI tool_calls."""
    tools = [tool.to_openai_tool() for tool in example.registry]
    tool_calls = []
    for index, call in enumerate(calls):
        tool = example.registry.get(call.name)
        name = tool.safe_name if tool is not None else call.name
        tool_calls.append({"id": f"call_{index}", "type": "function",
                           "function": {"name": name, "arguments": json.dumps(dict(call.arguments))}})
    return [dict(m) for m in example.messages], tools, tool_calls


def main() -> None:
    """Time both sides, print the gate's pass share, end with the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--grounding", default=None, help="the cascade's grounding mode (default: its own)")
    args = parser.parse_args()
    bench = _score_bench()
    stub = bench._load_stub()
    loaded = stub.load_ast_checker()
    if loaded is None:
        sys.exit("bfcl-eval is not installed: pip install --no-deps bfcl-eval==2026.3.23")
    ast_checker, language = loaded
    items = bench.sample_items(args.n, args.seed)
    raw = bench._raw_functions()
    bfcl_in = [(raw[ex.id], [{ex.registry.resolve(c.name) or c.name: dict(c.arguments)} for c in calls],
                list(ex.gold or ()), ex.category) for ex, calls in items]
    guard_in = [openai_inputs(ex, calls) for ex, calls in items]
    guard = Guard.load(reviewer=None, mechanism="none", cache=False, grounding=args.grounding)
    decisions: list[Any] = []

    def guarded() -> None:
        decisions.clear()
        for messages, tools, tool_calls in guard_in:
            decisions.append(guard.review(messages, tools, tool_calls))

    def bfcl() -> None:
        for functions, output, gold, category in bfcl_in:
            ast_checker(functions, output, gold, language.PYTHON, category, model_name)

    model_name = stub.MODEL_NAME
    load_before = os.getloadavg()
    read = [read_input(*x) for x in guard_in]
    options = {"grounding": args.grounding} if args.grounding else {}

    def cascade_only() -> None:  # the floor: the cascade on inputs read beforehand
        for inp in read:
            check_calls([c.for_cascade() for c in inp.calls], inp.registry, inp.grounding_text, **options)

    best = {"guard": float("inf"), "bfcl": float("inf"), "same_tools": float("inf"), "cascade": float("inf")}
    gc.collect()
    gc.disable()  # as timeit does: a collection landing in one side's loop is noise, not its cost
    for _ in range(args.reps):
        clear_caches()
        guard.registries.clear()
        start = time.perf_counter()
        guarded()  # cold: new queries, new tool lists
        best["guard"] = min(best["guard"], time.perf_counter() - start)
        start = time.perf_counter()
        bfcl()
        best["bfcl"] = min(best["bfcl"], time.perf_counter() - start)
        clear_caches()
        start = time.perf_counter()
        guarded()  # new queries, tool lists seen before (an agent passes its own list every turn)
        best["same_tools"] = min(best["same_tools"], time.perf_counter() - start)
        clear_caches()
        start = time.perf_counter()
        cascade_only()
        best["cascade"] = min(best["cascade"], time.perf_counter() - start)
    gc.enable()
    load_after = os.getloadavg()

    n = len(items)
    kinds = [_kind(ex, calls) for ex, calls in items]
    gated = [d.reason.startswith("gate") for d in decisions]
    outcome = Counter(_would(d) for d in decisions)
    print(f"predictions={n} tool_calls={sum(len(c) for _, c in items)} seed={args.seed} reps={args.reps} "
          f"grounding={args.grounding or 'cascade default'} "
          f"(best rep, alternating; guard cold = clear_caches() before each rep)")
    print(f"load average 1/5/15 min: before {_load(load_before)}, after {_load(load_after)} (2 cores, shared)")
    for kind in ("gold", "perturbed"):
        picked = [g for g, k in zip(gated, kinds) if k == kind]
        print(f"gate lets through without an LLM call, {kind}: {sum(picked)}/{len(picked)} = "
              f"{sum(picked) / max(1, len(picked)):.1%}")
    print(f"gate lets through without an LLM call, all: {sum(gated)}/{n} = {sum(gated) / n:.1%}; the rest: "
          + ", ".join(f"{k} {v}" for k, v in sorted(outcome.items()) if k != "gate"))
    print(f"of which the cascade alone, cold, inputs read beforehand (info only): {best['cascade'] / n * 1e6:.1f} "
          f"us/decision ({best['cascade'] / best['bfcl']:.2f}x BFCL)")
    print(f"guard, same tool lists as an earlier turn (info only): {best['same_tools'] / n * 1e6:.1f} us/decision "
          f"({best['same_tools'] / best['bfcl']:.2f}x BFCL)")
    print(f"guard (gate-only path), cold: {best['guard'] / n * 1e6:.1f} us/decision ({n / best['guard']:,.0f}/s)")
    print(f"BFCL ast_checker: {best['bfcl'] / n * 1e6:.1f} us/prediction ({n / best['bfcl']:,.0f}/s)")
    print(f"ratio={best['guard'] / best['bfcl']:.2f}")


def _kind(example: Example, calls: tuple[ToolCall, ...]) -> str:
    from saag_opt.data.perturb import gold_calls

    return "gold" if tuple(calls) == tuple(gold_calls(example)) else "perturbed"


def _would(decision: Any) -> str:
    """What the decision would be with an LLM reviewer behind the gate."""
    if decision.reason.startswith("gate"):
        return "gate"
    if decision.action == "block":
        return "stage 1-2 failure (revise or block)"
    return "to the LLM reviewer (stage 3 / drift)"


def _load(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
