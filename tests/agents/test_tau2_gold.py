"""Gold replay through the project's tau2 agent scores 1.0 by tau2's evaluator (a sample; all tasks:
experiments/bench/tau2_gold_replay.py), and a run converts into the project's episode records."""

from __future__ import annotations

import random
from typing import Any

import pytest

from saag_opt.agents import MechanismContext, NoReview
from saag_opt.agents.tau2 import pass_hat_ks, run_task, trial_seeds
from saag_opt.data.tau2 import TAU2_TASKS, load_tau2
from saag_opt.data.tau2_package import missing
from saag_opt.evaluation.conversation_records import episode_record
from saag_opt.testing.tau2_gold import OPENING, GoldProposer, GoldScript, gold_user, replayable
from tests.conftest import requires

pytestmark = requires(missing())

SAMPLE = {"airline": 2, "retail": 2, "telecom": 3}


def _replay(episode: Any) -> Any:
    script = GoldScript.of(episode)
    return run_task(episode, agent=GoldProposer(script), reviewer=None, mechanism=NoReview(), ctx=MechanismContext(),
                    user=gold_user(script))


def _sample() -> list[Any]:
    out = [e for domain, n in SAMPLE.items() for e in load_tau2(domain)[-n:]]  # the last: the longest telecom ones
    return out + load_tau2("mock")


def test_the_domains_load_with_tau2s_own_splits() -> None:
    airline = load_tau2("airline")
    assert len(airline) == 50 and {e.split for e in airline} == {"train", "test"}
    assert sum(e.split == "test" for e in airline) == 20
    assert all(e.environment == "tau2:airline" and e.turns[0].messages == () for e in airline)
    assert "book_reservation" in airline[0].tools.names
    assert {e.split for e in load_tau2("mock")} == {"test"}  # tau2 gives mock no split
    assert {d: len(load_tau2(d)) for d in TAU2_TASKS} == TAU2_TASKS  # what `datasets list` says


def test_gold_replay_scores_1_on_every_replayable_task_of_a_sample() -> None:
    failed, skipped = [], []
    for episode in _sample():
        if not replayable(episode):
            skipped.append(episode.id)
            continue
        run = _replay(episode)
        if run.reward != 1.0 or not run.judgement.valid:
            failed.append((episode.id, run.reward, dict(run.judgement.checks)))
    assert failed == []
    assert skipped == ["update_task_with_history_and_env_assertions"]


def test_a_run_becomes_an_episode_record_with_user_turns_and_tau2s_reward_breakdown() -> None:
    episode = load_tau2("telecom")[0]
    run = _replay(episode)
    record = episode_record("gold", episode, "base", run.outcome, run.judgement)
    assert record.correct and record.judgement is not None and record.judgement.reward == 1.0
    assert record.judgement.checks == {"env_assertion": True}
    assert record.judgement.details["reward_breakdown"] == {"ENV_ASSERTION": 1.0}
    assert record.turns[0].messages == [{"role": "user", "content": OPENING}]
    executed = [c["name"] for t in record.turns for s in t.steps for c in s.executed]
    gold = [a["name"] for a in episode.gold["actions"] if a["requestor"] == "assistant"]
    assert executed == gold
    trajectory = [c.name for m in run.simulation.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    assert trajectory == gold  # what tau2 scored is what the records say ran


def test_trial_seeds_and_pass_hat_k_are_tau2s() -> None:
    random.seed(300)
    assert trial_seeds(300, 3) == [random.randint(0, 1000000) for _ in range(3)]  # tau2's run_tasks rule
    assert pass_hat_ks({"a": [1.0, 1.0], "b": [1.0, 0.0]}) == pytest.approx({1: 0.75, 2: 0.5})
    assert pass_hat_ks({"a": [1.0, 0.0, 1.0], "b": [0.0]}) == pytest.approx({1: (2 / 3 + 0) / 2})
