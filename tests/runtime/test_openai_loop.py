"""The plain OpenAI loop helper, driven by the real openai client against a scripted agent model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from saag_opt.runtime import Guard
from saag_opt.runtime.openai_loop import BLOCKED_PREFIX
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.runtime.world import MESSAGES, TOOLS, ReviewWorld

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


def weather(city: str, unit: str = "celsius") -> dict:
    return {"city": city, "temperature": 21, "unit": unit}


def run_loop(agent_calls: list[list[dict]], guard: Guard) -> tuple[list[dict], list[dict], list, list[dict]]:
    """The README loop: ask the model, guard its calls, run what may run, until it answers in text."""
    replies = iter([Reply(tool_calls=calls) for calls in agent_calls] + [Reply(text="It is 21 degrees in Paris.")])
    ran, decisions = [], []
    with ScriptedOpenAIServer(lambda request: next(replies)) as agent:
        client = OpenAI(base_url=agent.url, api_key="none")
        messages = list(MESSAGES)
        for _ in range(len(agent_calls) + 1):
            reply = client.chat.completions.create(model="agent", messages=messages, tools=TOOLS).choices[0].message
            turn = guard.openai_turn(messages, TOOLS, reply)
            messages += turn.messages
            decisions.append(turn.decision)
            for call in turn.execute:
                ran.append(call)
                messages.append(turn.result(call, weather(**call["arguments"])))
            if not reply.tool_calls:
                break
        requests = [r.body for r in agent.chat_requests]
    return messages, ran, decisions, requests


def test_loop_runs_allowed_and_revised_calls_and_feeds_back_blocks() -> None:
    world = ReviewWorld(revision=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    with ScriptedOpenAIServer(world) as reviewer:
        guard = Guard.load("reviewer@v2", reviewer=f"fake@{reviewer.url}", cache=False, retries=0)
        messages, ran, decisions, requests = run_loop([
            [{"name": "get_weather", "arguments": {"city": "Paris"}}],        # clean: the gate allows it
            [{"name": "get_weather", "arguments": {"citty": "Paris"}}],       # stage 2: revised
        ], guard)
    assert [d.action for d in decisions] == ["allow", "revise", "allow"]
    assert [(c["name"], c["arguments"]) for c in ran] == [("get_weather", {"city": "Paris"})] * 2
    revised_turn = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")][1]
    assert json.loads(revised_turn["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    # every tool_call of every assistant message got its tool message, as the API requires
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert answered == {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []}
    assert requests[-1]["messages"][-1]["role"] == "tool"


def test_blocked_calls_are_answered_with_feedback_and_not_run() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    messages, ran, decisions, requests = run_loop([[{"name": "get_weather", "arguments": {"town": "Paris"}}]], guard)
    assert decisions[0].action == "block" and ran == []
    feedback = [m for m in messages if m["role"] == "tool"][0]["content"]
    assert feedback.startswith(BLOCKED_PREFIX) and "Missing required" in feedback
    assert any(m.get("content") == feedback for m in requests[-1]["messages"])  # the model saw it
