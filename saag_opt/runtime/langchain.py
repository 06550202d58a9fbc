"""LangChain v1 adapter: a ``wrap_tool_call`` middleware (``pip install 'saag-opt[langchain]'``).

Unlike the Agents SDK, LangChain lets middleware rewrite a call (``request.override``), so:

* ``allow``: the handler runs the call as proposed;
* ``revise``: the handler runs the revised call (another registered tool if the revision names
  one); the ToolMessage keeps the original ``tool_call_id``;
* ``block``: no handler call; an error ToolMessage carries the feedback, so the model proposes again.

Pass the agent's tools (``guard.langchain_middleware(tools)``) so stage 1 knows the registry and a
revision can switch tools; without them only the requested tool is known. Reviews are cached, so
LangGraph re-running the node on resume costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from saag_opt.runtime.decision import Decision

if TYPE_CHECKING:
    from saag_opt.runtime.guard import Guard


def _require() -> tuple[Any, Any, Any]:
    try:
        from langchain.agents.middleware import AgentMiddleware  # noqa: PLC0415 - optional: the langchain extra
        from langchain_core.messages import ToolMessage, convert_to_openai_messages  # noqa: PLC0415 - optional: the langchain extra
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("the LangChain adapter needs: pip install 'saag-opt[langchain]'") from exc
    return AgentMiddleware, ToolMessage, convert_to_openai_messages


def guard_middleware(guard: Guard, tools: Sequence[Any] | None = None) -> Any:
    """An ``AgentMiddleware`` whose ``wrap_tool_call``/``awrap_tool_call`` consult ``guard``."""
    from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: PLC0415 - optional: the langchain extra

    middleware_base, ToolMessage, to_openai = _require()
    by_name = {t.name: t for t in tools or []}
    definitions = [convert_to_openai_tool(t) for t in tools or []]

    def inputs(request: Any) -> tuple[list[Any], list[Any], list[dict[str, Any]]]:
        state = request.state
        history = state.get("messages", []) if isinstance(state, Mapping) else getattr(state, "messages", [])
        known = definitions or ([convert_to_openai_tool(request.tool)] if request.tool is not None else [])
        call = request.tool_call
        return to_openai(list(history)), known, [{"id": call.get("id"), "name": call["name"],
                                                  "arguments": call.get("args", {})}]

    def blocked(request: Any, decision: Decision) -> Any:
        call = request.tool_call
        text = f"Blocked before it ran: {decision.feedback or decision.reason}"
        return ToolMessage(content=text, tool_call_id=call.get("id") or "", name=call["name"], status="error")

    def revised(request: Any, decision: Decision) -> Any:
        calls = decision.calls or []
        if len(calls) != 1:  # one LangChain tool call answers with one message: no fan-out here
            return None
        new = calls[0]
        tool = by_name.get(new["name"]) or (request.tool if new["name"] == request.tool_call["name"] else None)
        call = {**request.tool_call, "name": new["name"], "args": new["arguments"]}
        return request.override(tool_call=call, tool=tool)

    class SaagGuardMiddleware(middleware_base):  # type: ignore[misc,valid-type]  # imported lazily
        """Reviews each tool call with a saag-opt ``Guard`` before it runs."""

        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            decision = guard.review(*inputs(request))
            return self._apply(request, decision, handler)

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            decision = await guard.areview(*inputs(request))
            return await self._aapply(request, decision, handler)

        def _apply(self, request: Any, decision: Decision, handler: Any) -> Any:
            if decision.action == "allow":
                return handler(request)
            new = revised(request, decision) if decision.action == "revise" else None
            return handler(new) if new is not None else blocked(request, decision)

        async def _aapply(self, request: Any, decision: Decision, handler: Any) -> Any:
            if decision.action == "allow":
                return await handler(request)
            new = revised(request, decision) if decision.action == "revise" else None
            return await handler(new) if new is not None else blocked(request, decision)

    return SaagGuardMiddleware()


__all__ = ["guard_middleware"]
