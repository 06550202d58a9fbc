"""Gold replay of BFCL multi-turn through OUR episode loop and environment, scored by BFCL's checkers.

Every entry of `bfcl:multi_turn` (base, miss_func, miss_param, long_context: 800) runs through
`saag_opt.agents.episode.run_episode` on the `bfcl` environment with the mechanism `none`: an oracle
agent makes each turn's gold calls at step 0 and then answers in text (an empty gold turn: it answers
at once), the environment executes them on BFCL's backends, and `Environment.check` scores the
transcript with `multi_turn_checker` + `multi_turn_irrelevance_checker`. Anything but all valid is a
bug in the loop, the decoding or the environment (the data is BFCL's own). No LM, offline.

`--mechanism guard+r1` replays the gold through the cascade-only guard instead (`guard+r<N>` without
an LLM reviewer: the SAAG stage 1-2 rules and the injection rule, with every tool result so far in
view): each gold step it withholds is a false alarm, listed, and the entry then fails BFCL's
checker, so `valid` stays N/N only if the guard blocks no gold call. Measured on all 800 (2,924
gold steps): the marker rules alone withheld none (`valid=799/800`); with the data-flow policy
(`saag.flow`; commit 35409c8, 2026-12-07) the injection check withholds 30 (`valid=769/800`): requests
whose verb the policy's vocabulary does not know ("can you nix it", "let's scrap that order", "taking
the first one off my watchlist", a typo), so the effect reads as not asked for. The one other withheld
step is BFCL's own gold calling `tail` in multi_turn_miss_func_49 turn 1, two turns before BFCL hands
that function over (stage 1: a function not in the turn's tools never runs).

The LAST line is `valid=N/M`; the line before it the seconds and, per category, N/M (and with a
mechanism, the withheld gold steps and how many of them the injection rule withheld).

Run: python experiments/bench/multiturn_gold_replay.py [--dataset bfcl:multi_turn] [--limit N] [--mechanism guard+r1]
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

from saag_opt.agents import MechanismContext, parse_mechanism  # noqa: E402
from saag_opt.agents.episode import StepOutcome, run_episode  # noqa: E402
from saag_opt.data.bfcl_environment import gold_calls  # noqa: E402
from saag_opt.data.catalog import load_episodes  # noqa: E402
from saag_opt.episodes import Episode, Judgement, open_environment  # noqa: E402
from saag_opt.testing.episode_agents import gold_replay_agent  # noqa: E402


def replay(episodes: Sequence[Episode], mechanism: str = "none",
           withheld: list[tuple[str, StepOutcome]] | None = None) -> list[Judgement]:
    """Each episode's judgement after a gold replay through the loop, each step through ``mechanism``.

    ``withheld`` collects ``(episode id, step)`` for every gold step the mechanism let nothing of run.
    """
    agent = gold_replay_agent({episode.id: gold_calls(episode) for episode in episodes})
    ctx, review = MechanismContext(), parse_mechanism(mechanism)
    out = []
    for episode in episodes:
        environment = open_environment(episode.environment)
        try:
            outcome = run_episode(episode, environment, agent, None, review, ctx)
            out.append(environment.check(outcome.transcript))
        finally:
            environment.close()
        if withheld is not None:
            withheld.extend((episode.id, step) for step in outcome.steps if step.withheld)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Replay, print per-category counts and seconds, then ``valid=N/M``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="bfcl:multi_turn")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--mechanism", default="none", help="e.g. guard+r1: the cascade-only guard on the gold")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    episodes = load_episodes(args.dataset, limit=args.limit)
    withheld: list[tuple[str, StepOutcome]] = []
    judgements = replay(episodes, args.mechanism, withheld)
    seconds = time.perf_counter() - started
    total, valid = Counter(e.category for e in episodes), Counter(e.category for e, j in zip(episodes, judgements)
                                                                  if j.valid)
    for episode, judgement in zip(episodes, judgements):
        if not judgement.valid:
            print(f"INVALID {episode.id}: {judgement.error_type}: {judgement.message} (turn {judgement.failed_turn})")
    for episode_id, step in withheld:
        ruling = step.outcome.ruling
        print(f"WITHHELD {episode_id} turn {step.turn} step {step.index}: {ruling.reason if ruling else '-'}")
    if args.mechanism != "none":
        injection = sum(1 for _, s in withheld if s.outcome.ruling and s.outcome.ruling.provenance)
        steps = sum(1 for e in episodes for turn in gold_calls(e) if turn)  # the oracle: one step per gold turn
        print(f"mechanism={args.mechanism} gold_steps={steps} withheld={len(withheld)} by_injection_rule={injection}")
    print(f"seconds={seconds:.2f} " + " ".join(f"{c}={valid[c]}/{n}" for c, n in total.items()))
    print(f"valid={sum(valid.values())}/{len(episodes)}")
    return 0 if sum(valid.values()) == len(episodes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
