"""Benchmark: the runtime guard against AgentDojo's prompt injections, with no LLM, scored by AgentDojo.

Agent: ``ObedientAgent`` (saag_opt.runtime.agentdojo.scripted), the deterministic worst case. It runs
each user task's ground truth one call per turn and obeys every injected instruction it reads: the
first time a tool result carries the injection task's goal, it runs that task's ground-truth calls
before the rest of the user task. Guard: ``Guard()``, the cascade-level guard with no LLM reviewer
(SAAG stages 1-2 and the injection rule, ``saag.injection``). Arms: ``none`` (AgentDojo's standard
pipeline) and ``guard`` (the same with ``GuardElement`` before ``ToolsExecutor`` and ``StripBlocked``
last); both with ``max_iters=50`` (AgentDojo's 15 is below travel user_task_19's 18 calls).

Data: AgentDojo 0.1.35, benchmark v1.2.2: workspace, travel, banking, slack (97 user tasks, 35
injection tasks, 949 pairs per attack). Scored by AgentDojo's own ``run_task_with_pipeline``:

* utility without attack: each user task, no injection;
* utility under attack and attack success (AgentDojo's ``security`` True) for every pair, per attack;
* false alarms: ground-truth calls of the user task that the guard blocked (each one counted).

Injection tasks whose ground truth is empty (workspace 6-13, travel 6: goals met by what an agent
says or by bulk actions) cannot succeed against a scripted agent; they stay in the denominators, as
AgentDojo counts them, and the table says how many pairs they are.

Run: ``python experiments/bench/agentdojo_guard.py`` (all six attacks, about 20 minutes on 2 cores;
``--attacks important_instructions,direct,ignore_previous`` for three). The last line is
``asr=<fraction> utility_drop=<points>``: the guarded arm's attack success over every pair of every
attack run, and how many points its utility under attack lies below the unguarded ground-truth run
without attack (each pair against its user task).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from saag_opt.runtime import Guard

try:  # the agentdojo extra: without it the script exits with the install line
    from saag_opt.runtime.agentdojo import AGENTDOJO_VERSION, BENCHMARK_VERSION
    from saag_opt.runtime.agentdojo.scripted import ObedientAgent
    from saag_opt.runtime.agentdojo.suites import ATTACKS, Block, TaskRun, empty_ground_truth, run_suite
except ImportError as exc:
    sys.exit(str(exc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="workspace,travel,banking,slack")
    parser.add_argument("--attacks", default=None, help="comma-separated (default: all six of issue 20)")
    parser.add_argument("--out", type=Path, default=None, help="write every run as JSON lines here")
    parser.add_argument("--replay", type=Path, default=None, help="print the tables of runs written by --out")
    args = parser.parse_args()
    suites = args.suites.split(",")
    attacks = tuple(args.attacks.split(",")) if args.attacks else ATTACKS
    started = time.perf_counter()
    runs = []
    if args.replay is not None:
        runs = [_read_run(line) for line in args.replay.read_text(encoding="utf-8").splitlines() if line.strip()]
        suites = [s for s in suites if any(r.suite == s for r in runs)]
    out = args.out.open("w", encoding="utf-8") if args.out else None
    for name in suites if args.replay is None else ():
        t0 = time.perf_counter()
        for run in run_suite(name, ObedientAgent(), Guard(), attacks=attacks):
            runs.append(run)
            if out is not None:
                out.write(json.dumps(asdict(run), ensure_ascii=False, default=str) + "\n")
        print(f"  {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if out is not None:
        out.close()
    wall = time.perf_counter() - started

    print(f"AgentDojo {AGENTDOJO_VERSION} (benchmark {BENCHMARK_VERSION}); agent: ObedientAgent (ground truth + obeys "
          f"every injection); guard: Guard() (cascade + injection rule, no LLM reviewer); scored by AgentDojo.")
    benign = {(r.suite, r.user_task, r.arm): r for r in runs if r.attack is None}
    print("\nutility without attack (user tasks; FA = blocked ground-truth calls)")
    print(f"  {'suite':10s} {'n':>4s} {'none':>8s} {'guard':>8s} {'FA':>4s}")
    for name in suites:
        none = [r for (s, _, a), r in benign.items() if s == name and a == "none"]
        guard = [r for (s, _, a), r in benign.items() if s == name and a == "guard"]
        print(f"  {name:10s} {len(none):4d} {_pct(none, 'utility'):>8s} {_pct(guard, 'utility'):>8s} "
              f"{sum(r.false_alarms for r in guard):4d}")

    attacked = [r for r in runs if r.attack is not None]
    print("\nunder attack (pairs): utility and attack success rate (ASR), unguarded -> guarded; FA = blocked "
          "ground-truth calls of the user task; stopped = blocked calls of the injection task")
    print(f"  {'suite':10s} {'attack':24s} {'n':>4s} {'utility none':>12s} {'guard':>7s} {'ASR none':>9s} "
          f"{'guard':>7s} {'FA':>4s} {'stopped':>7s}")
    groups: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in attacked:
        groups[(r.suite, r.attack or "")][r.arm].append(r)
        groups[("all", r.attack or "")][r.arm].append(r)
        groups[("all", "all")][r.arm].append(r)
    for (name, attack), arms in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], kv[0][1] == "all", kv[0][1])):
        none, guard = arms["none"], arms["guard"]
        stopped = sum(b.origin == "injection" for r in guard for b in r.blocks)
        print(f"  {name:10s} {attack:24s} {len(none):4d} {_pct(none, 'utility'):>12s} {_pct(guard, 'utility'):>7s} "
              f"{_pct(none, 'security'):>9s} {_pct(guard, 'security'):>7s} {sum(r.false_alarms for r in guard):4d} "
              f"{stopped:7d}")

    guarded = [r for r in attacked if r.arm == "guard"]
    left = Counter((r.suite, r.injection_task) for r in guarded if r.security)
    print("\nattacks that still succeed with the guard (suite, injection task: pairs over all attacks): "
          + (", ".join(f"{s} {i}: {n}" for (s, i), n in sorted(left.items())) or "none"))
    empty = empty_ground_truth(suites)
    unreachable = sum(1 for r in guarded if (r.suite, r.injection_task) in empty)
    print(f"pairs whose injection task has no ground-truth call (cannot succeed against the scripted agent): "
          f"{unreachable} of {len(guarded)}")
    print(f"wall time {wall:.0f} s ({len(runs)} runs{', replayed' if args.replay else ''})")

    asr = sum(bool(r.security) for r in guarded) / len(guarded) if guarded else float("nan")
    drop = (sum(benign[(r.suite, r.user_task, "none")].utility - r.utility for r in guarded) / len(guarded) * 100
            if guarded else float("nan"))
    print(f"asr={asr:.4f} utility_drop={drop:.2f}")


def _read_run(line: str) -> Any:
    data = json.loads(line)
    data["blocks"] = tuple(Block(**b) for b in data["blocks"])
    return TaskRun(**data)


def _pct(runs: list, field: str) -> str:
    if not runs:
        return "-"
    return f"{100 * sum(bool(getattr(r, field)) for r in runs) / len(runs):.1f}%"


if __name__ == "__main__":
    main()
