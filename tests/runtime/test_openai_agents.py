"""The OpenAI Agents SDK guardrail, run by the real SDK against a scripted chat-completions model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from saag_opt.runtime import Guard
from saag_opt.runtime.openai_agents import guard_agent, items_to_messages
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.runtime.world import ReviewWorld, needs

pytestmark = [pytest.mark.integration, needs("agents", "agents")]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


@pytest.fixture(autouse=True)
def agents():  # the SDK, imported once its requires mark has let the test run
    import agents  # noqa: PLC0415 - optional: the agents extra

    agents.set_tracing_disabled(True)
    return agents


def run_agent(guard: Guard, first_call: dict) -> tuple[list[dict], list, object]:
    """One run: the scripted model proposes ``first_call``, then answers in text."""
    import agents  # noqa: PLC0415 - optional: the agents extra

    ran: list[dict] = []

    @agents.function_tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather in a city.

        Args:
            city: city name.
            unit: celsius or fahrenheit.
        """
        ran.append({"city": city, "unit": unit})
        return f"21 degrees {unit} in {city}"

    replies = iter([Reply(tool_calls=[first_call]), Reply(text="Done.")])
    with ScriptedOpenAIServer(lambda request: next(replies)) as model_server:
        model = agents.OpenAIChatCompletionsModel(
            model="agent", openai_client=AsyncOpenAI(base_url=model_server.url, api_key="none"))
        agent = agents.Agent(name="weather", instructions="Answer weather questions.", tools=[get_weather],
                             model=model)

        guard_agent(guard, agent)
        result = agents.Runner.run_sync(agent, "What's the weather in Paris?")
        requests = [r.body for r in model_server.chat_requests]
    return requests, ran, result


def _tool_outputs(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_clean_call_runs() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    requests, ran, result = run_agent(guard, {"name": "get_weather", "arguments": {"city": "Paris"}})
    assert ran == [{"city": "Paris", "unit": "celsius"}]
    assert _tool_outputs(requests[1]) == ["21 degrees celsius in Paris"]
    assert result.final_output == "Done."


def test_revision_becomes_reject_content_with_the_suggested_call() -> None:
    world = ReviewWorld(error=True, feedback="The user asked about Paris.")
    with ScriptedOpenAIServer(world) as reviewer:
        guard = Guard.load("reviewer@v2", reviewer=f"fake@{reviewer.url}", cache=False, retries=0)
        requests, ran, _ = run_agent(guard, {"name": "get_weather", "arguments": {"city": "London"}})
    assert ran == []  # the SDK cannot rewrite arguments: nothing ran
    (output,) = _tool_outputs(requests[1])
    assert "The user asked about Paris." in output
    assert 'Suggested call: get_weather({"city": "Paris"})' in output
    assert world.reviews == 1


def test_blocked_call_does_not_run_and_the_model_reads_why() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    requests, ran, _ = run_agent(guard, {"name": "get_weather", "arguments": json.dumps({"town": "Paris"})})
    assert ran == []
    (output,) = _tool_outputs(requests[1])
    assert "blocked before it ran" in output and "Missing required" in output


def test_the_guardrail_sees_the_run_input_and_the_agent_tools(agents) -> None:
    messages = items_to_messages([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                                  {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                                  {"type": "function_call_output", "call_id": "c1", "output": "ok"}], "Be brief.")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    guardrail = Guard.load(reviewer=None, mechanism="none", cache=False).openai_agents_guardrail()
    assert isinstance(guardrail, agents.ToolInputGuardrail) and guardrail.get_name() == "saag_guard"
