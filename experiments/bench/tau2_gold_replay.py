"""Gold replay of tau2-bench through OUR tau2 agent, scored by tau2's own evaluator.

Every task of `tau2:airline`, `tau2:retail`, `tau2:telecom` (base split) and `tau2:mock` runs through
`saag_opt.agents.tau2.run_task` with the mechanism `none`: the agent is the project's subclass of tau2's
`LLMAgent`, each step one mechanism run, with a scripted proposer making the gold actions in order
(`saag_opt.testing.tau2_gold`); a scripted user performs the user's gold actions (telecom) and stops;
tau2's `Orchestrator` runs the conversation and `evaluate_simulation` (`EvaluationType.ALL`) scores it.
Anything below 1.0 on a replayable task is a bug in the agent, the conversion or the runner (the data and
the evaluator are tau2's). Mock's `update_task_with_history_and_env_assertions` has env assertions and no
gold action, so nothing can be replayed for it: it is reported and left out of M. No LM, offline.

The LAST line is `reward1=N/M`; the lines before it the failures and, per domain, N/M and seconds.

Run: python experiments/bench/tau2_gold_replay.py [--domain airline ...] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from saag_opt.agents import MechanismContext, NoReview  # noqa: E402
from saag_opt.agents.tau2 import Tau2Run, run_task  # noqa: E402
from saag_opt.data.tau2 import TAU2_DOMAINS, load_tau2  # noqa: E402
from saag_opt.episodes import Episode  # noqa: E402
from saag_opt.testing.tau2_gold import GoldProposer, GoldScript, gold_user, replayable  # noqa: E402


def replay(episode: Episode) -> Tau2Run:
    """One task's gold replay through the agent, the orchestrator and the evaluator."""
    script = GoldScript.of(episode)
    return run_task(episode, agent=GoldProposer(script), reviewer=None, mechanism=NoReview(),  # type: ignore[arg-type]
                    ctx=MechanismContext(), user=gold_user(script))


def main(argv: Sequence[str] | None = None) -> int:
    """Replay, print failures and per-domain counts and seconds, then ``reward1=N/M``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", action="append", choices=TAU2_DOMAINS, help="default: all four")
    parser.add_argument("--limit", type=int, default=None, help="first N tasks per domain")
    args = parser.parse_args(argv)
    passed = total = 0
    for domain in args.domain or TAU2_DOMAINS:
        started = time.perf_counter()
        episodes = load_tau2(domain)[: args.limit]
        ok = n = 0
        for episode in episodes:
            if not replayable(episode):
                print(f"SKIPPED {domain}/{episode.id}: env assertions without gold actions (nothing to replay)")
                continue
            run = replay(episode)
            n += 1
            ok += run.judgement.valid
            if not run.judgement.valid:
                print(f"FAILED {domain}/{episode.id}: reward {run.reward} {run.judgement.error_type} "
                      f"{dict(run.judgement.checks)}")
        seconds = time.perf_counter() - started
        print(f"{domain}: reward1={ok}/{n} seconds={seconds:.1f} ({seconds / max(n, 1):.2f} s/task)", flush=True)
        passed, total = passed + ok, total + n
    print(f"reward1={passed}/{total}")
    return 0 if passed == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
