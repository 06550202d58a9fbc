"""The base agent over real HTTP (scripted OpenAI-compatible server): tools, JSON mode, feedback, retries."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

from saag_opt.agents import BASE_SYSTEM_PROMPT, BaseAgent, FeedbackTurn, registry_json_schema
from saag_opt.agents.base import (
    BASE_PROMPT_HASH,
    CONVERSATION_SYSTEM_PROMPT,
    BasePredictionCache,
    example_fingerprint,
)
from saag_opt.agents.conversation import Conversation
from saag_opt.lm import CostLedger, LMCallError, open_lm
from saag_opt.model import Example, Prediction, Registry, ToolCall, ToolSpec, canonical_json
from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration

FACTORIAL = ToolSpec.from_dict({"name": "math.factorial", "description": "n!",
                                "parameters": {"type": "dict", "properties": {"n": {"type": "integer"}},
                                               "required": ["n"]}})
EXAMPLE = Example(id="f1", category="simple_python", messages=({"role": "user", "content": "What is 5 factorial?"},),
                  registry=Registry([FACTORIAL]), gold=({"math.factorial": {"n": [5]}},))


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


def _agent(server: ScriptedOpenAIServer, mode: str = "auto", **kw: object) -> BaseAgent:
    lm = open_lm(f"fake@{server.url}", role="base", ledger=CostLedger(), retry_base_delay=0.01, **kw)
    return BaseAgent(lm, mode=mode)  # type: ignore[arg-type]


def test_native_tool_call_with_safe_names_mapped_back(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Reply(tool_calls=[{"name": req["tools"][0]["function"]["name"], "arguments": {"n": 5}}]))
    proposal = _agent(server).propose(EXAMPLE)
    request = server.chat_requests[0].body or {}
    assert [t["function"]["name"] for t in request["tools"]] == ["math_factorial"]
    assert request["tool_choice"] == "auto"
    assert "x-bfcl-type" not in json.dumps(request["tools"])
    assert proposal.prediction.calls == (ToolCall("math.factorial", {"n": 5}),)
    assert proposal.prediction.status == "ok" and proposal.tokens > 0 and proposal.attempts == 1
    assert request["messages"][0] == {"role": "system", "content": BASE_SYSTEM_PROMPT}


def test_unknown_tool_names_are_kept_for_saag_stage1(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Reply(tool_calls=[{"name": "math_factorial_v2", "arguments": {"n": 5}}]))
    assert _agent(server).propose(EXAMPLE).prediction.calls[0].name == "math_factorial_v2"


def test_plain_text_reply_is_an_abstention(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Reply(text="None of the functions can do that."))
    pred = _agent(server).propose(EXAMPLE).prediction
    assert pred.abstained and pred.status == "empty" and pred.raw == "None of the functions can do that."


def test_feedback_is_injected_after_the_previous_call(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Reply(tool_calls=[{"name": "math_factorial", "arguments": {"n": 5}}]))
    previous = Prediction((ToolCall("math.factorial", {"n": 6}),))
    _agent(server).propose(EXAMPLE, feedback=[FeedbackTurn(previous, "n should be 5"), (previous, "still wrong")])
    messages = (server.chat_requests[0].body or {})["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "system", "assistant", "system"]
    assert '"n": 6' in messages[2]["content"] and "math.factorial" in messages[2]["content"]
    assert "n should be 5" in messages[3]["content"] and "still wrong" in messages[5]["content"]
    assert "tool_calls" not in messages[2]  # shown as content: no dangling tool_call ids


def test_json_mode_constrains_with_an_anyof_schema_that_allows_no_call(server: ScriptedOpenAIServer) -> None:
    replies = iter(['{"calls": [{"name": "math.factorial", "arguments": {"n": 5}}]}', '{"calls": []}'])
    server.reset(lambda req: Reply(text=next(replies)))
    agent = _agent(server, mode="json")
    first, second = agent.propose(EXAMPLE).prediction, agent.propose(EXAMPLE, temperature=0.5).prediction
    request = server.chat_requests[0].body or {}
    schema = request["response_format"]["json_schema"]["schema"]
    assert request["response_format"]["type"] == "json_schema" and "tools" not in request
    assert schema == registry_json_schema(EXAMPLE)
    item = schema["properties"]["calls"]["items"]["anyOf"][0]
    assert item["properties"]["name"] == {"type": "string", "enum": ["math.factorial"]}
    assert "minItems" not in schema["properties"]["calls"]  # empty list = abstain is allowed
    assert "math.factorial" in request["messages"][0]["content"]  # tool docs are in the prompt
    assert first.calls == (ToolCall("math.factorial", {"n": 5}),)
    assert second.abstained and second.status == "empty"


def test_unparsable_replies_are_retried_then_kept_as_unparsable(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Reply(text='{"name": "math.factorial", "arguments": {"n": '))
    proposal = _agent(server).propose(EXAMPLE)
    assert proposal.prediction.status == "unparsable" and proposal.attempts == 3
    assert len(server.chat_requests) == 3
    retry = (server.chat_requests[1].body or {})["messages"]
    assert retry[-1]["role"] == "system" and "could not be read" in retry[-1]["content"]


def test_unparsable_then_valid_recovers(server: ScriptedOpenAIServer) -> None:
    broken, fixed = '{"name": "math.factorial", "arguments": {"n": ', "math.factorial(n=5)"
    server.reset(lambda req: Reply(text=broken if len(req["messages"]) == 2 else fixed))
    proposal = _agent(server).propose(EXAMPLE)
    assert proposal.prediction.calls == (ToolCall("math.factorial", {"n": 5}),) and proposal.attempts == 2


@pytest.mark.parametrize("fault", [Fault(429), Fault(500), Fault("garbage"), Fault("empty"), Fault("reset")])
def test_transient_faults_are_retried(server: ScriptedOpenAIServer, fault: Fault) -> None:
    server.reset(lambda req: Reply(tool_calls=[{"name": "math_factorial", "arguments": {"n": 5}}]))
    server.inject([fault, fault])
    proposal = _agent(server).propose(EXAMPLE)
    assert proposal.prediction.calls == (ToolCall("math.factorial", {"n": 5}),)
    assert len(server.chat_requests) == 3


def test_timeouts_are_retried(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Reply(tool_calls=[{"name": "math_factorial", "arguments": {"n": 5}}]))
    server.inject([Fault("timeout", delay=3.0)])
    proposal = _agent(server, timeout=0.5).propose(EXAMPLE)
    assert proposal.prediction.calls[0].arguments == {"n": 5}


def test_persistent_failure_raises_for_the_runner_to_record(server: ScriptedOpenAIServer) -> None:
    server.reset(lambda req: Fault(500))
    lm = open_lm(f"fake@{server.url}", role="base", retries=1, retry_base_delay=0.01)
    with pytest.raises(LMCallError, match="after 2 attempt"):
        BaseAgent(lm).propose(EXAMPLE)


def test_spec_strings_open_the_lm_once_and_pick_the_mode(server: ScriptedOpenAIServer) -> None:
    agent = BaseAgent(f"fake@{server.url}", ledger=CostLedger())
    assert agent.mode == "native" and agent.label.startswith("fake-at-127.0.0.1")
    assert agent.prompt_hash.endswith("-native")
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        BaseAgent(f"fake@{server.url}", max_attempts=0)



def test_a_conversation_step_gets_the_multi_step_prompt_and_single_calls_keep_theirs(
        server: ScriptedOpenAIServer) -> None:
    conversation = Conversation("e1")
    conversation.user(EXAMPLE.messages)
    step = conversation.step(0, 0, EXAMPLE.registry, "multi_turn_base")
    server.reset(lambda req: Reply(text="Done."))
    agent = _agent(server)
    agent.propose(step)
    agent.propose(EXAMPLE)
    first, second = (r.body or {} for r in server.chat_requests)
    assert first["messages"][0] == {"role": "system", "content": CONVERSATION_SYSTEM_PROMPT}
    assert "in one turn" not in CONVERSATION_SYSTEM_PROMPT and "several steps" in CONVERSATION_SYSTEM_PROMPT
    assert second["messages"][0] == {"role": "system", "content": BASE_SYSTEM_PROMPT}
    # single-call prompts keep their bytes (the hash main had), so every single-call cache key is unchanged;
    # a step's key also names the conversation prompt
    assert BASE_PROMPT_HASH == "34ca0bd6367aba0c"
    cache = BasePredictionCache()
    single = hashlib.sha256(canonical_json([agent.label, agent.prompt_hash, EXAMPLE.id, example_fingerprint(EXAMPLE),
                                            0.0]).encode()).hexdigest()
    assert cache.key(agent, EXAMPLE, None) == single
    as_plain = Example(id=step.id, category=step.category, messages=step.messages, registry=step.registry,
                       expect="any_call")
    assert cache.key(agent, step, None) != cache.key(agent, as_plain, None)
