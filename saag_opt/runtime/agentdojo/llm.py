"""``SaagLLM``: saag-opt's own LLM element, so any saag-opt model spec drives an AgentDojo agent.

AgentDojo's ``OpenAILLM`` sends the system prompt as ``role: "developer"`` and every content as a list
of ``{"type": "text"}`` parts (``agentdojo/agent_pipeline/llms/openai_llm.py``); the request types of
llama-cpp-python's server (the embedded model, ``llama_cpp.server.types``) refuse both, and an
assistant message whose content is null; AgentDojo's ``LocalLLM`` swallows request errors
(``local_llm.py`` answers "" on any error). This element speaks the shape every OpenAI-compatible
server takes: a ``system`` role, plain-string content (an empty string beside tool calls), and it goes
through ``saag_opt.lm`` (``open_lm`` / ``chat_completion``: retries, the LM cache, cost booking), so
``local``, ``openai/<m>@URL``, ``gpt-4o`` and the scripted ``fake@URL`` all work.

Two modes, as the base agent has (``agents.base``):

* ``native``: OpenAI tools in the request, ``tool_calls`` in the reply; the history keeps assistant
  ``tool_calls`` and ``tool`` messages with their ``tool_call_id``.
* ``json`` (``auto`` picks it for specs without native tools, i.e. the embedded model): a JSON-schema
  answer ``{"calls": [{"name", "arguments"}], "answer": "..."}`` (calls to make now, or none and the
  final answer); the history is flattened to system / user / assistant strings (the agent's own turns
  as that JSON, each tool result as a user message naming its tool).

Arguments that are not a JSON object give a call without arguments; SAAG stage 2 (in the guard)
then says what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from saag_opt.runtime.agentdojo import require

require()

from agentdojo.agent_pipeline import BasePipelineElement  # noqa: E402
from agentdojo.functions_runtime import FunctionCall  # noqa: E402
from agentdojo.types import ChatAssistantMessage, text_content_block_from_string  # noqa: E402

from saag_opt.lm import ModelSpec, chat_completion, open_lm, parse_model_spec  # noqa: E402
from saag_opt.runtime.agentdojo.elements import NO_ENV, function_to_openai, to_openai_messages  # noqa: E402

Mode = Literal["auto", "native", "json"]
JSON_INSTRUCTIONS = (
    "\n\nReply with one JSON object {\"calls\": [{\"name\": <function name>, \"arguments\": {...}}, ...], "
    "\"answer\": <text>}. To use tools, list the calls to make now and leave \"answer\" empty; you will see "
    "their results. When the task is done, reply with an empty \"calls\" list and your final answer to the "
    "user in \"answer\".\n\nAvailable functions:\n")


def plain_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """AgentDojo messages for a native-tools request: system role, string content, tool results by id."""
    out = []
    for message in to_openai_messages(messages, readable=False):
        message.pop("name", None)  # not part of the OpenAI tool message; strict servers refuse extra keys
        if message["role"] == "assistant" and message["content"] is None:
            message["content"] = ""  # llama-cpp-python's server wants a string even beside tool_calls
        out.append(message)
    return out


def json_messages(messages: Sequence[Any], tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """AgentDojo messages for a JSON-mode request: system, user and assistant strings only."""
    docs = json.dumps([t["function"] for t in tools], ensure_ascii=False)
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in to_openai_messages(messages, readable=False):
        role = message["role"]
        if role == "system":
            out.append({"role": "system", "content": message["content"] + JSON_INSTRUCTIONS + docs})
        elif role == "assistant":
            calls = []
            for call in message.get("tool_calls") or []:
                names[str(call["id"])] = call["function"]["name"]
                try:
                    args = json.loads(call["function"]["arguments"])
                except ValueError:
                    args = {}
                calls.append({"name": call["function"]["name"], "arguments": args})
            out.append({"role": "assistant", "content": json.dumps({"calls": calls, "answer": message["content"] or ""},
                                                                   ensure_ascii=False)})
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), message.get("name") or "tool")
            out.append({"role": "user", "content": f"Result of {name}: {message['content']}"})
        else:
            out.append({"role": "user", "content": message["content"]})
    if not out or out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": JSON_INSTRUCTIONS.strip() + docs})
    return out


def answer_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of a JSON-mode reply: calls (one option per tool) and the answer."""
    options = [{"type": "object", "properties": {"name": {"type": "string", "enum": [t["function"]["name"]]},
                                                 "arguments": t["function"]["parameters"]},
                "required": ["name", "arguments"]} for t in tools]
    item: dict[str, Any] = {"anyOf": options} if options else {"type": "object"}
    return {"type": "object", "properties": {"calls": {"type": "array", "items": item}, "answer": {"type": "string"}},
            "required": ["calls", "answer"]}


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


REPLY_TOKENS = 1024
"""An agent turn's reply cap: a few calls with their arguments, or a message to the user."""


class SaagLLM(BasePipelineElement):
    """An AgentDojo LLM element on a saag-opt model (module docstring).

    Args:
        model: a spec (``local``, ``openai/<m>@URL``, ``gpt-4o``, ``fake@URL``) or an LM from ``open_lm``.
        mode: ``native`` tools, ``json`` answers, or ``auto`` (json for specs without native tools).
        temperature: sampling temperature (AgentDojo's default is 0).
        max_tokens: cap on each reply (``REPLY_TOKENS``; None = the server's default, which for the
            embedded server is the rest of the context: a small model's JSON reply that never closes
            then runs for minutes).
    """

    def __init__(self, model: Any, *, mode: Mode = "auto", temperature: float = 0.0,
                 max_tokens: int | None = REPLY_TOKENS) -> None:
        spec: Any
        if isinstance(model, (str, ModelSpec)):
            spec = parse_model_spec(model)
            self.lm: Any = open_lm(spec, role="base", temperature=temperature)
        else:
            spec, self.lm = getattr(model, "spec", None), model
        native = getattr(spec, "native_tools", True)
        self.mode: Literal["native", "json"] = ("native" if native else "json") if mode == "auto" else mode
        self.temperature, self.max_tokens = temperature, max_tokens
        self.name = getattr(spec, "label", None) or str(getattr(self.lm, "model", "saag-llm"))

    def query(self, query: str, runtime: Any, env: Any = NO_ENV, messages: Sequence[Any] = (),
              extra_args: dict[str, Any] | None = None) -> tuple[str, Any, Any, Sequence[Any], dict[str, Any]]:
        """One model turn: the reply as an assistant message (tool calls, or the final answer)."""
        tools = [function_to_openai(f) for f in runtime.functions.values()]
        turn = sum(m["role"] == "assistant" for m in messages)
        if self.mode == "native":
            result = chat_completion(self.lm, plain_messages(messages), tools=tools or None,
                                     tool_choice="auto" if tools else None, temperature=self.temperature,
                                     max_tokens=self.max_tokens)
            raw_calls = [(c.get("id"), c.get("name"), c.get("arguments")) for c in result.tool_calls]
            text = result.text
        else:
            result = chat_completion(self.lm, json_messages(messages, tools), temperature=self.temperature,
                                     max_tokens=self.max_tokens, response_format={
                                         "type": "json_schema", "json_schema": {"name": "turn", "schema": answer_schema(tools)}})
            raw_calls, text = self._read_json(result.text)
        calls = [FunctionCall(function=str(name or ""), args=_arguments(args), id=call_id or f"call_{turn}_{i}")
                 for i, (call_id, name, args) in enumerate(raw_calls)]
        reply = ChatAssistantMessage(role="assistant", content=[text_content_block_from_string(text or "")],
                                     tool_calls=calls or None)
        return query, runtime, env, [*messages, reply], dict(extra_args or {})

    @staticmethod
    def _read_json(text: str) -> tuple[list[tuple[Any, Any, Any]], str]:
        """``(calls, answer)`` of a JSON-mode reply; unreadable JSON is the answer text as is."""
        try:
            data = json.loads(text)
        except ValueError:
            return [], text
        if not isinstance(data, dict):
            return [], text
        calls = [(None, c.get("name"), c.get("arguments")) for c in data.get("calls") or [] if isinstance(c, dict)]
        answer = data.get("answer")
        return calls, answer if isinstance(answer, str) else ""


__all__ = ["JSON_INSTRUCTIONS", "SaagLLM", "answer_schema", "json_messages", "plain_messages"]
