"""OpenAI-format messages, tools and tool calls -> what the reviewer, the reviser and the cascade read.

A live agent hands over whatever its framework holds: dicts or the openai client's pydantic objects,
``tool_calls`` with JSON-string ``arguments`` or ``{"name", "arguments"}`` pairs, function tools with
or without the ``{"type": "function"}`` wrapper. Everything is read into plain dicts once, here.

Decisions:

* Tools become a ``Registry`` through ``Registry.from_dicts`` (the dataset loaders' normalisation).
  Tools of another type (hosted tools such as ``web_search``) cannot be called through
  ``tool_calls`` and are skipped.
* Malformed JSON arguments are kept as the raw string: the cascade fails such a call at stage 2
  ("arguments are not a JSON object"), so it never runs as is; the reviewer sees empty arguments.
* An unknown tool name is kept: stage 1 fails it and names the nearest registered tool.
* Assistant ``tool_calls`` in the history are rendered into the assistant text, and tool results
  become system messages ("Tool result (name): ..."), because the reviser replays the conversation
  to a chat endpoint that would reject a ``tool`` message without its call.
* Arguments are grounded (SAAG stage 3) in the user messages *and* the tool results: in a live loop
  an id returned by an earlier tool is not a hallucination.
* Input that cannot be read at all (tools that are not function definitions, a call without a
  name field, messages that are not a list) raises ``GuardInputError``; ``Guard`` turns it into a
  block decision that says what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from saag_opt.model import Example, Prediction, Registry, ToolCall

RUNTIME_EXAMPLE_ID = "runtime"


class GuardInputError(ValueError):
    """The messages, tools or tool calls handed to the guard cannot be read."""


@dataclass(frozen=True)
class ProposedCall:
    """One call as the agent proposed it: its id (if any), name and raw arguments.

    ``arguments`` is a dict, or the raw string when it was not a JSON object (``malformed``).
    """

    id: str | None
    name: str | None
    arguments: dict[str, Any] | str
    malformed: bool = False

    def for_cascade(self) -> dict[str, Any]:
        """What ``check_calls`` reads (a malformed string stays a string, so stage 2 says so)."""
        return {"name": self.name, "arguments": self.arguments}

    def as_tool_call(self) -> ToolCall:
        """What the reviewer and the reviser see (empty arguments when they were unreadable)."""
        return ToolCall(self.name, self.arguments if isinstance(self.arguments, dict) else {})

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "name", "arguments"}`` (arguments as given when malformed)."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class GuardInput:
    """One review request, read: the example the reviewer sees, the calls, the grounding text."""

    example: Example
    calls: tuple[ProposedCall, ...]
    grounding_text: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]

    @property
    def registry(self) -> Registry:
        return self.example.registry

    @property
    def tentative(self) -> Prediction:
        """The proposed calls as a prediction (raw text = the calls as received)."""
        raw = json.dumps([c.to_dict() for c in self.calls], ensure_ascii=False, default=str)
        return Prediction(tuple(c.as_tool_call() for c in self.calls), raw=raw, status="ok")


def read_input(messages: Any, tools: Any, tool_calls: Any) -> GuardInput:
    """Read one review request (see the module docstring).

    Raises:
        GuardInputError: naming the unreadable message, tool or call.
    """
    plain, grounding = read_messages(messages)
    functions = read_tools(tools)
    try:
        registry = Registry.from_dicts(functions)
    except ValueError as exc:
        raise GuardInputError(f"tools: {exc}") from None
    calls = read_tool_calls(tool_calls)
    example = Example(id=RUNTIME_EXAMPLE_ID, category="runtime", messages=tuple(plain), registry=registry,
                      gold=None, expect="any_call")
    return GuardInput(example, calls, grounding, tuple(plain), tuple(functions))


def _plain(item: Any) -> Any:
    """A dict from a dict or a pydantic object (the openai client's types)."""
    if isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    return item


def read_tools(tools: Any) -> list[dict[str, Any]]:
    """Function definitions (``{"name", "description", "parameters"}``) from OpenAI function tools."""
    if tools is None:
        return []
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise GuardInputError(f"tools must be a list of OpenAI function tools, got {type(tools).__name__}")
    functions = []
    for index, raw in enumerate(tools):
        tool = _plain(raw)
        if not isinstance(tool, Mapping):
            raise GuardInputError(f"tools[{index}] is not an object: {str(raw)[:80]!r}")
        kind = tool.get("type")
        if isinstance(tool.get("function"), Mapping):
            tool = tool["function"]
        elif kind not in (None, "function"):
            continue  # a hosted tool (web_search, file_search, ...): never in tool_calls
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise GuardInputError(f"tools[{index}] has no function name")
        functions.append(dict(tool))
    return functions


def read_tool_calls(tool_calls: Any) -> tuple[ProposedCall, ...]:
    """OpenAI ``tool_calls`` objects, ``{"name", "arguments"}`` pairs or LangChain ``{"name", "args"}``."""
    if tool_calls is None:
        return ()
    items = [tool_calls] if isinstance(tool_calls, Mapping) or hasattr(tool_calls, "model_dump") else tool_calls
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise GuardInputError(f"tool_calls must be a list of calls, got {type(tool_calls).__name__}")
    calls = []
    for index, raw in enumerate(items):
        item = _plain(raw)
        if not isinstance(item, Mapping):
            raise GuardInputError(f"tool_calls[{index}] is not an object: {str(raw)[:80]!r}")
        fn = _plain(item.get("function")) if item.get("function") is not None else item
        if not isinstance(fn, Mapping) or "name" not in fn:
            raise GuardInputError(f"tool_calls[{index}] has no function name")
        name = fn.get("name")
        args = fn.get("arguments", fn.get("args"))
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        calls.append(_call(call_id, name if isinstance(name, str) else None, args))
    return tuple(calls)


def _call(call_id: str | None, name: str | None, args: Any) -> ProposedCall:
    if args is None:
        return ProposedCall(call_id, name, {})
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return ProposedCall(call_id, name, args, malformed=True)
        args = parsed
    if isinstance(args, Mapping):
        return ProposedCall(call_id, name, {str(k): v for k, v in args.items()})
    return ProposedCall(call_id, name, json.dumps(args, default=str), malformed=True)


def _text(content: Any) -> str:
    """Message content as text (content parts joined; other objects as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [_plain(p) for p in content]
        texts = [str(p.get("text", "")) for p in parts if isinstance(p, Mapping) and "text" in p]
        if texts:
            return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, default=str)


def read_messages(messages: Any) -> tuple[list[dict[str, Any]], str]:
    """Plain ``{"role", "content"}`` messages and the grounding text (user messages + tool results)."""
    if messages is None:
        return [], ""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise GuardInputError(f"messages must be a list of chat messages, got {type(messages).__name__}")
    plain: list[dict[str, Any]] = []
    grounding: list[str] = []
    names: dict[str, str] = {}
    for index, raw in enumerate(messages):
        message = _plain(raw)
        if not isinstance(message, Mapping):
            raise GuardInputError(f"messages[{index}] is not an object: {str(raw)[:80]!r}")
        role = str(message.get("role") or "user")
        content = _text(message.get("content"))
        if role == "tool":
            name = names.get(str(message.get("tool_call_id")), message.get("name") or "tool")
            plain.append({"role": "system", "content": f"Tool result ({name}): {content}"})
            grounding.append(content)
            continue
        if role == "assistant" and message.get("tool_calls"):
            shown = []
            for call in read_tool_calls(message.get("tool_calls")):
                names[str(call.id)] = str(call.name)
                args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments,
                                                                                          ensure_ascii=False)
                shown.append(f"{call.name}({args})")
            content = "\n".join(filter(None, [content, "Called: " + "; ".join(shown)]))
        if role == "developer":
            role = "system"
        if role == "user":
            grounding.append(content)
        plain.append({"role": role, "content": content})
    return plain, "\n".join(grounding)


__all__ = ["GuardInput", "GuardInputError", "ProposedCall", "read_input", "read_messages", "read_tool_calls",
           "read_tools"]
