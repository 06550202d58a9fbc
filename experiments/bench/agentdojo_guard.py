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
AgentDojo counts them, and the report says how many pairs they are.

This is ``saag-opt security --agent scripted`` (``runtime.agentdojo.run.run_security``, the same
code): it writes a run directory (``--runs-dir``, default ``runs``) with report.html, and
``--resume RUN_DIR`` continues one. ``--replay RUN_DIR`` prints the tables of a finished run.

Run: ``python experiments/bench/agentdojo_guard.py`` (all six attacks, about 15 minutes on 2 cores;
``--attacks important_instructions,direct,ignore_previous`` for three). The last line is
``asr=<fraction> utility_drop=<points>``: the guarded arm's attack success over every pair of every
attack run, and how many points its utility under attack lies below the unguarded ground-truth run
without attack (each pair against its user task).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console

from saag_opt.errors import SaagOptError
from saag_opt.report.html import write_report
from saag_opt.report.security_tables import print_security_report
from saag_opt.runfiles import read_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="workspace,travel,banking,slack")
    parser.add_argument("--attacks", default=None, help="comma-separated (default: all six FixedJailbreakAttack templates)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the run directory goes")
    parser.add_argument("--resume", type=Path, default=None, help="continue this security run directory")
    parser.add_argument("--replay", type=Path, default=None, help="print the tables of this finished run")
    args = parser.parse_args()
    console = Console(width=160)
    started = time.perf_counter()
    try:
        if args.replay is not None:
            run = read_run(args.replay, header_only=True)
            summary, run_dir = run.summary, args.replay
            if summary is None:
                sys.exit(f"{args.replay}: no summary.json (the run has not finished)")
        else:
            from saag_opt.runtime.agentdojo.run import SecurityConfig, resume_config, run_security  # noqa: PLC0415 - optional extra

            chosen = {"attacks": args.attacks.split(",")} if args.attacks else {}
            config = (resume_config(args.resume, {}) if args.resume is not None
                      else SecurityConfig(suites=args.suites.split(","), runs_dir=args.runs_dir, **chosen))
            result = run_security(config, resume=args.resume)
            summary, run_dir = result.summary, result.run_dir
            write_report(run_dir)
    except (ImportError, SaagOptError) as exc:
        sys.exit(str(exc))
    print_security_report(console, summary, str(run_dir))
    print(f"wall time {time.perf_counter() - started:.0f} s ({summary.runs} runs{', replayed' if args.replay else ''})")
    asr = summary.asr if summary.asr is not None else float("nan")
    drop = summary.utility_drop if summary.utility_drop is not None else float("nan")
    print(f"asr={asr:.4f} utility_drop={drop:.2f}")


if __name__ == "__main__":
    main()
