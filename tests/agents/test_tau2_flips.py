"""The reviewer inside tau2's agent flips a task, scored by tau2's own evaluator; a blocked call never runs.

Every model is the scripted OpenAI-compatible server: the base agent (``Tau2BaseAgent``, native tool
calls), the reviewer (prompt reviewer@v2, dspy's ChatAdapter) and tau2's own ``UserSimulator`` (through
litellm). Retail task ``0``: the agent makes the five gold actions in order, except that its first
proposal of the write call (``exchange_delivered_order_items``) pays with a card the user does not have.
After reviewer feedback it proposes the gold call (revise path), or answers in text first, so the
guard blocks and the agent proposes again on its next step (block path). tau2's orchestrator runs the
conversation, ``evaluate_simulation`` scores it (DB hash + communicate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
import pytest

from saag_opt.agents import BasePredictionCache, MechanismContext, make_reviewer, parse_mechanism
from saag_opt.agents.tau2 import Tau2BaseAgent, run_task, simulated_user
from saag_opt.artifacts import resolve_ref
from saag_opt.data.tau2 import load_tau2
from saag_opt.data.tau2_package import missing
from saag_opt.lm import open_lm
from saag_opt.testing import Reply, ScriptedOpenAIServer, tentative_calls
from tests.conftest import requires
from tests.runtime.world import verdict

pytestmark = [pytest.mark.integration, requires(missing())]

REPO = Path(__file__).resolve().parents[2]
NO_CACHE = {"retries": 0, "cache": False}
"""The user simulator's LM: every request reaches the server (no reply replayed from another test)."""
WRONG_CARD = "credit_card_0000000"
DONE = "Your exchange is complete."


def _episode() -> Any:
    episode = next(e for e in load_tau2("retail") if e.id == "0")
    assert episode.gold["actions"][4]["name"] == "exchange_delivered_order_items"  # the write this file breaks
    return episode


@dataclass
class World:
    """What the scripted server answers (module docstring)."""

    actions: list[dict[str, Any]]
    block: bool = False
    """After feedback the agent first answers in text (the guard then blocks), then proposes the gold call."""
    reviews: list[bool] = field(default_factory=list)
    user_turns: int = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        first = str(messages[0].get("content") or "")
        if "<scenario>" in first:
            return self.user(messages)
        if "tools" not in request:
            return self.review(request)
        return self.agent(messages)

    def user(self, messages: list[dict[str, Any]]) -> Reply:
        self.user_turns += 1
        said = " ".join(str(m.get("content") or "") for m in messages[1:])
        return Reply(text="###STOP###" if DONE in said else "Hi, I want to exchange two items of my order.")

    def review(self, request: dict[str, Any]) -> Reply:
        tentative = tentative_calls(request)
        wrong = WRONG_CARD in tentative
        self.reviews.append(wrong)
        return verdict(wrong, "The user's card on file is credit_card_9513926." if wrong else "")

    def agent(self, messages: list[dict[str, Any]]) -> Reply:
        ran = sum(m["role"] == "system" and str(m["content"]).startswith("Tool result (") for m in messages)
        last_result = max((i for i, m in enumerate(messages) if str(m["content"]).startswith("Tool result (")),
                          default=-1)
        after = [str(m["content"]) for m in messages[last_result + 1:]]
        feedback = any(a.startswith("Reviewer feedback") for a in after)
        noted = any(a.startswith("Not executed:") for a in after)
        if ran >= len(self.actions):
            return Reply(text=DONE)
        action = self.actions[ran]
        arguments = dict(action["arguments"])
        if action["name"] == "exchange_delivered_order_items":
            if self.block and feedback and not noted:
                return Reply(text="Let me look at that again.")
            if not feedback and not noted:
                arguments["payment_method_id"] = WRONG_CARD
        return Reply(tool_calls=[{"name": action["name"], "arguments": arguments}])


def _run(world: World, spec: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(world) as server:
        agent = Tau2BaseAgent(open_lm(f"fake@{server.url}", role="base", retries=0, cache=False))
        reviewer_lm = open_lm(f"fake@{server.url}", role="reviewer", retries=0, cache=False)
        reviewer = make_reviewer(resolve_ref("reviewer@v2"))
        reviewer.set_lm(reviewer_lm)
        with dspy.context(lm=reviewer_lm):
            return run_task(_episode(), agent=agent, reviewer=reviewer, mechanism=parse_mechanism(spec),
                            ctx=MechanismContext(cache=BasePredictionCache()),
                            user=simulated_user(f"fake@{server.url}", call_options=NO_CACHE))


def _trajectory_calls(run: Any) -> list[dict[str, Any]]:
    return [{"name": c.name, "arguments": c.arguments} for m in run.simulation.messages
            for c in (getattr(m, "tool_calls", None) or [])]


def test_a_corrupted_write_call_fails_the_task_without_review(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(_episode().gold["actions"])
    run = _run(world, "none", monkeypatch)
    assert run.reward == 0.0 and not run.judgement.valid
    assert run.judgement.checks == {"db": False, "communicate": True} and run.judgement.error_type == "tau2:db"
    assert any(c["arguments"].get("payment_method_id") == WRONG_CARD for c in _trajectory_calls(run))
    assert world.reviews == [] and world.user_turns >= 2  # tau2's user simulator spoke, then stopped


def test_a_rejection_revises_the_write_call_and_tau2_scores_the_task_1(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(_episode().gold["actions"])
    run = _run(world, "r1", monkeypatch)
    assert run.reward == 1.0 and run.judgement.valid and run.judgement.checks == {"db": True, "communicate": True}
    calls = _trajectory_calls(run)
    assert not any(c["arguments"].get("payment_method_id") == WRONG_CARD for c in calls)
    assert [c["name"] for c in calls] == [a["name"] for a in world.actions]
    revised = [s for s in run.outcome.steps if s.revised]
    assert len(revised) == 1 and [r.verdict for r in revised[0].outcome.rounds] == ["reject"]
    assert world.reviews.count(True) == 1


def test_a_blocked_write_call_never_enters_the_trajectory_and_the_re_proposal_scores_1(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(_episode().gold["actions"], block=True)
    run = _run(world, "guard+r1", monkeypatch)
    assert run.reward == 1.0 and run.judgement.valid
    calls = _trajectory_calls(run)
    assert not any(c["arguments"].get("payment_method_id") == WRONG_CARD for c in calls)  # tau2 would raise on it
    withheld = [s for s in run.outcome.steps if s.withheld]
    assert len(withheld) == 1 and withheld[0].outcome.ruling is not None
    assert withheld[0].outcome.ruling.action == "block" and withheld[0].results == ()
    after = run.outcome.steps[run.outcome.steps.index(withheld[0]) + 1]
    assert after.executed and after.executed[0].name == "exchange_delivered_order_items"
    assert len(run.simulation.messages) == len(_run(World(world.actions), "none", monkeypatch).simulation.messages)
