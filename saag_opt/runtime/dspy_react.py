"""dspy.ReAct adapter: every tool call is reviewed before it runs.

``BaseCallback.on_tool_start`` only observes (dspy swallows its exceptions), so the hook is to replace
``react.tools[name]`` with a reviewing ``dspy.Tool`` (docs/design.md §14). The wrapper keeps
the tool's name, description and argument schema, so ReAct's prompt is unchanged. What it does:

* ``allow``: runs the tool with the proposed arguments.
* ``revise``: runs the revised call(s) instead and says so in the observation.
* ``block``: runs nothing; the observation is the feedback, so the agent proposes again.

The reviewer sees the ReAct inputs as the user message and the calls and observations of the
current episode (recorded by a module callback and the wrappers), never ReAct's internals.
"""

from __future__ import annotations

import contextvars
import json
from typing import TYPE_CHECKING, Any

import dspy
from dspy.utils.callback import BaseCallback

from saag_opt.runtime.decision import Decision

if TYPE_CHECKING:
    from saag_opt.runtime.guard import Guard

_EPISODE: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("saag_guard_react", default=None)
FINISH = "finish"


def _render_inputs(inputs: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in inputs.items() if k != "max_iters")


def wrap_react(guard: Guard, react: Any) -> Any:
    """Wrap the tools of ``react`` in place (``finish`` stays as is) and return it."""
    originals = {name: tool for name, tool in react.tools.items() if name != FINISH}
    definitions = [tool.format_as_litellm_function_call() for tool in originals.values()]

    class Episode(BaseCallback):
        """Starts a fresh episode record when this ReAct module starts."""

        def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            if instance is react:
                _EPISODE.set([{"role": "user", "content": _render_inputs(inputs)}])

    class ReviewedTool(dspy.Tool):
        """A tool whose calls go through the guard; accepts any keyword so review sees typos too."""

        def __init__(self, tool: dspy.Tool) -> None:
            def run(**kwargs: Any) -> Any:  # the signature only has to take any keyword
                raise NotImplementedError

            super().__init__(run, name=tool.name, desc=tool.desc, args=tool.args, arg_types=tool.arg_types)
            self.has_kwargs = True

        def _validate_and_parse_args(self, **kwargs: Any) -> dict[str, Any]:
            return kwargs  # the original tool validates what actually runs

        def __call__(self, **kwargs: Any) -> Any:
            episode, call = _episode(), _call(self.name, kwargs)
            decision = guard.review(list(episode), definitions, [call])
            return _record(episode, call, decision, _run(decision, originals, kwargs, self.name))

        async def acall(self, **kwargs: Any) -> Any:
            episode, call = _episode(), _call(self.name, kwargs)
            decision = await guard.areview(list(episode), definitions, [call])
            return _record(episode, call, decision, await _arun(decision, originals, kwargs, self.name))

    for name, tool in originals.items():
        react.tools[name] = ReviewedTool(tool)
    react.callbacks = [*(getattr(react, "callbacks", None) or []), Episode()]
    return react


def _episode() -> list[dict[str, Any]]:
    episode = _EPISODE.get()
    if episode is None:
        episode = []
        _EPISODE.set(episode)
    return episode


def _call(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"react_{name}_{len(_EPISODE.get() or [])}", "name": name, "arguments": dict(kwargs)}


def _describe(calls: list[dict[str, Any]]) -> str:
    return "; ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False, default=str)})" for c in calls)


def _blocked(decision: Decision) -> str:
    return f"Blocked before it ran: {decision.feedback or decision.reason}"


def _revision_note(decision: Decision) -> str:
    why = f" ({decision.feedback})" if decision.feedback else ""
    return f"A reviewer revised this call to {_describe(decision.calls or [])}{why}. Result: "


def _targets(decision: Decision, originals: dict[str, Any], kwargs: dict[str, Any], name: str) -> list[tuple[Any, Any]]:
    calls = decision.calls if decision.action == "revise" else [{"name": name, "arguments": kwargs}]
    return [(originals[c["name"]], c["arguments"]) for c in calls or [] if c["name"] in originals]


def _run(decision: Decision, originals: dict[str, Any], kwargs: dict[str, Any], name: str) -> Any:
    if decision.action == "block":
        return _blocked(decision)
    results = [tool(**args) for tool, args in _targets(decision, originals, kwargs, name)]
    return _observation(decision, results)


async def _arun(decision: Decision, originals: dict[str, Any], kwargs: dict[str, Any], name: str) -> Any:
    if decision.action == "block":
        return _blocked(decision)
    results = [await tool.acall(**args) for tool, args in _targets(decision, originals, kwargs, name)]
    return _observation(decision, results)


def _observation(decision: Decision, results: list[Any]) -> Any:
    result: Any = results[0] if len(results) == 1 else results
    if decision.action == "revise":
        return _revision_note(decision) + (result if isinstance(result, str) else json.dumps(result, default=str))
    return result


def _record(episode: list[dict[str, Any]], call: dict[str, Any], decision: Decision, observation: Any) -> Any:
    """Append the call and its observation to the episode the next review sees."""
    ran = decision.calls if decision.action == "revise" else [call]
    episode.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], default=str)}} for c in ran or [call]]})
    episode.append({"role": "tool", "tool_call_id": call["id"], "content": str(observation)})
    return observation


__all__ = ["wrap_react"]
