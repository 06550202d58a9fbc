"""Per-entry overhead of review vs base in a BFCL conversation: saag-opt's own cost, on the scripted server.

No model runs. The scripted OpenAI-compatible server (`saag_opt.testing.ScriptedOpenAIServer`) plays
both models and answers at once: the agent makes each turn's gold calls at step 0 and then answers
in text, the reviewer approves every step. So what is timed is everything saag-opt and BFCL do around
the model calls: building the agent's messages (system prompt, tool docs, the growing history), the
HTTP round trips, the reviewer's dspy program (prompt rendering, reply parsing), the SAAG checks of
`r2`'s set-up, BFCL's backends executing the calls and BFCL's checkers judging the transcript.

Per entry, the base condition (every step through `none`) and the reviewed one (every step through
`--mechanism`, default `r2`) run the same episode on fresh environments; each condition has its own
base-prediction cache and no LM cache, so every proposal and every review is a real request. The
first entry is run once untimed (imports, BFCL's class loading). Entries run one after the other.
Printed: per condition the mean wall seconds per entry, requests per entry and steps per entry;
then the LAST line `ratio=R`, the mean reviewed entry time over the mean base entry time.

Run: python experiments/bench/multiturn_overhead.py [--dataset bfcl:multi_turn_base] [--limit 20]
     [--mechanism r2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("SAAG_OPT_PROMPTS", str(ROOT / "prompts"))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
sys.path.insert(0, str(ROOT))

import dspy  # noqa: E402

from saag_opt.agents import BaseAgent, BasePredictionCache, MechanismContext, make_reviewer, parse_mechanism  # noqa: E402
from saag_opt.agents.episode import run_episode  # noqa: E402
from saag_opt.artifacts import resolve_ref  # noqa: E402
from saag_opt.data.bfcl_environment import gold_calls  # noqa: E402
from saag_opt.data.catalog import load_episodes  # noqa: E402
from saag_opt.episodes import Episode, open_environment  # noqa: E402
from saag_opt.lm import open_lm  # noqa: E402
from saag_opt.model import ToolCall  # noqa: E402
from saag_opt.testing import Reply, ScriptedOpenAIServer  # noqa: E402

APPROVE = "[[ ## error ## ]]\nFalse\n\n[[ ## feedback ## ]]\n\n\n[[ ## completed ## ]]"
"""The reviewer's reply (dspy's ChatAdapter format): no error, no feedback."""


class GoldWorld:
    """The scripted server's behaviour: gold calls at each turn's first step, then text; reviews approve."""

    def __init__(self, episodes: Sequence[Episode]) -> None:
        self.gold: dict[str, tuple[tuple[ToolCall, ...], ...]] = {}
        for episode in episodes:  # an entry is told by its first user message, unique within a category
            key = str(episode.turns[0].messages[0]["content"])
            if key in self.gold:
                raise SystemExit(f"{episode.id} shares its first user message with another entry (the same scenario "
                                 "in two categories): give one category, e.g. --dataset bfcl:multi_turn_base")
            self.gold[key] = gold_calls(episode)

    def __call__(self, request: dict[str, Any]) -> Reply:
        if "tools" not in request:
            return Reply(text=APPROVE)
        messages = request["messages"]
        first = next(m for m in messages if m["role"] == "user")
        gold = self.gold[str(first["content"])]
        turn = sum(m["role"] == "user" for m in messages) - 1
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        called = any(m["role"] == "assistant" and str(m["content"]).startswith("Called:") for m in messages[last + 1:])
        if called or turn >= len(gold) or not gold[turn]:
            return Reply(text="Done.")
        return Reply(tool_calls=[{"name": c.name, "arguments": dict(c.arguments)} for c in gold[turn]])


def run_entry(episode: Episode, url: str, spec: str) -> tuple[float, int, bool]:
    """One condition of one entry: wall seconds (loop and check), steps, and the verdict."""
    mechanism = parse_mechanism(spec)
    agent = BaseAgent(open_lm(f"fake@{url}", role="base", retries=0, cache=False))
    reviewer = None
    reviewer_lm = None
    if mechanism.needs_reviewer:
        reviewer_lm = open_lm(f"fake@{url}", role="reviewer", retries=0, cache=False)
        reviewer = make_reviewer(resolve_ref("reviewer@v2"))
        reviewer.set_lm(reviewer_lm)
    ctx = MechanismContext(cache=BasePredictionCache())
    environment = open_environment(episode.environment)
    started = time.perf_counter()
    try:
        with dspy.context(lm=reviewer_lm) if reviewer_lm is not None else dspy.context():
            outcome = run_episode(episode, environment, agent, reviewer, mechanism, ctx)
        valid = environment.check(outcome.transcript).valid
    finally:
        environment.close()
    return time.perf_counter() - started, len(outcome.steps), valid


def main(argv: Sequence[str] | None = None) -> int:
    """Time base and reviewed runs per entry; print the means, then ``ratio=`` last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="bfcl:multi_turn_base", help="one BFCL multi-turn category")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--mechanism", default="r2")
    args = parser.parse_args(argv)
    episodes = load_episodes(args.dataset, limit=args.limit)
    conditions = ("none", args.mechanism)
    times: dict[str, list[float]] = {c: [] for c in conditions}
    steps: dict[str, list[int]] = {c: [] for c in conditions}
    requests: dict[str, list[int]] = {c: [] for c in conditions}
    invalid: list[str] = []
    with ScriptedOpenAIServer(GoldWorld(episodes)) as server:
        for spec in conditions:  # warm-up: imports, BFCL's classes, dspy's adapter
            run_entry(episodes[0], server.url, spec)
        for episode in episodes:
            for spec in conditions:
                before = len(server.chat_requests)
                seconds, n_steps, valid = run_entry(episode, server.url, spec)
                times[spec].append(seconds)
                steps[spec].append(n_steps)
                requests[spec].append(len(server.chat_requests) - before)
                if not valid:
                    invalid.append(f"{episode.id} ({spec})")
    for spec in conditions:
        print(json.dumps({"condition": spec, "entries": len(times[spec]),
                          "mean_s_per_entry": round(statistics.mean(times[spec]), 4),
                          "median_s_per_entry": round(statistics.median(times[spec]), 4),
                          "requests_per_entry": round(statistics.mean(requests[spec]), 2),
                          "steps_per_entry": round(statistics.mean(steps[spec]), 2)}))
    if invalid:
        print(f"INVALID (the gold replay should be valid): {', '.join(invalid)}")
    ratio = statistics.mean(times[args.mechanism]) / statistics.mean(times["none"])
    print(f"ratio={ratio:.2f}")
    return 1 if invalid else 0


if __name__ == "__main__":
    raise SystemExit(main())
