"""dspy.ReAct with reviewed tools: DummyLM drives ReAct, a scripted server plays reviewer and reviser."""

from __future__ import annotations

import asyncio
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from saag_opt.runtime import Guard
from saag_opt.testing import ScriptedOpenAIServer
from tests.runtime.world import ReviewWorld

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


def make_react(ran: list[dict]) -> dspy.ReAct:
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather in a city."""
        ran.append({"city": city, "unit": unit})
        return f"21 degrees {unit} in {city}"

    return dspy.ReAct("question -> answer", tools=[get_weather], max_iters=3)


def script(tool_args: dict) -> DummyLM:
    return DummyLM([
        {"next_thought": "Look it up.", "next_tool_name": "get_weather", "next_tool_args": tool_args},
        {"next_thought": "I know it.", "next_tool_name": "finish", "next_tool_args": {}},
        {"reasoning": "From the tool.", "answer": "21 degrees"},
    ])


def run(guard: Guard, tool_args: dict, *, use_async: bool = False) -> tuple[list[dict], dspy.Prediction]:
    ran: list[dict] = []
    react = guard.wrap_react(make_react(ran))
    with dspy.context(lm=script(tool_args)):
        if use_async:
            result = asyncio.run(react.acall(question="What's the weather in Paris?"))
        else:
            result = react(question="What's the weather in Paris?")
    return ran, result


@pytest.mark.parametrize("use_async", [False, True])
def test_revised_call_runs_instead_and_the_observation_says_so(use_async: bool) -> None:
    world = ReviewWorld(revision=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    with ScriptedOpenAIServer(world) as reviewer:
        guard = Guard.load("reviewer@v2", reviewer=f"fake@{reviewer.url}", cache=False, retries=0)
        ran, result = run(guard, {"citty": "Paris"}, use_async=use_async)
        review_request = [r.body for r in reviewer.chat_requests if "tools" not in r.body][0]
    assert ran == [{"city": "Paris", "unit": "celsius"}]
    observation = result.trajectory["observation_0"]
    assert observation.startswith("A reviewer revised this call to get_weather({\"city\": \"Paris\"})")
    assert observation.endswith("21 degrees celsius in Paris")
    assert "What's the weather in Paris?" in review_request["messages"][-1]["content"]  # the reviewer saw the question


def test_clean_call_runs_unchanged() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    ran, result = run(guard, {"city": "Paris"})
    assert ran == [{"city": "Paris", "unit": "celsius"}]
    assert result.trajectory["observation_0"] == "21 degrees celsius in Paris"


def test_blocked_call_becomes_the_observation() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    ran, result = run(guard, {"town": "Paris"})
    assert ran == []
    assert result.trajectory["observation_0"].startswith("Blocked before it ran:")
    assert "Missing required" in result.trajectory["observation_0"]
