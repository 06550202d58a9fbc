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
* Where text came from is kept too (``GuardInput.sources``: the user's messages, the system
  messages, each tool result with its tool's name and the arguments of the call that produced it)
  for the injection check (``saag.injection``) and the data-flow policy (``saag.flow``), which need
  to tell the user's words from tool text, and a result the user's request names from any other.
* Input that cannot be read at all (tools that are not function definitions, a call without a
  name field, messages that are not a list) raises ``GuardInputError``; ``Guard`` turns it into a
  block decision that says what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from saag_opt.model import Example, Prediction, Registry, ToolCall
from saag_opt.saag.injection import Sources, ToolText

RUNTIME_EXAMPLE_ID = "runtime"
_NO_SOURCES = Sources()  # no tool result: the injection check has nothing to read


class GuardInputError(ValueError):
    """The messages, tools or tool calls handed to the guard cannot be read."""


class ProposedCall(NamedTuple):
    """One call as the agent proposed it: its id (if any), name and raw arguments.

    ``arguments`` is a dict, or the raw string when it was not a JSON object (``malformed``).
    A named tuple: one is built per proposed call on the hot path.
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
    """One review request, read: the registry, the calls, the grounding text and the messages."""

    registry: Registry
    calls: tuple[ProposedCall, ...]
    grounding_text: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    sources: Sources = _NO_SOURCES
    """The texts by source (user, system, each tool result) for the injection check."""

    @cached_property
    def example(self) -> Example:
        """What the reviewer and the reviser see (built only when an LM is asked).

        With tool results in view it is a conversation step (``StepExample``), as ``evaluate`` reviews one,
        so the reviewer is told where each value of the calls comes from; without, a plain example as before.
        """
        if self.sources.tools:
            from saag_opt.agents.conversation import StepExample  # noqa: PLC0415 - heavy: the agents package loads dspy

            return StepExample(id=RUNTIME_EXAMPLE_ID, category="runtime", messages=self.messages,
                               registry=self.registry, gold=None, expect="any_call", grounding=self.grounding_text,
                               sources=self.sources)
        return Example(id=RUNTIME_EXAMPLE_ID, category="runtime", messages=self.messages, registry=self.registry,
                       gold=None, expect="any_call")

    @property
    def tentative(self) -> Prediction:
        """The proposed calls as a prediction (raw text = the calls as received)."""
        raw = json.dumps([c.to_dict() for c in self.calls], ensure_ascii=False, default=str)
        return Prediction(tuple(c.as_tool_call() for c in self.calls), raw=raw, status="ok")


class RegistryMemo:
    """Registries by the identity of the ``tools`` list an agent passes on every turn.

    An agent loop hands over the same list of the same tool dicts turn after turn; converting
    it once per list saves most of a gate decision's input reading. A hit needs the same list
    object holding the same dict objects; editing a tool dict in place is not seen: pass a new
    list after changing a definition (or ``clear()``).
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: dict[int, tuple[Any, tuple[int, ...], tuple[dict[str, Any], ...], Registry]] = {}

    def get(self, tools: Any) -> tuple[tuple[dict[str, Any], ...], Registry] | None:
        """The function dicts and registry read from this very list, or None."""
        entry = self._entries.get(id(tools))
        if entry is None or entry[0] is not tools or entry[1] != tuple(map(id, tools)):
            return None
        return entry[2], entry[3]

    def put(self, tools: Any, functions: tuple[dict[str, Any], ...], registry: Registry) -> None:
        """Remember what ``tools`` was read as (lists only; the oldest entry goes when full)."""
        if type(tools) is not list:
            return  # only lists are worth it (a tuple literal is rebuilt each turn anyway)
        entries = self._entries  # single dict operations are atomic: no lock on the hot path
        if len(entries) >= self.size:
            entries.pop(next(iter(entries)), None)
        entries[id(tools)] = (tools, tuple(map(id, tools)), functions, registry)

    def clear(self) -> None:
        """Forget every list (after editing a tool definition in place)."""
        self._entries.clear()


def read_input(messages: Any, tools: Any, tool_calls: Any, memo: RegistryMemo | None = None) -> GuardInput:
    """Read one review request (see the module docstring).

    Raises:
        GuardInputError: naming the unreadable message, tool or call.
    """
    plain, grounding, sources = _read_messages(messages)
    known = memo.get(tools) if memo is not None and tools is not None else None
    if known is None:
        functions = tuple(read_tools(tools))
        try:
            registry = Registry.from_dicts(functions)
        except ValueError as exc:
            raise GuardInputError(f"tools: {exc}") from None
        if memo is not None:
            memo.put(tools, functions, registry)
    else:
        functions, registry = known
    return GuardInput(registry, read_tool_calls(tool_calls), grounding, tuple(plain), functions, sources)


def _is_map(value: Any) -> bool:
    """``isinstance(value, Mapping)`` with a fast path for plain dicts (ABC checks are slow)."""
    return type(value) is dict or isinstance(value, Mapping)


def _is_list(value: Any) -> bool:
    """A list-like of items (not a string)."""
    return type(value) is list or (isinstance(value, Sequence) and not isinstance(value, (str, bytes)))


def _plain(item: Any) -> Any:
    """A dict from a dict or a pydantic object (the openai client's types)."""
    if _is_map(item):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    return item


def read_tools(tools: Any) -> list[dict[str, Any]]:
    """Function definitions (``{"name", "description", "parameters"}``) from OpenAI function tools."""
    if tools is None:
        return []
    if not _is_list(tools):
        raise GuardInputError(f"tools must be a list of OpenAI function tools, got {type(tools).__name__}")
    functions = []
    for index, raw in enumerate(tools):
        tool = raw if type(raw) is dict else _plain(raw)  # plain dicts (the usual input) skip two calls
        if type(tool) is not dict and not _is_map(tool):
            raise GuardInputError(f"tools[{index}] is not an object: {str(raw)[:80]!r}")
        kind, function = tool.get("type"), tool.get("function")
        if type(function) is dict or _is_map(function):
            tool = function
        elif kind not in (None, "function"):
            continue  # a hosted tool (web_search, file_search, ...): never in tool_calls
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise GuardInputError(f"tools[{index}] has no function name")
        functions.append(tool if type(tool) is dict else dict(tool))
    return functions


def read_tool_calls(tool_calls: Any) -> tuple[ProposedCall, ...]:
    """OpenAI ``tool_calls`` objects, ``{"name", "arguments"}`` pairs or LangChain ``{"name", "args"}``."""
    if tool_calls is None:
        return ()
    items = [tool_calls] if _is_map(tool_calls) or hasattr(tool_calls, "model_dump") else tool_calls
    if not _is_list(items):
        raise GuardInputError(f"tool_calls must be a list of calls, got {type(tool_calls).__name__}")
    calls = []
    for index, raw in enumerate(items):
        item = raw if type(raw) is dict else _plain(raw)  # plain dicts (the usual input) skip the calls
        if type(item) is not dict and not _is_map(item):
            raise GuardInputError(f"tool_calls[{index}] is not an object: {str(raw)[:80]!r}")
        fn = item.get("function")
        fn = item if fn is None else fn if type(fn) is dict else _plain(fn)
        if (type(fn) is not dict and not _is_map(fn)) or "name" not in fn:
            raise GuardInputError(f"tool_calls[{index}] has no function name")
        name = fn.get("name")
        args = fn.get("arguments", fn.get("args"))
        call_id = item.get("id")
        calls.append(_call(call_id if type(call_id) is str else None, name if type(name) is str else None, args))
    return tuple(calls)


def _call(call_id: str | None, name: str | None, args: Any) -> ProposedCall:
    if args is None:
        return ProposedCall(call_id, name, {})
    if type(args) is str:
        try:
            parsed = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return ProposedCall(call_id, name, args, malformed=True)
        if type(parsed) is dict:  # JSON object keys are strings already
            return ProposedCall(call_id, name, parsed)
        args = parsed
    if _is_map(args):
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
    plain, grounding, _ = _read_messages(messages)
    return plain, grounding


def _read_messages(messages: Any) -> tuple[list[dict[str, Any]], str, Sources]:
    """``read_messages`` and the texts by source."""
    if messages is None:
        return [], "", _NO_SOURCES
    if not _is_list(messages):
        raise GuardInputError(f"messages must be a list of chat messages, got {type(messages).__name__}")
    plain: list[dict[str, Any]] = []
    grounding: list[str] = []
    users: list[str] = []
    system: list[str] = []
    results: list[ToolText] = []
    names: dict[str, str] = {}
    arguments: dict[str, dict[str, Any]] = {}  # call id -> its arguments: which call produced a result
    for index, raw in enumerate(messages):
        message = raw if type(raw) is dict else _plain(raw)
        if type(message) is not dict and not _is_map(message):
            raise GuardInputError(f"messages[{index}] is not an object: {str(raw)[:80]!r}")
        role = str(message.get("role") or "user")
        content = _text(message.get("content"))
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            name = names.get(call_id, message.get("name") or "tool")
            plain.append({"role": "system", "content": f"Tool result ({name}): {content}"})
            grounding.append(content)
            results.append(ToolText(str(name), content, arguments.get(call_id)))
            continue
        if role == "assistant" and message.get("tool_calls"):
            shown = []
            for call in read_tool_calls(message.get("tool_calls")):
                names[str(call.id)] = str(call.name)
                if isinstance(call.arguments, dict):
                    arguments[str(call.id)] = call.arguments
                args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments,
                                                                                          ensure_ascii=False)
                shown.append(f"{call.name}({args})")
            content = "\n".join(filter(None, [content, "Called: " + "; ".join(shown)]))
        if role == "developer":
            role = "system"
        if role == "user":
            grounding.append(content)
            users.append(content)
        elif role == "system":
            system.append(content)
        plain.append({"role": role, "content": content})
    sources = Sources(tuple(users), tuple(system), tuple(results)) if results else _NO_SOURCES
    return plain, "\n".join(grounding), sources


__all__ = ["GuardInput", "GuardInputError", "ProposedCall", "RegistryMemo", "read_input", "read_messages", "read_tool_calls",
           "read_tools"]
