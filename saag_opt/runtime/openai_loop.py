"""The plain OpenAI tool-calling loop: one assistant reply in, what to run and what to append out.

The hook sits between reading ``tool_calls`` and dispatching them (docs/design.md §14).
A chat endpoint wants a tool message for every call of an assistant message, so:

* ``allow``: the assistant message as the model wrote it; run every call.
* ``revise``: the assistant message with the revised calls in place of the proposed ones (the
  conversation shows what ran); run the revised calls.
* ``block``: the assistant message as written plus, for each of its calls, a tool message carrying
  the feedback instead of a result, so the model proposes again; run nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saag_opt.runtime.decision import Decision

if TYPE_CHECKING:
    from saag_opt.runtime.guard import Guard

BLOCKED_PREFIX = "Not executed: the tool call was blocked before it ran."


@dataclass(frozen=True)
class GuardedTurn:
    """What to do with one assistant reply.

    Attributes:
        decision: the guard's decision.
        messages: append these to the conversation now (the assistant message, then the feedback
            tool messages on block).
        execute: the calls to run, ``{"id", "name", "arguments": dict}``; append each result with
            ``result(call, output)``.
    """

    decision: Decision
    messages: list[dict[str, Any]]
    execute: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def result(call: Mapping[str, Any], output: Any) -> dict[str, Any]:
        """The tool message carrying ``output`` for ``call`` (non-strings as JSON)."""
        content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
        return {"role": "tool", "tool_call_id": call["id"], "content": content}


def _message_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    raise TypeError(f"expected an assistant message (dict or openai ChatCompletionMessage), got {type(message).__name__}")


def guard_turn(guard: Guard, messages: Any, tools: Any, message: Any) -> GuardedTurn:
    """Review the ``tool_calls`` of assistant ``message`` (see the module docstring).

    A message that cannot be read at all gives a block decision like any other bad input.
    """
    try:
        reply = _message_dict(message)
    except TypeError as exc:
        return GuardedTurn(Decision("block", None, f"The tool calls could not be checked: {exc}.", f"bad input: {exc}"), [])
    reply.setdefault("role", "assistant")
    calls = reply.get("tool_calls") or []
    decision = guard.review(messages, tools, calls)
    if decision.action == "allow":
        return GuardedTurn(decision, [reply], list(decision.calls or []))
    if decision.action == "revise":
        revised = dict(reply, tool_calls=decision.openai_tool_calls())
        return GuardedTurn(decision, [revised], list(decision.calls or []))
    text = f"{BLOCKED_PREFIX} {decision.feedback or decision.reason}"
    ids = [c.get("id") if isinstance(c, Mapping) else getattr(c, "id", None) for c in calls]
    if not all(isinstance(i, str) for i in ids):  # nothing to answer: keep the reply as text only
        return GuardedTurn(decision, [{"role": "assistant", "content": reply.get("content") or ""},
                                      {"role": "user", "content": text}])
    return GuardedTurn(decision, [reply] + [{"role": "tool", "tool_call_id": i, "content": text} for i in ids])


__all__ = ["BLOCKED_PREFIX", "GuardedTurn", "guard_turn"]
