"""The JSON-mode tau2 agent (the embedded model has no native tool calls): calls or a message, scored by tau2.

The scripted server answers the agent in ``{"calls": [...], "message": "..."}`` only (no ``tool_calls``),
the reviewer in dspy's ChatAdapter form, and tau2's user simulator in text. Mock task ``create_task_1``:
the agent's first proposal misspells the title; unreviewed tau2 scores 0, with ``r1`` the revision runs
and tau2 scores 1; the agent's last word is the JSON ``message``, which reaches the user.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest

from saag_opt.agents import BasePredictionCache, MechanismContext, make_reviewer, parse_mechanism
from saag_opt.agents.tau2 import TAU2_JSON_SUFFIX, Tau2BaseAgent, run_task, simulated_user
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
RIGHT, WRONG = "Important Meeting", "Important Meting"
DONE = "The task is created."


class World:
    """Agent (JSON only), reviewer and user simulator; keeps the agent's requests."""

    def __init__(self) -> None:
        self.agent_requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        if "<scenario>" in str(messages[0].get("content") or ""):
            said = " ".join(str(m.get("content") or "") for m in messages[1:])
            return Reply(text="###STOP###" if DONE in said else "Please create a task 'Important Meeting' for user_1.")
        if (request.get("response_format") or {}).get("type") != "json_schema":
            wrong = WRONG in tentative_calls(request)
            return verdict(wrong, f"The user asked for the title '{RIGHT}'." if wrong else "")
        self.agent_requests.append(request)
        if any(str(m["content"]).startswith("Tool result (") for m in messages):
            return Reply(text=json.dumps({"calls": [], "message": DONE}))
        title = RIGHT if any(str(m["content"]).startswith("Reviewer feedback") for m in messages) else WRONG
        return Reply(text=json.dumps({"calls": [{"name": "create_task", "arguments": {"user_id": "user_1", "title": title}}],
                                      "message": ""}))


def _run(spec: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, World]:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    world = World()
    episode = next(e for e in load_tau2("mock") if e.id == "create_task_1")
    with ScriptedOpenAIServer(world) as server:
        agent = Tau2BaseAgent(open_lm(f"fake@{server.url}", role="base", retries=0, cache=False), mode="json")
        reviewer_lm = open_lm(f"fake@{server.url}", role="reviewer", retries=0, cache=False)
        reviewer = make_reviewer(resolve_ref("reviewer@v2"))
        reviewer.set_lm(reviewer_lm)
        with dspy.context(lm=reviewer_lm):
            run = run_task(episode, agent=agent, reviewer=reviewer, mechanism=parse_mechanism(spec),
                           ctx=MechanismContext(cache=BasePredictionCache()),
                            user=simulated_user(f"fake@{server.url}", call_options=NO_CACHE))
    return run, world


def test_json_mode_sends_tau2s_prompt_and_a_schema_that_allows_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    run, world = _run("none", monkeypatch)
    assert run.reward == 0.0 and run.judgement.checks["db"] is False  # the misspelt title ran
    first = world.agent_requests[0]
    assert "tools" not in first and first["messages"][0]["role"] == "system"
    system = first["messages"][0]["content"]
    assert "<policy>" in system and TAU2_JSON_SUFFIX in system and '"create_task"' in system
    schema = first["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["calls", "message"] and schema["properties"]["message"] == {"type": "string"}
    texts = [m.content for m in run.simulation.messages if m.role == "assistant" and not m.tool_calls]
    assert texts[-1] == DONE  # the JSON message went to the user as text


def test_json_mode_with_a_reviewer_revises_the_call_and_tau2_scores_1(monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = _run("r1", monkeypatch)
    assert run.reward == 1.0 and run.judgement.valid
    calls = [c.arguments for m in run.simulation.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    assert calls == [{"user_id": "user_1", "title": RIGHT}]
    (step,) = [s for s in run.outcome.steps if s.proposed.calls]
    assert step.revised and [r.verdict for r in step.outcome.rounds] == ["reject"]
