"""``GuardElement`` and ``StripBlocked``: the runtime guard as AgentDojo pipeline elements.

Where it sits: ``messages[-1]["tool_calls"]`` is what the LLM
element proposed and ``ToolsExecutor`` runs it next, so ``GuardElement`` goes just before
``ToolsExecutor`` inside ``ToolsExecutionLoop``:

* ``allow``: the messages pass unchanged;
* ``revise``: the assistant message is replaced by one carrying the revised calls (the ids of the
  proposed calls), so the transcript shows what ran;
* ``block``: one tool result per call, with ``error`` holding the feedback, is appended;
  ``ToolsExecutor`` then sees a tool message last and runs nothing, and the model reads the feedback
  and proposes again. The ids go to ``extra_args["saag_blocked"]``.

AgentDojo's trace-based checks (``utility_from_traces``, ``security_from_traces``) count every call
of every assistant message, run or not. ``StripBlocked``, the pipeline's last element, removes the
blocked calls and their results once the loop is over, so a blocked call is scored as what it was:
nothing happened. During the loop the API-valid form stays (each call answered by a tool message).

``Tap`` (``guarded_pipeline(tap=...)``) hands the finished conversation to a listener before and
after ``StripBlocked``, changing nothing: what a record's trace is built from (``trace.Tracer``).

The guard reads OpenAI-format messages: ``to_openai_messages`` turns AgentDojo's content blocks
into strings, the system message into ``system``, and each YAML tool result (the default
``tool_result_to_str``) into the JSON of the same data, so the guard reads each field of a result
(an email body, a review, a file) as one text.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from saag_opt.runtime.agentdojo import require

require()

import yaml  # noqa: E402 - agentdojo requires pyyaml
from agentdojo.agent_pipeline import (  # noqa: E402
    AgentPipeline,
    BasePipelineElement,
    InitQuery,
    SystemMessage,
    ToolsExecutionLoop,
    ToolsExecutor,
)
from agentdojo.agent_pipeline.agent_pipeline import load_system_message  # noqa: E402
from agentdojo.functions_runtime import EmptyEnv, FunctionCall  # noqa: E402

NO_ENV = EmptyEnv()
"""AgentDojo's default ``env`` of an element's ``query`` (one instance, not one per signature)."""
from agentdojo.types import (  # noqa: E402
    ChatAssistantMessage,
    ChatToolResultMessage,
    get_text_content_as_str,
    text_content_block_from_string,
)

if TYPE_CHECKING:
    from saag_opt.runtime.decision import Decision
    from saag_opt.runtime.guard import Guard

BLOCKED_KEY = "saag_blocked"
"""``extra_args`` key: ids of the calls the guard blocked in this run (read by ``StripBlocked``)."""
BLOCKED_PREFIX = "Blocked before execution:"
"""How a blocked call's tool result starts (its ``error``); the guard's feedback follows."""
MAX_ITERS = 50
"""``ToolsExecutionLoop`` turns: AgentDojo's default 15 is below travel ``user_task_19``'s 18
one-at-a-time calls, and a block uses a turn too (tests/runtime/test_agentdojo.py)."""
PIPELINE_MODEL = "gpt-4o-2024-05-13"
"""The model id a pipeline's name carries by default: ``important_instructions`` and
``tool_knowledge`` address the model by the name they read from it
(``agentdojo/attacks/base_attacks.py: get_model_name_from_pipeline``)."""

Recorder = Callable[[list[Any], "Decision"], None]
"""Called with the proposed ``FunctionCall``s and the guard's decision, once per review."""
Listener = Callable[[str, Sequence[Any], dict[str, Any]], None]
"""Called with a ``Tap``'s stage, the messages and ``extra_args`` as they are at its place in the pipeline."""


def text_of(content: Any) -> str:
    """AgentDojo content blocks (or None) as one string."""
    if not content:
        return ""
    if isinstance(content, str):
        return content
    return get_text_content_as_str(content)


@lru_cache(maxsize=4096)
def readable_tool_text(text: str) -> str:
    """A YAML tool result as the JSON of the same data (fields whole, escapes undone); other text as is.

    Why: ``tool_result_to_str`` folds long strings over lines with YAML escapes, so a value (an
    address, a name) can be split across lines in the text the model reads; the guard reads the data.
    A dict result (not a pydantic model) is written with ``str()``: a Python literal, read as such.
    Only what that formatter writes is read as YAML: text ``yaml.safe_dump`` gives back exactly, whose
    objects (at the top, or as list items) have field names for keys. Prose with a colon in it
    ("... TODO: send ...") parses as a one-key YAML mapping too, and must stay prose.
    """
    stripped = text.strip()
    if not stripped or ":" not in stripped and not stripped.startswith("- "):
        return text
    if stripped[0] in "{[":  # a dict or list result goes through str(): a Python literal
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
        if isinstance(value, (dict, list)):
            return json.dumps(value, ensure_ascii=False, default=str)
    try:
        data = yaml.safe_load(text)
        if not _formatted(data) or yaml.safe_dump(data).strip() != stripped:
            return text
    except yaml.YAMLError:
        return text
    return json.dumps(data, ensure_ascii=False, default=str)


_FIELD_NAME = re.compile(r"^[A-Za-z_]\w*$")


def _formatted(data: Any) -> bool:
    """A dumped model (field names as keys) or a list of them / of scalars."""
    items = data if isinstance(data, list) else [data] if isinstance(data, dict) else None
    if items is None:
        return False
    return all(not isinstance(i, dict) or all(isinstance(k, str) and _FIELD_NAME.match(k) for k in i) for i in items)


def call_to_openai(call: Any) -> dict[str, Any]:
    """A ``FunctionCall`` as an OpenAI ``tool_calls`` item."""
    return {"id": call.id, "type": "function",
            "function": {"name": call.function, "arguments": json.dumps(dict(call.args), ensure_ascii=False, default=str)}}


def to_openai_messages(messages: Sequence[Any], *, readable: bool = True) -> list[dict[str, Any]]:
    """AgentDojo messages as OpenAI chat messages: ``system`` role, string content, tool results by id.

    ``readable``: tool results as ``readable_tool_text`` (what the guard reads); False keeps the text
    the model reads. A tool result's ``error`` (a failed call, or a block's feedback) is its content.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            error = message.get("error")
            text = error if error else text_of(message.get("content"))
            call = message.get("tool_call")
            out.append({"role": "tool", "tool_call_id": message.get("tool_call_id") or getattr(call, "id", None),
                        "name": getattr(call, "function", None) or "tool",
                        "content": text if error or not readable else readable_tool_text(text)})
        elif role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": text_of(message.get("content")) or None}
            calls = message.get("tool_calls") or []
            if calls:
                item["tool_calls"] = [call_to_openai(c) for c in calls]
            out.append(item)
        else:
            out.append({"role": "system" if role in ("system", "developer") else "user",
                        "content": text_of(message.get("content"))})
    return out


def function_to_openai(function: Any) -> dict[str, Any]:
    """An AgentDojo ``Function`` as an OpenAI function tool (its pydantic JSON schema as parameters)."""
    return {"type": "function", "function": {"name": function.name, "description": function.description,
                                             "parameters": function.parameters.model_json_schema()}}


class _ToolsMemo:
    """The OpenAI tool list of a runtime, rebuilt only when its functions change (keeps the guard's registry memo hot)."""

    def __init__(self) -> None:
        self._key: tuple[int, tuple[str, ...]] | None = None
        self._tools: list[dict[str, Any]] = []

    def __call__(self, runtime: Any) -> list[dict[str, Any]]:
        key = (id(runtime.functions), tuple(runtime.functions))
        if key != self._key:
            self._key, self._tools = key, [function_to_openai(f) for f in runtime.functions.values()]
        return self._tools


class GuardElement(BasePipelineElement):
    """Reviews the calls of the last assistant message before ``ToolsExecutor`` runs them (module docstring).

    Args:
        guard: the runtime guard (``Guard.load(...)``, or ``Guard()`` for the cascade and injection rules alone).
        on_decision: called with the proposed calls and the decision after every review (for reports).
    """

    name = "saag-opt-guard"

    def __init__(self, guard: Guard, *, on_decision: Recorder | None = None) -> None:
        self.guard = guard
        self.on_decision = on_decision
        self._tools = _ToolsMemo()

    def query(self, query: str, runtime: Any, env: Any = NO_ENV, messages: Sequence[Any] = (),
              extra_args: dict[str, Any] | None = None) -> tuple[str, Any, Any, Sequence[Any], dict[str, Any]]:
        """Allow, revise or block ``messages[-1]["tool_calls"]``; anything else passes through."""
        extra = dict(extra_args or {})
        if not messages or messages[-1]["role"] != "assistant" or not messages[-1].get("tool_calls"):
            return query, runtime, env, messages, extra
        last = messages[-1]
        calls = [c if c.id else c.model_copy(update={"id": f"call_{len(messages)}_{i}"})
                 for i, c in enumerate(last["tool_calls"])]
        proposed = ChatAssistantMessage(role="assistant", content=last.get("content"), tool_calls=calls)
        decision = self.guard.review(to_openai_messages(messages[:-1]), self._tools(runtime),
                                     [call_to_openai(c) for c in calls])
        if self.on_decision is not None:
            self.on_decision(calls, decision)
        if decision.action == "allow":
            return query, runtime, env, [*messages[:-1], proposed], extra
        if decision.action == "revise":
            revised = [FunctionCall(function=c["name"], args=dict(c["arguments"]), id=c.get("id"))
                       for c in decision.calls or []]
            message = ChatAssistantMessage(role="assistant", content=last.get("content"), tool_calls=revised)
            return query, runtime, env, [*messages[:-1], message], extra
        feedback = f"{BLOCKED_PREFIX} {decision.feedback or decision.reason}"
        results = [ChatToolResultMessage(role="tool", content=[text_content_block_from_string("")], tool_call_id=c.id,
                                         tool_call=c, error=feedback) for c in calls]
        extra[BLOCKED_KEY] = [*extra.get(BLOCKED_KEY, ()), *(c.id for c in calls)]
        return query, runtime, env, [*messages[:-1], proposed, *results], extra


class StripBlocked(BasePipelineElement):
    """Drops blocked calls and their results from the finished conversation (module docstring)."""

    name = "saag-opt-strip-blocked"

    def query(self, query: str, runtime: Any, env: Any = NO_ENV, messages: Sequence[Any] = (),
              extra_args: dict[str, Any] | None = None) -> tuple[str, Any, Any, Sequence[Any], dict[str, Any]]:
        """The messages without the calls listed under ``extra_args[BLOCKED_KEY]``."""
        extra = dict(extra_args or {})
        return query, runtime, env, strip_blocked(messages, set(extra.get(BLOCKED_KEY, ()))), extra


def strip_blocked(messages: Sequence[Any], blocked: set[str]) -> list[Any]:
    """``messages`` without the calls whose id is in ``blocked`` and without their tool results.

    An assistant message left with neither calls nor text goes too; the final answer never has calls.
    """
    if not blocked:
        return list(messages)
    out: list[Any] = []
    for message in messages:
        if message["role"] == "tool" and message.get("tool_call_id") in blocked:
            continue
        if message["role"] == "assistant" and message.get("tool_calls"):
            kept = [c for c in message["tool_calls"] if c.id not in blocked]
            if len(kept) != len(message["tool_calls"]):
                if not kept and not text_of(message.get("content")).strip():
                    continue
                message = ChatAssistantMessage(role="assistant", content=message.get("content"), tool_calls=kept or None)
        out.append(message)
    return out


class Tap(BasePipelineElement):
    """Hands the messages, as they are at its place in the pipeline, to a listener (a trace); changes nothing."""

    name = "saag-opt-tap"

    def __init__(self, stage: str, listener: Listener) -> None:
        self.stage, self.listener = stage, listener

    def query(self, query: str, runtime: Any, env: Any = NO_ENV, messages: Sequence[Any] = (),
              extra_args: dict[str, Any] | None = None) -> tuple[str, Any, Any, Sequence[Any], dict[str, Any]]:
        """Pass everything through, after telling the listener."""
        extra = dict(extra_args or {})
        self.listener(self.stage, messages, extra)
        return query, runtime, env, messages, extra


def guarded_pipeline(llm: Any, guard: Guard | None, *, system_message: str | None = None, max_iters: int = MAX_ITERS,
                     name: str | None = None, on_decision: Recorder | None = None, tap: Listener | None = None) -> Any:
    """AgentDojo's standard pipeline with the guard in its tool loop (no guard: the plain pipeline).

    ``[SystemMessage, InitQuery, llm, ToolsExecutionLoop([GuardElement, ToolsExecutor, llm]), StripBlocked]``.
    ``name`` must contain a model id AgentDojo knows for the attacks that address the model by name
    (default: ``<PIPELINE_MODEL>-saag-guard``, or ``-no-guard``). ``tap``: told the finished
    conversation twice, as ``proposed`` (every call, blocked ones too) and then as ``scored`` (what
    ``run_task_with_pipeline`` scores: after ``StripBlocked``).
    """
    loop: list[Any] = [ToolsExecutor(), llm]
    elements: list[Any] = [SystemMessage(system_message or load_system_message(None)), InitQuery(), llm]
    if guard is not None:
        loop.insert(0, GuardElement(guard, on_decision=on_decision))
    elements.append(ToolsExecutionLoop(loop, max_iters=max_iters))
    if tap is not None:
        elements.append(Tap("proposed", tap))
    if guard is not None:
        elements.append(StripBlocked())
    if tap is not None:
        elements.append(Tap("scored", tap))
    pipeline = AgentPipeline(elements)
    pipeline.name = name or f"{PIPELINE_MODEL}-{'saag-guard' if guard is not None else 'no-guard'}"
    return pipeline


__all__ = ["BLOCKED_KEY", "BLOCKED_PREFIX", "MAX_ITERS", "NO_ENV", "PIPELINE_MODEL", "GuardElement", "Listener",
           "Recorder", "StripBlocked", "Tap", "call_to_openai", "function_to_openai", "guarded_pipeline",
           "readable_tool_text", "strip_blocked", "text_of", "to_openai_messages"]
