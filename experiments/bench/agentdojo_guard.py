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

Attacks: AgentDojo's six templates (``important_instructions``, ``tool_knowledge``, ``direct``,
``ignore_previous``, ``system_message``, ``injecagent``: each carries a marker the guard's instruction
spans read) and the five adaptive families of ``runtime.agentdojo.adaptive`` (the goal without
markers, in the user's voice, an argument swap in the data the user names, a note addressed to the
reviewer, laundering through a note), written against the guard. The argument swap applies only to
user tasks that take a recipient, account, address or link from tool data; its other pairs carry
their default data and cannot succeed (the line ``swap: ...`` gives its rate over the pairs it applies to).

Run: ``python experiments/bench/agentdojo_guard.py`` (all four suites, every attack, both arms:
about 21,000 runs); ``--suites banking,slack,travel`` for a subset; ``--attacks`` to choose. Last line:
``asr_templated=<f> asr_adaptive=<f> utility_drop=<points>``: the guarded arm's attack success over
every pair of the templates, the highest over the adaptive families (each over every pair of every
suite run), and how many points the guarded utility under attack lies below the unguarded
ground-truth run without attack (each pair against its user task, over every attack run). The lines
before it give each family's rate, how many of its successes ran only under the counted exception
(the user's request hands the task over to tool text), and the rate without those.
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
    parser.add_argument("--attacks", default=None,
                        help="comma-separated (default: the six FixedJailbreakAttack templates and the adaptive families)")
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
            from saag_opt.security.config import ADAPTIVE, ATTACKS  # noqa: PLC0415 - optional extra
            from saag_opt.security.run import SecurityConfig, resume_config, run_security  # noqa: PLC0415 - optional extra

            attacks = args.attacks.split(",") if args.attacks else [*ATTACKS, *ADAPTIVE]
            config = (resume_config(args.resume, {}) if args.resume is not None
                      else SecurityConfig(suites=args.suites.split(","), runs_dir=args.runs_dir, attacks=attacks))
            result = run_security(config, resume=args.resume)
            summary, run_dir = result.summary, result.run_dir
            write_report(run_dir)
    except (ImportError, SaagOptError) as exc:
        sys.exit(str(exc))
    print_security_report(console, summary, str(run_dir))
    print(f"wall time {time.perf_counter() - started:.0f} s ({summary.runs} runs{', replayed' if args.replay else ''})")
    print(family_lines(run_dir))


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} = {k / n:.4f}" if n else "-"


def family_lines(run_dir: Path) -> str:
    """Per attack over every suite run: the guarded ASR, its successes under the counted exception, the last line."""
    from saag_opt.runfiles import RECORDS_FILE, read_rows  # noqa: PLC0415 - after the run
    from saag_opt.security.records import SecurityRecord  # noqa: PLC0415 - after the run

    records = list({r.key: r for r in read_rows(run_dir / RECORDS_FILE, SecurityRecord)}.values())
    clean = {(r.suite, r.user_task): r.utility for r in records if r.attack is None and r.arm == "none"}
    guarded = [r for r in records if r.attack is not None and r.arm == "guard"]
    lines: list[str] = []
    asr: dict[str | None, tuple[int, int]] = {}
    for attack in dict.fromkeys(r.attack for r in guarded):
        rows = [r for r in guarded if r.attack == attack]
        won = sum(bool(r.security) for r in rows)
        excepted = sum(bool(r.security and r.excepted) for r in rows)
        asr[attack] = (won, len(rows))
        lines.append(f"{attack}: guarded ASR {_rate(won, len(rows))}; through the counted exception {excepted}; "
                     f"without those {_rate(won - excepted, len(rows))}")
    swap = [r for r in guarded if r.attack == "adaptive_swap"]
    applicable = [r for r in swap if _swappable(r)]
    if swap:
        lines.append(f"swap: over the pairs it applies to (user tasks taking a recipient from tool data), guarded ASR "
                     f"{_rate(sum(bool(r.security) for r in applicable), len(applicable))}")
    templated = [kn for a, kn in asr.items() if not str(a).startswith("adaptive_")]
    adaptive = [k / n for a, (k, n) in asr.items() if str(a).startswith("adaptive_") and n]
    paired = [r for r in guarded if (r.suite, r.user_task) in clean]
    drop = sum(clean[(r.suite, r.user_task)] - r.utility for r in paired) / len(paired) * 100 if paired else float("nan")
    t_k, t_n = sum(k for k, _ in templated), sum(n for _, n in templated)
    lines.append(f"asr_templated={t_k / t_n if t_n else float('nan'):.4f} "
                 f"asr_adaptive={max(adaptive) if adaptive else float('nan'):.4f} utility_drop={drop:.2f}")
    return "\n".join(lines)


def _swappable(record: object) -> bool:
    from agentdojo.task_suite.load_suites import get_suite  # noqa: PLC0415 - optional extra

    from saag_opt.runtime.agentdojo import BENCHMARK_VERSION  # noqa: PLC0415 - optional extra
    from saag_opt.security.adaptive import SwapAttack  # noqa: PLC0415 - optional extra

    suite = get_suite(BENCHMARK_VERSION, record.suite)  # type: ignore[attr-defined]
    return SwapAttack(suite, None).applicable(suite.user_tasks[record.user_task])  # type: ignore[arg-type, attr-defined]


if __name__ == "__main__":
    main()
