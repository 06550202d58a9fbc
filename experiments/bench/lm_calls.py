"""LM calls of `saag-opt optimize` vs a naive dspy.GEPA, on the scripted server (offline).

Same dataset, same GEPA budget (max_metric_calls), same seed, same reviewer/reflection handler:

* ours  - `python -m saag_opt.cli optimize ...` (base first answers from the on-disk cache, every
  LM reply in the dspy disk cache);
* naive - dspy.GEPA over a module that re-runs the base agent in every rollout (base LM uncached;
  reviewer and reflection LMs cached exactly like ours).

Counts are real HTTP requests seen by the server. Then our identical command is run again (a new
process, a new run directory, the same cache) and its new requests are counted: the goal is 0.
The last two lines are the ones to read:  `lm_call_ratio=<ours/naive>` (goal <= 0.5) and
`rerun_new_lm_calls=<n>` (goal 0).

Run: .venv/bin/python experiments/bench/lm_calls.py [--metric-calls 80] [--train 12] [--val 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="saag-opt-bench-"))
os.environ["DSPY_CACHEDIR"] = str(WORK / "naive-dspy-cache")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["SAAG_OPT_CACHE"] = str(WORK / "naive-cache")
sys.path.insert(0, str(ROOT))


from saag_opt.agents.base import BaseAgent, Proposal  # noqa: E402
from saag_opt.agents.mechanisms.base import MechanismContext  # noqa: E402
from saag_opt.agents.mechanisms.registry import parse_mechanism  # noqa: E402
from saag_opt.agents.reviewer import Reviewer  # noqa: E402
from saag_opt.data import load_dataset  # noqa: E402
from saag_opt.lm import CostLedger, open_lm  # noqa: E402
from saag_opt.model import Example  # noqa: E402
from saag_opt.optimize import GepaSettings, build_gepa, compile_gepa, to_dspy_examples  # noqa: E402
from saag_opt.optimize.calls import CALLS  # noqa: E402
from saag_opt.optimize.program import ReviewerProgram, RolloutContext  # noqa: E402
from saag_opt.testing.scripted_server import ScriptedOpenAIServer  # noqa: E402
from tests.optimize import optimize_world as world  # noqa: E402


class _NoCache(MechanismContext):
    """Naive: every rollout asks the base agent again."""

    def propose_initial(self, agent: BaseAgent, example: Example, temperature: float | None = None) -> Proposal:
        """No cache: a fresh base call."""
        return agent.propose(example, temperature=temperature)


def naive_run(url: str, mechanism: str, calls: int, train: list[Example], val: list[Example]) -> None:
    """dspy.GEPA with the same settings, but the base agent re-run (uncached) in every rollout."""
    ledger = CostLedger()
    spec = f"fake@{url}"
    agent = BaseAgent(open_lm(spec, role="base", ledger=ledger, cache=False), ledger=ledger)
    reviewer_lm = open_lm(spec, role="reviewer", ledger=ledger)
    reflection_lm = open_lm(spec, role="reflection", ledger=ledger, temperature=1.0, max_tokens=16000)
    mech, ctx = parse_mechanism(mechanism), _NoCache()
    reviewer = Reviewer.from_prompt({"review": world.SEED_INSTRUCTION})
    for p in reviewer.predictors():
        p.lm = reviewer_lm
    student = ReviewerProgram(reviewer, RolloutContext(lambda ex, rev: mech.run(ex, agent, rev, ctx=ctx)),
                              ("review",))
    settings = GepaSettings(max_metric_calls=calls, log_dir=WORK / "naive-gepa", reflection_lm=reflection_lm,
                            workers=2, seed=0)
    compile_gepa(build_gepa(CALLS, settings), student, to_dspy_examples(train), to_dspy_examples(val))


def ours(url: str, dataset: str, prompts: str, mechanism: str, calls: int, runs: Path) -> subprocess.CompletedProcess:
    """Our CLI in a fresh process (so only the disk caches can help)."""
    env = dict(os.environ, SAAG_OPT_PROMPTS=prompts, SAAG_OPT_CACHE=str(WORK / "ours-cache"),
               DSPY_CACHEDIR=str(WORK / "ours-cache" / "dspy"))
    spec = f"fake@{url}"
    args = ["--base", spec, "--reviewer", spec, "--dataset", dataset, "--mechanism", mechanism,
            "--max-metric-calls", str(calls), "--workers", "2", "--runs-dir", str(runs), "--no-test"]
    done = subprocess.run([sys.executable, "-m", "saag_opt.cli", "optimize", *args], env=env, cwd=str(WORK),
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"saag-opt optimize failed:\n{done.stderr[-3000:]}")
    return done


def main() -> None:
    """Run the three phases and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric-calls", type=int, default=80)
    parser.add_argument("--train", type=int, default=12)
    parser.add_argument("--val", type=int, default=6)
    parser.add_argument("--mechanism", default="r2")
    args = parser.parse_args()
    dataset, prompts = world.write_world(WORK, n_train=args.train, n_val=args.val, n_test=2)

    train, val = load_dataset(dataset, split="train"), load_dataset(dataset, split="val")
    with ScriptedOpenAIServer(world.handler) as server:
        naive_run(server.url, args.mechanism, args.metric_calls, train, val)
        naive = len(server.chat_requests)
        server.reset()
        ours(server.url, dataset, prompts, args.mechanism, args.metric_calls, WORK / "runs")
        first = len(server.chat_requests)
        server.reset()
        ours(server.url, dataset, prompts, args.mechanism, args.metric_calls, WORK / "runs")
        rerun = len(server.chat_requests)
    print(f"dataset: {args.train} train / {args.val} val, mechanism {args.mechanism}, "
          f"max_metric_calls {args.metric_calls}, work dir {WORK}")
    print(f"naive dspy.GEPA (base agent re-run per rollout): {naive} LM calls")
    print(f"saag-opt optimize (cached base outputs):          {first} LM calls")
    print(f"lm_call_ratio={first / naive:.3f}")
    print(f"rerun_new_lm_calls={rerun}")


if __name__ == "__main__":
    main()
