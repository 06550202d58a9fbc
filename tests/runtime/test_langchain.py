"""The LangChain v1 middleware, run by a real ``create_agent`` graph with LangChain's own fake chat model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from saag_opt.runtime import Guard
from saag_opt.testing import ScriptedOpenAIServer
from tests.runtime.world import ReviewWorld, needs

pytestmark = [pytest.mark.integration, needs("langchain", "langchain")]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


def run_agent(guard: Guard, call: dict[str, Any], *, use_async: bool = False) -> tuple[list[dict], list]:
    from langchain.agents import create_agent  # noqa: PLC0415 - optional: the langchain extra
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: PLC0415 - optional: the langchain extra
    from langchain_core.messages import AIMessage, HumanMessage  # noqa: PLC0415 - optional: the langchain extra
    from langchain_core.tools import tool  # noqa: PLC0415 - optional: the langchain extra

    ran: list[dict] = []

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather in a city."""
        ran.append({"city": city, "unit": unit})
        return f"21 degrees {unit} in {city}"

    class ToolModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    replies = iter([AIMessage(content="", tool_calls=[{"id": "call_1", **call}]), AIMessage(content="Done.")])
    agent = create_agent(model=ToolModel(messages=replies), tools=[get_weather],
                         middleware=[guard.langchain_middleware([get_weather])])
    state = {"messages": [HumanMessage("What's the weather in Paris?")]}
    result = asyncio.run(agent.ainvoke(state)) if use_async else agent.invoke(state)
    tool_messages = [m for m in result["messages"] if m.type == "tool"]
    return tool_messages, ran


@pytest.mark.parametrize("use_async", [False, True])
def test_revision_is_applied_before_the_tool_runs(use_async: bool) -> None:
    world = ReviewWorld(revision=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    with ScriptedOpenAIServer(world) as reviewer:
        guard = Guard.load("reviewer@v2", reviewer=f"fake@{reviewer.url}", cache=False, retries=0)
        (message,), ran = run_agent(guard, {"name": "get_weather", "args": {"citty": "Paris"}}, use_async=use_async)
    assert ran == [{"city": "Paris", "unit": "celsius"}]
    assert message.content == "21 degrees celsius in Paris" and message.tool_call_id == "call_1"


def test_clean_call_runs_as_proposed() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    (message,), ran = run_agent(guard, {"name": "get_weather", "args": {"city": "Paris", "unit": "fahrenheit"}})
    assert ran == [{"city": "Paris", "unit": "fahrenheit"}]


def test_blocked_call_returns_an_error_tool_message() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    (message,), ran = run_agent(guard, {"name": "get_wether", "args": {"city": "Paris"}})
    assert ran == [] and message.status == "error"
    assert "Blocked before it ran" in message.content and "`get_weather`" in message.content


def test_resume_replays_the_cached_review(tmp_path: Path) -> None:
    world = ReviewWorld(error=True, revision=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    with ScriptedOpenAIServer(world) as reviewer:
        guard = Guard.load("reviewer@v2", reviewer=f"fake@{reviewer.url}", cache=tmp_path, retries=0)
        for _ in range(2):  # LangGraph re-runs a node from its start on resume
            (message,), ran = run_agent(guard, {"name": "get_weather", "args": {"city": "Rome"}})
            assert ran == [{"city": "Paris", "unit": "celsius"}]
    assert world.reviews == 1 and world.revisions == 1
