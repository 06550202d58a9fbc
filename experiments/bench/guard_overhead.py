"""Benchmark: the runtime guard's gate-only path vs BFCL's ast_checker on the same 1,000 predictions.

Predictions are those of score_vs_bfcl.py (same sampler, seed 0: about 30% gold calls, the rest
perturbations from saag_opt.data.perturb, over simple_python, multiple, parallel, parallel_multiple).
"Guard" is ``Guard.review(messages, tools, tool_calls)`` of a cascade-only guard (no reviewer), fed
what a live agent hands over: chat messages, OpenAI function tools (JSON Schema, OpenAI-safe names)
and OpenAI ``tool_calls`` with JSON-string arguments. Each decision reads the input, builds the
registry, runs the gold-free cascade and the gate, and returns a JSON-ready Decision with the
report. "BFCL" is one ``ast_checker`` call per prediction, inputs in its own format. Both inputs are
prepared outside the timed loops.

Both grounding modes are timed: the guard's default (``Guard.load`` without ``grounding``:
calibrated, ``INTERVENTION_GROUNDING``) gives the headline ``ratio=``; the other mode (paper) is an
extra line with its own ``ratio_paper=``. Honest timing: the machine is shared, so every repetition
runs each side once, in turn (default guard, BFCL, paper guard, the info runs), and the best
repetition of each counts (garbage collection off in the timed loops, as timeit does). Every guard
run starts cold: ``clear_caches()`` empties the SAAG core's per-query and per-tool memos and the
guard's registry memo is emptied, as for 1,000 turns of 1,000 different agents. For information,
one run keeps the registry memo of the default guard's cold run (the same tool lists as an earlier
turn, what one agent does, with new queries; the memo gets a slot per list for it) and one times
the cascade alone on inputs read beforehand. The load average is printed.

Also printed, per mode: the share of decisions the gate lets through without an LLM call (the
cascade passes cleanly), split into gold and perturbed predictions, and what the rest would become.

Run: ``python experiments/bench/guard_overhead.py`` (needs ``pip install --no-deps bfcl-eval==2026.3.23``).
The last line is ``ratio=<default-mode guard seconds per decision / ast_checker seconds per prediction>``
(goal <= 2.0).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from saag_opt.data.perturb import gold_calls
from saag_opt.model import Example, ToolCall
from saag_opt.runtime import Guard
from saag_opt.runtime.inputs import read_input
from saag_opt.saag import check_calls, clear_caches
from saag_opt.saag.modes import ModeName


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
    """Time both modes and BFCL interleaved, print the gate's pass share, end with the default mode's ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=11)
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
    default = Guard.load(reviewer=None, mechanism="none", cache=False)  # the guard's own grounding mode
    guards = {default.grounding: default}
    for mode in get_args(ModeName):
        guards.setdefault(mode, Guard.load(reviewer=None, mechanism="none", cache=False, grounding=mode))
    decisions: dict[str, list[Any]] = {mode: [] for mode in guards}
    model_name = stub.MODEL_NAME

    def guarded(mode: str) -> Callable[[], None]:
        guard, out = guards[mode], decisions[mode]

        def run() -> None:
            out.clear()
            for messages, tools, tool_calls in guard_in:
                out.append(guard.review(messages, tools, tool_calls))
        return run

    def bfcl() -> None:
        for functions, output, gold, category in bfcl_in:
            ast_checker(functions, output, gold, language.PYTHON, category, model_name)

    read = [read_input(*x) for x in guard_in]

    def cascade_only() -> None:  # the floor: the default mode's cascade on inputs read beforehand
        for inp in read:
            check_calls([c.for_cascade() for c in inp.calls], inp.registry, inp.grounding_text,
                        grounding=default.grounding)

    def cold(run: Callable[[], None], guard: Guard | None = None) -> Callable[[], None]:
        def fresh() -> None:  # new queries, new tool lists: 1,000 turns of 1,000 different agents
            clear_caches()
            if guard is not None:
                guard.registries.clear()
            run()
        return fresh

    def warm_tools(run: Callable[[], None]) -> Callable[[], None]:
        def fresh() -> None:  # tool lists read in the cold run just before; queries new again
            clear_caches()
            run()
        return fresh

    # One registry memo slot per tool list, so the "same tool lists" run measures hits, not evictions.
    default.registries.size = max(default.registries.size, len(guard_in))
    runs = [(f"guard:{mode}", cold(guarded(mode), guards[mode])) for mode in guards]
    runs.insert(1, ("bfcl", bfcl))
    runs += [("same_tools", warm_tools(guarded(default.grounding))), ("cascade", cold(cascade_only))]
    load_before = os.getloadavg()
    best = _interleaved(runs, args.reps)
    load_after = os.getloadavg()

    n = len(items)
    kinds = [_kind(ex, calls) for ex, calls in items]
    print(f"predictions={n} tool_calls={sum(len(c) for _, c in items)} seed={args.seed} reps={args.reps} "
          f"(best rep; guard modes and BFCL alternate within each rep; guard cold = clear_caches() and "
          f"no registry memo before each run)")
    print(f"load average 1/5/15 min: before {_load(load_before)}, after {_load(load_after)} (2 cores, shared)")
    for mode in guards:
        gated = [d.reason.startswith("gate") for d in decisions[mode]]
        outcome = Counter(_would(d) for d in decisions[mode])
        shares = ", ".join(f"{kind} {_share([g for g, k in zip(gated, kinds) if k == kind])}"
                           for kind in ("gold", "perturbed"))
        print(f"[{mode}] gate lets through without an LLM call: all {_share(gated)} ({shares}); the rest: "
              + ", ".join(f"{k} {v}" for k, v in sorted(outcome.items()) if k != "gate"))
    bfcl_s = best["bfcl"]
    print(f"[{default.grounding}] the cascade alone, cold, inputs read beforehand (info only): "
          f"{best['cascade'] / n * 1e6:.1f} us/decision ({best['cascade'] / bfcl_s:.2f}x BFCL)")
    print(f"[{default.grounding}] guard, same tool lists as an earlier turn (info only): "
          f"{best['same_tools'] / n * 1e6:.1f} us/decision ({best['same_tools'] / bfcl_s:.2f}x BFCL)")
    for mode in guards:
        if mode != default.grounding:
            seconds = best[f"guard:{mode}"]
            print(f"[{mode}] guard (gate-only path), cold: {seconds / n * 1e6:.1f} us/decision "
                  f"({n / seconds:,.0f}/s) ratio_{mode}={seconds / bfcl_s:.2f}")
    print(f"BFCL ast_checker: {bfcl_s / n * 1e6:.1f} us/prediction ({n / bfcl_s:,.0f}/s)")
    seconds = best[f"guard:{default.grounding}"]
    print(f"[{default.grounding}, the guard's default] guard (gate-only path), cold: {seconds / n * 1e6:.1f} "
          f"us/decision ({n / seconds:,.0f}/s)")
    print(f"ratio={seconds / bfcl_s:.2f}")


def _interleaved(runs: list[tuple[str, Callable[[], None]]], reps: int) -> dict[str, float]:
    """Best seconds of each run over ``reps`` rounds; every round runs each once, in order (gc off)."""
    best = {name: float("inf") for name, _ in runs}
    gc.collect()
    gc.disable()  # as timeit does: a collection landing in one side's loop is noise, not its cost
    try:
        for _ in range(reps):
            for name, run in runs:
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def _share(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)} = {sum(flags) / max(1, len(flags)):.1%}"


def _kind(example: Example, calls: tuple[ToolCall, ...]) -> str:
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
