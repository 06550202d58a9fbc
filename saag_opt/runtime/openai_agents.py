"""OpenAI Agents SDK adapter: a ``tool_input_guardrail`` (``pip install 'saag-opt[agents]'``).

That SDK cannot rewrite a call's arguments, so ``revise`` and ``block`` both become
``reject_content``: the tool does not run and the model reads the feedback (plus, on revise, the
reviewer's corrected call) instead of a result, then proposes again. The guardrail sees the run's
input items (``turn_input``) and the agent's function tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from saag_opt.runtime.decision import Decision

if TYPE_CHECKING:
    from saag_opt.runtime.guard import Guard


def _require() -> Any:
    try:
        import agents  # noqa: PLC0415 - optional: the agents extra
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("the OpenAI Agents SDK adapter needs: pip install 'saag-opt[agents]'") from exc
    return agents


def rejection_text(decision: Decision) -> str:
    """What the model reads instead of the tool result on revise or block."""
    feedback = decision.feedback or decision.reason
    if decision.action == "revise" and decision.calls:
        suggested = "; ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in decision.calls)
        return f"The tool call was not run: a reviewer found a problem. {feedback}\nSuggested call: {suggested}"
    return f"The tool call was not run: it was blocked before it ran. {feedback}"


def items_to_messages(items: Any, instructions: Any = None) -> list[dict[str, Any]]:
    """Responses-API input items (and string instructions) as chat messages."""
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        return messages + [{"role": "user", "content": items}]
    for raw in items or []:
        item = raw if isinstance(raw, Mapping) else getattr(raw, "model_dump", dict)()
        kind = item.get("type")
        if kind == "function_call":
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": item.get("call_id"), "type": "function",
                 "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else json.dumps(output, default=str)})
        elif "role" in item:
            messages.append({"role": item["role"], "content": item.get("content")})
    return messages


def agent_tools(agent: Any) -> list[dict[str, Any]]:
    """The agent's function tools as OpenAI function-tool definitions (hosted tools are skipped)."""
    agents = _require()
    return [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                              "parameters": _optional_defaults(t.params_json_schema)}}
            for t in getattr(agent, "tools", []) or [] if isinstance(t, agents.FunctionTool)]


def _optional_defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Strict schemas list every parameter as required; one with a default may be omitted."""
    props = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if "default" not in (props.get(r) or {})]
    return {**schema, "required": required}


def tool_input_guardrail(guard: Guard, *, name: str = "saag_guard") -> Any:
    """A ``ToolInputGuardrail`` that reviews each function call before it runs.

    Attach it per tool (``function_tool(f, tool_input_guardrails=[g])``) or to every function tool
    of an agent with ``guard_agent``. The decision rides along as ``output_info``.
    """
    agents = _require()

    async def review(data: Any) -> Any:
        context, agent = data.context, data.agent
        messages = items_to_messages(getattr(context, "turn_input", None), getattr(agent, "instructions", None))
        call = {"id": context.tool_call_id, "name": context.tool_name, "arguments": context.tool_arguments}
        decision = await guard.areview(messages, agent_tools(agent), [call])
        if decision.action == "allow":
            return agents.ToolGuardrailFunctionOutput.allow(output_info=decision.to_dict())
        return agents.ToolGuardrailFunctionOutput.reject_content(rejection_text(decision),
                                                                 output_info=decision.to_dict())

    review.__name__ = name
    return agents.tool_input_guardrail(review)


def guard_agent(guard: Guard, agent: Any) -> Any:
    """Add the guardrail to every function tool of ``agent`` (in place) and return the agent."""
    agents = _require()
    guardrail = tool_input_guardrail(guard)
    for tool in agent.tools:
        if isinstance(tool, agents.FunctionTool):
            tool.tool_input_guardrails = [*(tool.tool_input_guardrails or []), guardrail]
    return agent


__all__ = ["agent_tools", "guard_agent", "items_to_messages", "rejection_text", "tool_input_guardrail"]
