"""``ScriptedWorld`` recognises each role from the requests the project's own agents send, and decodes them.

Each test runs a real agent (the base agent, the reviewer's predictors, dspy's GEPA rewrite, the edit
proposer, tau2's user) through dspy/the LM client to a scripted server, and checks the role the world
saw, the fields it decoded and that the agent read the world's reply back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dspy
import pytest

from saag_opt.agents import Reviewer, SaagInformedReviewer
from saag_opt.agents.base import BaseAgent, FeedbackTurn
from saag_opt.lm import open_lm
from saag_opt.model import Prediction
from saag_opt.testing import Reply, ScriptedOpenAIServer, ScriptedWorld, UnknownRequest, read_request
from saag_opt.testing.scripted_world import BaseRequest, ReflectRequest, ReviewRequest
from tests.agents.agent_fakes import GOOD, UNGROUNDED, call, weather_example


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


def _lm(server: ScriptedOpenAIServer, role: str) -> Any:
    return open_lm(f"fake@{server.url}", role=role, cache=False, retries=0)


def test_the_base_agent_is_recognised_and_a_revision_carries_the_reviewers_feedback(
        server: ScriptedOpenAIServer) -> None:
    def base(request: BaseRequest) -> list[dict[str, Any]]:
        return [{"name": "get_weather", "arguments": {"city": "Boston" if request.revising else "Paris"}}]

    world = ScriptedWorld(base=base)
    server.reset(world)
    agent = BaseAgent(_lm(server, "base"))
    first = agent.propose(weather_example())
    revised = agent.propose(weather_example(), feedback=[FeedbackTurn(UNGROUNDED, "The user asked about Boston.")])
    assert first.prediction.calls[0].arguments == {"city": "Paris"}
    assert revised.prediction.calls[0].arguments == {"city": "Boston"}
    seen = world.of("base")
    assert [type(r) for r in world.seen] == [BaseRequest, BaseRequest] and len(seen) == 2
    assert isinstance(seen[0], BaseRequest) and isinstance(seen[1], BaseRequest)
    assert seen[0].tools == ("get_weather",) and not seen[0].revising
    assert seen[0].user_text == "What's the weather in Boston right now?"
    assert seen[1].feedback == ("The user asked about Boston.",)


def test_the_base_agent_in_json_mode_is_recognised_without_tools(server: ScriptedOpenAIServer) -> None:
    world = ScriptedWorld(base=lambda request: json.dumps({"calls": [{"name": "get_weather",
                                                                       "arguments": {"city": "Boston"}}]}))
    server.reset(world)
    proposal = BaseAgent(_lm(server, "base"), mode="json").propose(weather_example())
    assert proposal.prediction.calls[0].arguments == {"city": "Boston"}
    assert world.count("base") == 1 and "tools" not in world.seen[0].body


def test_the_review_predictor_is_recognised_with_its_decoded_inputs_and_instructions(
        server: ScriptedOpenAIServer) -> None:
    world = ScriptedWorld(review=lambda r: ("Paris" in r.tentative_calls, "Use the city the user named."))
    server.reset(world)
    reviewer = Reviewer.from_prompt({"review": "Check every value.\nReject a city the user did not name."})
    with dspy.context(lm=_lm(server, "reviewer")):
        rejected = reviewer.review_call(weather_example(), UNGROUNDED)
        approved = reviewer.review_call(weather_example(), GOOD)
    assert (rejected.error, rejected.feedback, rejected.failed) == (True, "Use the city the user named.", None)
    assert (approved.error, approved.failed) == (False, None)
    request = world.of("review")[0]
    assert isinstance(request, ReviewRequest)
    assert request.conversation == "user: What's the weather in Boston right now?"
    assert json.loads(request.tentative_calls) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert json.loads(request.tool_docs)[0]["name"] == "get_weather" and request.saag_report is None
    assert request.instructions == "Check every value.\nReject a city the user did not name."


def test_the_informed_reviewer_is_a_review_with_its_saag_report(server: ScriptedOpenAIServer) -> None:
    world = ScriptedWorld(review=lambda r: False)
    server.reset(world)
    reviewer = SaagInformedReviewer.from_prompt({"review": "Read the report."})
    with dspy.context(lm=_lm(server, "reviewer")):
        verdict = reviewer.review_call(weather_example(), UNGROUNDED)
    assert verdict.error is False and verdict.failed is None
    request = world.of("review")[0]
    assert isinstance(request, ReviewRequest) and request.saag_report is not None
    assert request.saag_report == reviewer.review_inputs(weather_example(), UNGROUNDED)["saag_report"]


def test_select_and_grade_are_recognised_and_their_answers_read_back(server: ScriptedOpenAIServer) -> None:
    world = ScriptedWorld(select=lambda r: 1 if "Boston" in r.candidates.splitlines()[1] else 0,
                          grade=lambda r: (0.25, "the city is not the user's") if "Paris" in r.candidate else 0.75)
    server.reset(world)
    reviewer = Reviewer()
    with dspy.context(lm=_lm(server, "reviewer")):
        index, failure = reviewer.select_candidate(weather_example(), [UNGROUNDED, GOOD])
        low = reviewer.grade_candidate(weather_example(), UNGROUNDED)
        high = reviewer.grade_candidate(weather_example(), GOOD)
    assert (index, failure) == (1, None)
    assert (low.score, low.rationale, high.score) == (0.25, "the city is not the user's", 0.75)
    assert [r.role for r in world.seen] == ["select", "grade", "grade"]
    assert world.of("select")[0].fields["candidates"].startswith("[0] ")  # type: ignore[attr-defined]


def test_dspys_gepa_rewrite_is_a_reflection_with_its_examples(server: ScriptedOpenAIServer) -> None:
    from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer  # noqa: PLC0415 - only here

    world = ScriptedWorld(reflect=lambda r: r.current_instruction + " Reject invented cities.")
    server.reset(world)
    dataset = {"review": [{"Inputs": {"tentative_calls": '[{"city": "Paris"}]'},
                           "Generated Outputs": {"error": False}, "Feedback": "missed error"}]}
    with dspy.context(lm=_lm(server, "reflection")):
        out = InstructionProposer(additional_instructions="Stay general.")({"review": "Check."}, dataset, ["review"])
    assert out == {"review": "Check. Reject invented cities."}
    request = world.of("reflect")[0]
    assert isinstance(request, ReflectRequest) and request.as_json
    assert request.examples == dataset["review"] and request.fields["additional_instructions"] == "Stay general."


def test_the_edit_proposer_is_recognised_by_its_schema(server: ScriptedOpenAIServer) -> None:
    from saag_opt.optimize.edit_proposer import EditProposer  # noqa: PLC0415 - only here

    world = ScriptedWorld(edit=lambda r: {"op": "add", "rule": 0, "text": "Reject a city the user did not name."})
    server.reset(world)
    items = [{"Inputs": {"conversation": "user: weather in Boston", "tentative_calls": '[{"city": "Paris"}]'},
              "Generated Outputs": {"error": False, "feedback": ""}, "Feedback": "Outcome: missed error."}]
    child = EditProposer(_lm(server, "reflection")).propose("review", "1. Check the calls.", items)
    assert child is not None and "Reject a city the user did not name." in child
    request = world.of("edit")[0]
    assert "weather in Boston" in request.prompt and request.schema  # type: ignore[attr-defined]


def test_an_unknown_request_is_an_error_that_names_what_it_carried(server: ScriptedOpenAIServer) -> None:
    body = {"messages": [{"role": "system", "content": "You are a poet."}, {"role": "user", "content": "A haiku"}]}
    with pytest.raises(UnknownRequest, match=r"no role of ScriptedWorld .* first message='You are a poet\.'"):
        read_request(body)
    world = ScriptedWorld(base=lambda r: "hi")
    server.reset(world)
    with pytest.raises(Exception, match="UnknownRequest"):
        _lm(server, "base")("A haiku")
    assert world.seen == [] and [r.outcome for r in server.chat_requests] == ["handler-error"]


def test_a_role_without_a_script_says_which_hook_is_missing(server: ScriptedOpenAIServer) -> None:
    world = ScriptedWorld(base=lambda r: "hi")
    server.reset(world)
    with dspy.context(lm=_lm(server, "reviewer")), pytest.raises(Exception, match="has no review script"):
        Reviewer().review_call(weather_example(), GOOD)
    with pytest.raises(TypeError, match=r"unknown role hook\(s\) \['reviw'\]"):
        ScriptedWorld(reviw=lambda r: False)


def test_a_subclass_answers_by_overriding_the_role_method(server: ScriptedOpenAIServer) -> None:
    class Approving(ScriptedWorld):
        def review(self, request: ReviewRequest) -> Any:
            return Reply(text="not a dspy reply")  # sent as is: the reviewer cannot read it

    server.reset(Approving())
    with dspy.context(lm=_lm(server, "reviewer")):
        verdict = Reviewer().review_call(weather_example(), call(city="Boston"))
    assert verdict.failed is not None and not verdict.error


def test_tau2s_user_simulator_is_the_user() -> None:
    from saag_opt.agents import MechanismContext, NoReview  # noqa: PLC0415 - tau2 only here
    from saag_opt.agents.tau2 import run_task, simulated_user  # noqa: PLC0415
    from saag_opt.data.tau2 import load_tau2  # noqa: PLC0415
    from saag_opt.data.tau2_package import missing  # noqa: PLC0415
    from saag_opt.testing.tau2_gold import GoldProposer, GoldScript  # noqa: PLC0415

    if missing():
        pytest.skip(missing() or "")
    episode = load_tau2("mock")[0]
    world = ScriptedWorld(user=lambda r: "Please create the task." if len(world.seen) == 1 else "###STOP###")
    with ScriptedOpenAIServer(world) as server:
        run = run_task(episode, agent=GoldProposer(GoldScript.of(episode)), reviewer=None,  # type: ignore[arg-type]
                       mechanism=NoReview(), ctx=MechanismContext(),
                       user=simulated_user(f"fake@{server.url}", call_options={"retries": 0, "cache": False}))
    assert world.count("user") >= 2 and world.count("user") == len(world.seen)
    assert run.simulation.termination_reason.value == "user_stop"


def test_read_request_classifies_a_recorded_log(server: ScriptedOpenAIServer) -> None:
    world = ScriptedWorld(base=lambda r: [{"name": "get_weather", "arguments": {"city": "Boston"}}], review=lambda r: False)
    server.reset(world)
    agent = BaseAgent(_lm(server, "base"))
    prediction = agent.propose(weather_example()).prediction
    with dspy.context(lm=_lm(server, "reviewer")):
        Reviewer().review_call(weather_example(), prediction)
    assert [read_request(r.body or {}).role for r in server.chat_requests] == ["base", "review"]
    assert isinstance(prediction, Prediction)
