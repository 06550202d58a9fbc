"""``Tracer``: one arm's run as a ``SecurityRecord`` keeps it: the blocks, and the trace of the conversation.

The pipeline hands it what it already holds: ``GuardElement.on_decision`` each review (the proposed
calls and the ``Decision``), and ``guarded_pipeline``'s taps the finished conversation twice, before
``StripBlocked`` (every call, blocked ones with their feedback) and after it (what
``run_task_with_pipeline`` scores). ``trace(injections)`` turns the last attempt into an
``security.trace_records.Trace``: each call with the guard's action, reason and finding, whether
AgentDojo scored it, each tool result with the attack's injected text located in it.

A decision is matched to its assistant message by call id (``GuardElement`` gives every reviewed
call one), so a proposal the loop never reviewed (the last one, when ``max_iters`` ran out) shows
as unreviewed, and a retried attempt's decisions give way to the last attempt's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from saag_opt.runtime.agentdojo import require
from saag_opt.security.records import BlockRecord
from saag_opt.security.trace_records import (
    TEXT_CHARS,
    Trace,
    TraceCall,
    TraceMessage,
    clip_arguments,
    cut_keeping,
    findings_of,
    injected_spans,
)

require()

from saag_opt.runtime.agentdojo.elements import text_of  # noqa: E402
from saag_opt.runtime.agentdojo.scripted import origin_of  # noqa: E402

if TYPE_CHECKING:
    from saag_opt.runtime.decision import Decision


class Tracer:
    """Collects one arm's runs, one at a time (``reset`` before each; module docstring)."""

    def __init__(self) -> None:
        self.decisions: list[tuple[list[Any], Decision]] = []
        self.proposed: list[Any] = []
        self.scored: list[Any] = []
        self.attempts = 0

    def reset(self) -> None:
        """Forget the previous run."""
        self.decisions, self.proposed, self.scored, self.attempts = [], [], [], 0

    def __call__(self, calls: list[Any], decision: Decision) -> None:
        """``GuardElement.on_decision``."""
        self.decisions.append((list(calls), decision))

    def tap(self, stage: str, messages: Sequence[Any], extra_args: dict[str, Any]) -> None:
        """``guarded_pipeline``'s ``tap``: the conversation before (``proposed``) and after (``scored``) ``StripBlocked``."""
        if stage == "proposed":
            self.proposed, self.attempts = list(messages), self.attempts + 1
        else:
            self.scored = list(messages)

    def blocks(self) -> list[BlockRecord]:
        """Every call the guard blocked, in every attempt (``SecurityRecord.blocks``)."""
        return [BlockRecord(origin=origin_of(call.id), name=call.function, arguments=dict(call.args),
                            reason=decision.reason, provenance=decision.provenance)
                for calls, decision in self.decisions if decision.action == "block" for call in calls]

    def excepted(self) -> list[BlockRecord]:
        """Every call the guard let run only under its counted exception (``SecurityRecord.excepted``)."""
        out = []
        for calls, decision in self.decisions:
            note = decision.exception if decision.action != "block" else None
            if not note:
                continue
            waived = "; ".join(note.get("waived") or ()) or str(note.get("rule"))
            for index in note.get("calls") or range(len(calls)):
                if index < len(calls):
                    call = calls[index]
                    out.append(BlockRecord(origin=origin_of(call.id), name=call.function, arguments=dict(call.args),
                                           reason=f"ran under the exception ({note.get('rule')}): {waived}"[:600],
                                           provenance=note))
        return out

    def trace(self, injections: Mapping[str, str]) -> Trace | None:
        """The last attempt's trace; ``injections``: the attack's injected texts by vector ({} without attack).

        None when no attempt reached the taps (an element raised ``AbortAgentError``).
        """
        if not self.attempts:
            return None
        by_id: dict[str, tuple[Decision, list[Any]]] = {}
        for calls, decision in self.decisions:  # later attempts overwrite earlier ones
            for call in calls:
                by_id[str(call.id)] = (decision, calls)
        guarded = bool(self.decisions)
        scored_calls = {str(c.id) for m in self.scored if m["role"] == "assistant" for c in m.get("tool_calls") or ()}
        scored_results = {str(m.get("tool_call_id")) for m in self.scored if m["role"] == "tool"}
        messages = [self._message(m, by_id, injections, guarded, scored_calls, scored_results) for m in self.proposed]
        last = self.scored[-1] if self.scored else None
        answer = text_of(last.get("content")) if last is not None and last["role"] == "assistant" else None
        return Trace(messages=messages, answer=answer, attempts=self.attempts, text_chars=TEXT_CHARS)

    @staticmethod
    def _message(message: Any, by_id: Mapping[str, tuple[Decision, list[Any]]], injections: Mapping[str, str],
                 guarded: bool, scored_calls: set[str], scored_results: set[str]) -> TraceMessage:
        role = message["role"]
        raw = text_of(message.get("content"))
        if role == "tool":
            spans = injected_spans(raw, injections) if injections else []
            text, spans = cut_keeping(raw, spans)
            call = message.get("tool_call")
            error = message.get("error")
            return TraceMessage(role="tool", text=text, chars=len(raw), call_id=message.get("tool_call_id"),
                                tool=getattr(call, "function", None), error=cut_keeping(error)[0] if error else None,
                                injected=spans, scored=not guarded or str(message.get("tool_call_id")) in scored_results)
        text, _ = cut_keeping(raw)
        if role != "assistant":
            return TraceMessage(role="user" if role == "user" else "system", text=text, chars=len(raw))
        calls = list(message.get("tool_calls") or ())
        hit = next((by_id[str(c.id)] for c in calls if str(c.id) in by_id), None)
        decision, proposed = hit if hit is not None else (None, [])
        index = {str(c.id): i for i, c in enumerate(proposed)}

        def view(call: Any, position: int) -> TraceCall:
            if decision is None:
                return TraceCall(id=call.id, name=call.function, arguments=clip_arguments(dict(call.args)),
                                 scored=not guarded or str(call.id) in scored_calls)
            at = index.get(str(call.id), position)
            return TraceCall(id=call.id, name=call.function, arguments=clip_arguments(dict(call.args)),
                             guard=decision.action, reason=decision.reason, findings=findings_of(decision.provenance, at),
                             scored=str(call.id) in scored_calls, review=review_of(decision))

        out = TraceMessage(role="assistant", text=text, chars=len(raw), calls=[view(c, i) for i, c in enumerate(calls)])
        if decision is not None and decision.action == "revise":
            out.proposed = [TraceCall(id=c.id, name=c.function, arguments=clip_arguments(dict(c.args)), guard="revise",
                                      reason=decision.reason, scored=False) for c in proposed]
        return out


def review_of(decision: Decision) -> str | None:
    """What the LLM reviewer said on a decision (``TraceCall.review``); None when none was asked."""
    said = [f"{r.get('verdict')}: {r.get('feedback')}" if r.get("feedback") else str(r.get("verdict"))
            for r in decision.rounds]
    if decision.error:
        said.append(f"reviewer failed: {decision.error}")
    return cut_keeping("; ".join(said))[0] if said else None


__all__ = ["Tracer", "review_of"]
