"""The trace a security record keeps: what the agent said and did, what the guard decided, what was scored.

Plain data, no AgentDojo import (``runtime.agentdojo.trace`` builds it from the pipeline's messages;
the report draws it). One ``Trace`` per run of one arm: the conversation of the attempt AgentDojo
scored (the system message, the user's prompt, each assistant message with its calls, each tool
result), the guard's decision on every call it reviewed (with the injection rule's finding: which
argument, which rule, the tool text it came from), and the final answer. Nothing else is kept: the
messages are what AgentDojo's pipeline holds, so no key or setting of the run can be in them.

Limits (stated, so a reader knows what was cut): every text keeps its first ``TEXT_CHARS``
characters, and a tool result's injected text is kept whole, with ``CONTEXT_CHARS`` either side,
wherever it sits; a cut says how many characters went. A string argument keeps ``ARGUMENT_CHARS``.
``chars`` is the length before the cut.

Where a tool result carries the attack's injected text, ``injected`` gives its span in ``text``
(``locate``: the text as the model read it is YAML or a Python literal, so the injection is found
with whitespace, quotes and escape sequences left out on both sides).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

TEXT_CHARS = 1500
"""Characters kept from the start of each message text (system, user, assistant, tool result, error)."""
CONTEXT_CHARS = 120
"""Characters kept either side of an injected span that lies beyond ``TEXT_CHARS``."""
ARGUMENT_CHARS = 400
"""Characters kept of each string argument of a call."""
LIST_ITEMS = 50
"""Items kept of a list argument."""

GuardAction = Literal["allow", "revise", "block"]


class _Compact(BaseModel):
    """Written without the fields that hold their default: a record's trace is one line of ``records.jsonl``."""

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name, info in type(self).model_fields.items():
            if name in data and not info.is_required() and data[name] == info.get_default(call_default_factory=True):
                del data[name]
        return data  # type: ignore[no-any-return]


class InjectedSpan(BaseModel):
    """Where an attack's injected text sits in a tool result's ``text`` (``[start, end)``)."""

    vector: str
    """AgentDojo's injection vector (the placeholder of the environment the attack filled)."""
    start: int
    end: int


class Finding(_Compact):
    """The injection rule's finding for one call: which argument came from which instruction in which tool text."""

    rule: str
    argument: str | None = None
    """The argument's path (``recipient``); None for a finding about the call as a whole."""
    value: Any = None
    tool: str | None = None
    """The tool whose result held the instruction."""
    text: str | None = None
    """The instruction's text, as the guard read it (the guard cuts it at 400 characters)."""
    markers: list[str] = Field(default_factory=list)
    """Why it reads as an instruction (``addresses the model``, ``hijacks the task``)."""


class TraceCall(_Compact):
    """One call an assistant message made, and what the guard did with it."""

    id: str | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    guard: GuardAction | None = None
    """The guard's action on the proposal this call was in; None: not reviewed (the unguarded arm)."""
    reason: str | None = None
    """The guard's one-line reason for that decision."""
    findings: list[Finding] = Field(default_factory=list)
    scored: bool = True
    """False: the call was removed before AgentDojo scored the run (a blocked call, ``StripBlocked``)."""
    review: str | None = None
    """The LLM reviewer on that proposal: each verdict in order (``reject: <feedback>``, ``approve``) and a
    failure (``reviewer failed: ...``), cut at ``TEXT_CHARS``; None: no reviewer was asked (``Guard()``, the gate)."""


class TraceMessage(_Compact):
    """One message of the conversation (cut as the module docstring says)."""

    role: Literal["system", "user", "assistant", "tool"]
    text: str = ""
    chars: int = 0
    """The text's length before the cut (``len(text)`` or less when nothing was cut)."""
    calls: list[TraceCall] = Field(default_factory=list)
    """An assistant message's calls, as they ran (revised ones when the guard revised them)."""
    proposed: list[TraceCall] | None = None
    """The calls as the model proposed them, when the guard revised them; None otherwise."""
    call_id: str | None = None
    """A tool result: the id of the call it answers."""
    tool: str | None = None
    """A tool result: the function that was called."""
    error: str | None = None
    """A tool result: the error (a failed call, or the guard's feedback on a blocked one)."""
    injected: list[InjectedSpan] = Field(default_factory=list)
    scored: bool = True
    """False: removed before AgentDojo scored the run (the result of a blocked call)."""


class Trace(BaseModel):
    """A run's conversation, the guard's decisions on it, and the final answer (module docstring)."""

    messages: list[TraceMessage] = Field(default_factory=list)
    answer: str | None = None
    """The final assistant message's text (AgentDojo's model output); None when the run ended without one."""
    attempts: int = 1
    """Times AgentDojo ran the pipeline (it retries, up to 3 times, a run that ends without an answer);
    the messages are the last attempt's, the one scored."""
    text_chars: int = TEXT_CHARS
    """``TEXT_CHARS`` when the trace was written."""

    @property
    def blocked(self) -> list[TraceCall]:
        """The calls the guard blocked."""
        return [c for m in self.messages for c in m.calls if c.guard == "block"]


_HAY = re.compile(r"\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|\\x[0-9a-fA-F]{2}|\\[ntr]|[\s\\'\"]|[^\x00-\x7f]|(.)", re.S)
"""One token of a tool text: an escape sequence, whitespace, a quote, a backslash or a non-ASCII
character (all left out), or a kept character (group 1)."""
_NEEDLE = re.compile(r"[\s\\'\"]|[^\x00-\x7f]")


def locate(text: str, needle: str) -> list[tuple[int, int]]:
    r"""Every ``[start, end)`` of ``text`` that holds ``needle``, as YAML or a Python literal writes it.

    Why: AgentDojo's ``tool_result_to_str`` dumps a result as YAML (long lines folded, newlines as
    ``\\n`` in double-quoted strings), a dict result as ``str()`` (escapes again), and YAML loading
    folds the injected text's blank lines; comparing only the ASCII characters that are not
    whitespace, quotes or backslashes, with escape sequences dropped, finds it through all of that.
    """
    keys = _NEEDLE.sub("", needle).lower()
    if not keys:
        return []
    chars, where = [], []
    for match in _HAY.finditer(text):
        if match.group(1) is not None:
            chars.append(match.group(1).lower())
            where.append(match.start())
    hay = "".join(chars)
    out, pos = [], hay.find(keys)
    while pos >= 0:
        out.append((where[pos], where[pos + len(keys) - 1] + 1))
        pos = hay.find(keys, pos + len(keys))
    return out


def injected_spans(text: str, injections: Mapping[str, str]) -> list[InjectedSpan]:
    """The spans of ``text`` that hold one of the attack's injections (vector -> injected text), in order."""
    spans = [InjectedSpan(vector=vector, start=start, end=end)
             for vector, injected in injections.items() for start, end in locate(text, injected)]
    return sorted(spans, key=lambda s: (s.start, s.end))


def cut_keeping(text: str, spans: Iterable[InjectedSpan] = (), *, limit: int = TEXT_CHARS,
                context: int = CONTEXT_CHARS) -> tuple[str, list[InjectedSpan]]:
    """``text`` cut to its first ``limit`` characters, keeping each span whole with ``context`` around it.

    Returns the kept text (each gap replaced by ``… [N characters cut] …``) and the spans moved to
    their place in it.
    """
    spans = list(spans)
    if len(text) <= limit:
        return text, spans
    windows = [(0, limit)] + [(max(0, s.start - context), min(len(text), s.end + context)) for s in spans]
    merged: list[list[int]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts, shift, kept_to = [], [], 0
    out_len = 0
    for start, end in merged:
        if start > kept_to:
            gap = f" … [{start - kept_to} characters cut] … "
            parts.append(gap)
            out_len += len(gap)
        shift.append((start, end, out_len - start))
        parts.append(text[start:end])
        out_len += end - start
        kept_to = end
    if kept_to < len(text):
        parts.append(f" … [{len(text) - kept_to} characters cut]")
    moved = []
    for span in spans:
        offset = next(d for start, end, d in shift if start <= span.start and span.end <= end)
        moved.append(span.model_copy(update={"start": span.start + offset, "end": span.end + offset}))
    return "".join(parts), moved


def clip_arguments(value: Any) -> Any:
    """Arguments with each string cut to ``ARGUMENT_CHARS`` and each list to ``LIST_ITEMS`` items."""
    if isinstance(value, str):
        if len(value) <= ARGUMENT_CHARS:
            return value
        return value[:ARGUMENT_CHARS] + f" … [{len(value) - ARGUMENT_CHARS} characters cut]"
    if isinstance(value, dict):
        return {str(k): clip_arguments(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clip_arguments(v) for v in value[:LIST_ITEMS]]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def findings_of(provenance: Mapping[str, Any] | None, index: int) -> list[Finding]:
    """The injection rule's findings for the call at ``index`` of a proposal (``Decision.provenance``)."""
    out = []
    for finding in (provenance or {}).get("findings") or ():
        if finding.get("index", index) != index:
            continue
        span, value = finding.get("span") or {}, finding.get("value") or {}
        out.append(Finding(rule=str(finding.get("rule") or "-"), argument=value.get("path"),
                           value=clip_arguments(value.get("value")), tool=span.get("tool") or value.get("span_tool"),
                           text=span.get("text"), markers=list(span.get("markers") or value.get("span_markers") or [])))
    return out


__all__ = ["ARGUMENT_CHARS", "CONTEXT_CHARS", "LIST_ITEMS", "TEXT_CHARS", "Finding", "GuardAction", "InjectedSpan",
           "Trace", "TraceCall", "TraceMessage", "clip_arguments", "cut_keeping", "findings_of", "injected_spans",
           "locate"]
