"""A conversation in progress, and one step of it as the ``Example`` a mechanism reviews.

Every mechanism reviews one tentative step through its ordinary ``run(example, agent, reviewer,
ctx)``; the example is a ``StepExample``:

* ``messages``: the conversation so far, rendered for a chat endpoint the way the runtime guard
  renders a live agent's (``runtime/inputs.py``): the user's messages as they are, the agent's
  executed calls as assistant text (``Called: name({...}); ...``), each tool result as a system
  message (``Tool result (name): ...``) - a ``tool`` message without its call would be refused by a
  chat endpoint, and the base agent replays these messages to one;
* ``registry``: the tools available at this turn (a ``miss_func`` function only from its turn on);
* ``query``, what SAAG stage 3 grounds arguments in: the user's messages *and* the tool results so
  far, as in the runtime guard, because in a running conversation an id or a file name that an
  earlier tool returned is not a hallucination. A blocked call never ran, so it returned nothing
  to ground in, and the agent's own text never grounds anything;
* ``sources``: the same texts kept apart, the user's messages and each tool result with its tool
  (``saag.injection.Sources``), so ``guard+r<N>`` can tell a value the user gave from one planted in
  a tool result (the runtime guard's injection rule, docs/design.md §21);
* ``policy`` and ``traced``: the data-flow policy the guard applies and, once its injection rule has
  run, that rule's trace of the calls under review (``traced_step``), so the reviewer is told where
  each value comes from by the guard's own policy, traced once;
* no gold and no expectation (``expect="any_call"``, as the runtime guard's example).

Its id, ``<episode>#t<turn>s<step>``, with the fingerprint of its messages, keys the base-prediction
cache: the steps the base run and a reviewed run share before the reviewer first changes anything
are proposed once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from saag_opt.episodes import ToolResult
from saag_opt.model import Example, Prediction, Registry, ToolCall
from saag_opt.saag.flow import FlowReport, check_flow
from saag_opt.saag.injection import Sources, ToolText
from saag_opt.saag.policy import DEFAULT_POLICY, Policy


@dataclass(frozen=True, slots=True)
class StepExample(Example):
    """One step of a conversation as a mechanism sees it (module docstring); ``query`` is ``grounding``."""

    grounding: str = ""
    """The user's messages and the tool results so far, one per line."""
    sources: Sources = Sources()
    """The user's messages and the tool results so far, apart (module docstring)."""
    policy: Policy | None = DEFAULT_POLICY
    """The data-flow policy the guard applies here (None: the marker rules alone, so no value trace)."""
    traced: tuple[tuple[ToolCall, ...], FlowReport] | None = None
    """The calls the guard's injection rule checked, and its data-flow trace of them (``value_trace``)."""

    @property
    def query(self) -> str:
        """What arguments are grounded in: the user turns and the tool results (not only the user turns)."""
        return self.grounding


NO_SOURCES = Sources()
"""No tool result in view (a single-turn example): the injection rule has nothing to read."""


def sources_of(example: Example) -> Sources:
    """What an example has in view apart: a conversation step's ``sources``, else none."""
    return example.sources if isinstance(example, StepExample) else NO_SOURCES


def traced_step(example: Example, policy: Policy | None, calls: Sequence[ToolCall] = (),
                flow: FlowReport | None = None) -> Example:
    """``example`` carrying the guard's ``policy`` and its trace ``flow`` of ``calls`` (a conversation step only).

    Why: the reviewer is told where each value comes from (``value_trace``); that must be the guard's
    policy, not the default one, and the trace the injection rule already made, not a second one.
    """
    if not isinstance(example, StepExample):
        return example
    return dataclasses.replace(example, policy=policy, traced=(tuple(calls), flow) if flow is not None else None)


def value_trace(example: Example, calls: Sequence[ToolCall]) -> FlowReport | None:
    """The data-flow trace of ``calls`` by the example's policy (None without tool results or without a policy).

    The trace the guard made when it checked these calls, else one made now.
    """
    sources = sources_of(example)
    if not sources.tools or not calls or not isinstance(example, StepExample) or example.policy is None:
        return None
    if example.traced is not None and example.traced[0] == tuple(calls):
        return example.traced[1]
    return check_flow(list(calls), example.registry, sources, example.policy)


def step_position(example_id: str) -> tuple[str, int, int]:
    """``(episode id, turn, step)`` of a step example's id (``<episode>#t<turn>s<step>``).

    Raises:
        ValueError: not a step example's id.
    """
    episode, sep, where = example_id.rpartition("#t")
    turn, _, step = where.partition("s")
    if not sep or not turn.isdigit() or not step.isdigit():
        raise ValueError(f"{example_id!r} is not a step example id (<episode>#t<turn>s<step>)")
    return episode, int(turn), int(step)


def called_text(calls: Sequence[ToolCall]) -> str:
    """The assistant's executed calls as text (the runtime guard's form)."""
    return "Called: " + "; ".join(f"{c.name}({json.dumps(dict(c.arguments), ensure_ascii=False, default=str)})"
                                  for c in calls)


def tool_result_text(result: ToolResult) -> str:
    """One tool result as the system message text (the runtime guard's form)."""
    return f"Tool result ({result.name}): {result.content}"


@dataclass
class Conversation:
    """The messages of one episode run so far, and the text its arguments are grounded in."""

    episode_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    grounding: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    systems: list[str] = field(default_factory=list)
    tools: list[ToolText] = field(default_factory=list)

    def user(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """A user turn begins (BFCL: its messages are appended as they are)."""
        for message in messages:
            plain = dict(message)
            self.messages.append(plain)
            role = plain.get("role", "user")
            if role == "user":
                self.grounding.append(str(plain.get("content") or ""))
                self.users.append(str(plain.get("content") or ""))
            elif role == "system":
                self.systems.append(str(plain.get("content") or ""))

    def executed(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> None:
        """The agent's executed calls and what they returned."""
        self.messages.append({"role": "assistant", "content": called_text(calls)})
        paired = len(calls) == len(results)
        for index, result in enumerate(results):
            self.messages.append({"role": "system", "content": tool_result_text(result)})
            self.grounding.append(result.content)
            call = calls[index] if paired and calls[index].name == result.name else None  # the call it answers
            self.tools.append(ToolText(result.name or "tool", result.content,
                                       dict(call.arguments) if call is not None else None))

    def answered(self, final: Prediction) -> None:
        """The agent ended its turn without calls; its text (if any) stays in the conversation."""
        text = (final.raw or "").strip()
        if text:  # BFCL keeps whatever the model said in the history, readable or not
            self.messages.append({"role": "assistant", "content": text})

    def step(self, turn: int, step: int, registry: Registry, category: str) -> StepExample:
        """The step's example (module docstring)."""
        return StepExample(id=f"{self.episode_id}#t{turn}s{step}", category=category, messages=tuple(self.messages),
                           registry=registry, gold=None, expect="any_call", grounding="\n".join(self.grounding),
                           sources=Sources(tuple(self.users), tuple(self.systems), tuple(self.tools)))


__all__ = ["NO_SOURCES", "Conversation", "StepExample", "called_text", "sources_of", "step_position", "tool_result_text",
           "traced_step", "value_trace"]
