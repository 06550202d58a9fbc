"""tau2's user simulator on the project's LM: tau2's prompt and the user's own tools (telecom's phone).

The scripted server plays the user: on telecom's first task it first calls the user tool of the task's
first gold user action, then, after its result, writes text, then stops. The call runs on tau2's
environment as the user's (``requestor="user"``), with a unique id, and the user's request carried
tau2's guidelines, the task's scenario, the user's tools and the trial's seed.
"""

from __future__ import annotations

from typing import Any

import pytest

from saag_opt.agents import MechanismContext, NoReview
from saag_opt.agents.tau2 import (
    DEFAULT_SEED,
    USER_ROLE_REMINDER,
    run_task,
    simulated_user,
    trial_seeds,
    user_reminder_on,
)
from saag_opt.data.tau2 import load_tau2
from saag_opt.data.tau2_package import missing
from saag_opt.testing import Reply, ScriptedOpenAIServer
from saag_opt.testing.tau2_gold import GoldProposer, GoldScript
from tests.conftest import requires

pytestmark = [pytest.mark.integration, requires(missing())]


def test_the_user_simulator_calls_its_own_tools_through_the_project_lm() -> None:
    episode = load_tau2("telecom")[0]
    action = next(a for a in episode.gold["actions"] if a["requestor"] == "user")
    users: list[dict[str, Any]] = []

    def world(request: dict[str, Any]) -> Reply:
        users.append(request)
        said = [m for m in request["messages"] if m["role"] == "tool"]
        if len(users) == 1:
            return Reply(tool_calls=[{"name": action["name"], "arguments": action["arguments"]}])
        return Reply(text="It still does not work." if said and len(users) == 2 else "###STOP###")

    script = GoldScript.of(episode)
    with ScriptedOpenAIServer(world) as server:
        run = run_task(episode, agent=GoldProposer(script), reviewer=None, mechanism=NoReview(),  # type: ignore[arg-type]
                       ctx=MechanismContext(), user=simulated_user(f"fake@{server.url}",
                                                                   call_options={"retries": 0, "cache": False}))
    user_calls = [c for m in run.simulation.messages if m.role == "user" for c in (m.tool_calls or [])]
    assert [(c.name, c.requestor) for c in user_calls] == [(action["name"], "user")]
    results = [m for m in run.simulation.messages if m.role == "tool" and m.requestor == "user"]
    assert len(results) == 1 and results[0].id == user_calls[0].id and not results[0].error
    first = users[0]
    assert "<scenario>" in first["messages"][0]["content"] and first["seed"] == trial_seeds(DEFAULT_SEED, 1)[0]
    assert action["name"] in {t["function"]["name"] for t in first["tools"]}
    assert run.simulation.termination_reason.value == "user_stop"


def _first_turn_requests(reminder: str) -> tuple[list[dict[str, Any]], Any]:
    """Mock's first task with the gold proposer; the scripted user states a request, then stops."""
    episode = load_tau2("mock")[0]
    users: list[dict[str, Any]] = []

    def world(request: dict[str, Any]) -> Reply:
        users.append(request)
        return Reply(text="Please create the task." if len(users) == 1 else "###STOP###")

    with ScriptedOpenAIServer(world) as server:
        run = run_task(episode, agent=GoldProposer(GoldScript.of(episode)), reviewer=None,  # type: ignore[arg-type]
                       mechanism=NoReview(), ctx=MechanismContext(),
                       user=simulated_user(f"fake@{server.url}", reminder=reminder,  # type: ignore[arg-type]
                                           call_options={"retries": 0, "cache": False}))
    return users, run


def test_the_role_reminder_ends_every_user_request_and_stays_out_of_tau2s_trajectory() -> None:
    users, run = _first_turn_requests("on")
    assert len(users) >= 2
    for request in users:
        assert request["messages"][-1] == {"role": "system", "content": USER_ROLE_REMINDER}
        assert "<scenario>" in request["messages"][0]["content"]
        assert request["messages"][1]["role"] == "user"  # tau2's role flip: the agent speaks as "user"
    assert not any(USER_ROLE_REMINDER in str(m.content or "") for m in run.simulation.messages)
    assert run.simulation.termination_reason.value == "user_stop"


def test_an_api_model_user_gets_tau2s_prompt_unchanged_by_default() -> None:
    users, _ = _first_turn_requests("auto")
    assert users and all(USER_ROLE_REMINDER not in str(m.get("content")) for r in users for m in r["messages"])


def test_auto_reminds_the_embedded_model_only() -> None:
    assert user_reminder_on("local") and user_reminder_on("local:qwen2.5-coder-0.5b")
    assert not user_reminder_on("gpt-4o") and not user_reminder_on("local", "off") and user_reminder_on("gpt-4o", "on")
