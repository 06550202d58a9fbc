"""Gold replay of BFCL multi-turn through OUR episode loop and environment, scored by BFCL's checkers.

Every entry of `bfcl:multi_turn` (base, miss_func, miss_param, long_context: 800) runs through
`saag_opt.agents.episode.run_episode` on the `bfcl` environment with the mechanism `none`: an oracle
agent makes each turn's gold calls at step 0 and then answers in text (an empty gold turn: it answers
at once), the environment executes them on BFCL's backends, and `Environment.check` scores the
transcript with `multi_turn_checker` + `multi_turn_irrelevance_checker`. Anything but all valid is a
bug in the loop, the decoding or the environment (the data is BFCL's own). No LM, offline.

The LAST line is `valid=N/M`; the line before it the seconds and, per category, N/M.

Run: python experiments/bench/multiturn_gold_replay.py [--dataset bfcl:multi_turn] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from saag_opt.agents import MechanismContext, NoReview  # noqa: E402
from saag_opt.agents.episode import run_episode  # noqa: E402
from saag_opt.data.bfcl_environment import gold_calls  # noqa: E402
from saag_opt.data.catalog import load_episodes  # noqa: E402
from saag_opt.episodes import Episode, Judgement, open_environment  # noqa: E402
from saag_opt.testing.episode_agents import gold_replay_agent  # noqa: E402


def replay(episodes: Sequence[Episode]) -> list[Judgement]:
    """Each episode's judgement after a gold replay through the loop."""
    agent = gold_replay_agent({episode.id: gold_calls(episode) for episode in episodes})
    ctx, mechanism = MechanismContext(), NoReview()
    out = []
    for episode in episodes:
        environment = open_environment(episode.environment)
        try:
            outcome = run_episode(episode, environment, agent, None, mechanism, ctx)
            out.append(environment.check(outcome.transcript))
        finally:
            environment.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Replay, print per-category counts and seconds, then ``valid=N/M``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="bfcl:multi_turn")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    episodes = load_episodes(args.dataset, limit=args.limit)
    judgements = replay(episodes)
    seconds = time.perf_counter() - started
    total, valid = Counter(e.category for e in episodes), Counter(e.category for e, j in zip(episodes, judgements)
                                                                  if j.valid)
    for episode, judgement in zip(episodes, judgements):
        if not judgement.valid:
            print(f"INVALID {episode.id}: {judgement.error_type}: {judgement.message} (turn {judgement.failed_turn})")
    print(f"seconds={seconds:.2f} " + " ".join(f"{c}={valid[c]}/{n}" for c, n in total.items()))
    print(f"valid={sum(valid.values())}/{len(episodes)}")
    return 0 if sum(valid.values()) == len(episodes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
