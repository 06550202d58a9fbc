"""The psi correction messages of the SAAG loop (SAAG paper §2; docs/design.md §3).

Each builder sees only what the agent itself saw or produced: the call, the registry and the
query. None of them receives gold, so none can leak a gold value. The paper's templates
(Appendix D) were not available; the content follows its description:

* psi1: "no parsable call", or the name is not registered plus the nearest registered name;
* psi2: missing required parameters, parameters to delete, and "did you mean `a` for `p`" for
  each drifted parameter (a call that passes stage 2 still gets the drift part);
* psi3: the values that are not found in the request. For a string it may quote the closest
  span *of the query* (rapidfuzz partial_ratio_alignment, widened to whole words) when
  PartialRatio >= 0.6, the soft/hard cut a secondary source attributes to the paper; below the
  cut the value is called invented.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rapidfuzz import fuzz

from saag_opt.model import CascadeReport, Registry, ToolSpec
from saag_opt.saag.conformance import resolve_tool
from saag_opt.saag.grounding import ground_value, query_context, schema_enum
from saag_opt.saag.structure import split_call

__all__ = [
    "SOFT_MATCH_CUT", "closest_span", "psi1", "psi1_message", "psi2", "psi2_message", "psi3", "psi3_message",
]

SOFT_MATCH_CUT = 0.6
"""PartialRatio/100 at or above which a failed string is a near miss worth quoting."""

_MAX_LISTED_NAMES = 30
_MAX_SHOWN = 80


def _show(value: Any, limit: int = _MAX_SHOWN) -> str:
    """A short, safe rendering of a predicted value or name (never raises)."""
    if type(value) is str and value.isprintable() and '"' not in value and "\\" not in value:
        text = f'"{value}"'  # what json.dumps gives, without its cost on the hot path
        return text if len(text) <= limit else text[: limit - 3] + "..."
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True, default=repr)
    except (ValueError, TypeError, RecursionError):  # e.g. an int with more digits than str() allows
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _code(name: Any) -> str:
    text = name if isinstance(name, str) else _show(name)
    text = text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
    return f"`{text}`"


def _names(names: Iterable[str]) -> str:
    listed = list(names)
    shown = ", ".join(_code(n) for n in listed[:_MAX_LISTED_NAMES])
    extra = len(listed) - _MAX_LISTED_NAMES
    return shown + (f" and {extra} more" if extra > 0 else "")


def psi1_message(fnem: int, name: Any, nearest: str | None, registry: Registry) -> str | None:
    """psi1 from its parts (the cascade's hot path avoids building a report twice)."""
    if fnem == 1:
        return None
    if fnem == -1:
        return ("No parsable function call was found. Answer with a call to one registered function, "
                f"with its arguments as a JSON object. Registered functions: {_names(registry.names)}.")
    if nearest is not None:
        return (f"{_code(name)} is not a registered function; nearest registered name: "
                f"{_code(nearest)}. Call only registered functions.")
    return (f"{_code(name)} is not a registered function and no registered name resembles it. "
            f"Registered functions: {_names(registry.names)}.")


def psi1(report: CascadeReport, call: Any, registry: Registry) -> str | None:
    """Stage-1 correction: unparsable or unregistered name (None when FNEM = 1)."""
    return psi1_message(report.fnem, split_call(call)[0], report.nearest_name, registry)


def psi2_message(name: Any, tool: ToolSpec | None, malformed: bool, missing: Iterable[str],
                 drifted: Mapping[str, str], spurious: Sequence[str]) -> str | None:
    """psi2 from its parts; None when there is nothing to say."""
    label = _code(tool.name if tool is not None else name)
    parts: list[str] = []
    if malformed:
        parts.append("The arguments must be a JSON object mapping parameter names to values.")
    renamed = set(drifted.values())  # the drift hint already tells how to supply these
    still_missing = [p for p in missing if p not in renamed]
    if still_missing:
        parts.append(f"Missing required parameter(s) of {label}: {_names(still_missing)}.")
    for param, nearest in drifted.items():
        parts.append(f"Did you mean {_code(nearest)} for {_code(param)}? Use the exact parameter name.")
    if spurious:
        parts.append(f"Delete parameter(s) that {label} does not accept: {_names(spurious)}.")
        if tool is not None:
            allowed = list(tool.properties)
            parts.append(f"Allowed parameters: {_names(allowed)}." if allowed
                         else f"{label} takes no parameters.")
    return " ".join(parts) if parts else None


def psi2(report: CascadeReport, call: Any, registry: Registry) -> str | None:
    """Stage-2 correction: missing, spurious and drifted parameters (None when nothing to say)."""
    name, _, malformed = split_call(call)
    return psi2_message(name, resolve_tool(name, registry), malformed, report.missing_required,
                        report.drifted, report.spurious)


def closest_span(value: str, query: str) -> str | None:
    """The span of the query closest to ``value`` (whole words, original case), or None."""
    base = " ".join(query.split())
    needle = " ".join(value.split()).casefold()
    folded = base.casefold()
    if not needle or not folded:
        return None
    if len(folded) != len(base):  # casefold changed lengths (e.g. "ß"): quote the folded text
        base = folded
    align = fuzz.partial_ratio_alignment(needle, folded)
    if align is None or align.score <= 0:
        return None
    start, end = align.dest_start, align.dest_end
    while 0 < start < len(base) and base[start - 1].isalnum() and base[start].isalnum():
        start -= 1
    while 0 < end < len(base) and base[end].isalnum() and base[end - 1].isalnum():
        end += 1
    span = base[start:end].strip()
    return span[:120] if span else None


def _string_hint(value: str, partial: float | None, query: str) -> str:
    if partial is not None and partial >= 1.0:
        return "appears only inside a longer word of the request"
    if partial is not None and partial >= SOFT_MATCH_CUT:
        span = closest_span(value, query)
        if span is not None:
            return f"is not written like this in the request; closest text in the request: {_show(span, 120)}"
    return "does not appear in the request"


def _value_hint(value: Any, partial: float | None, query: str, enum: Sequence[Any] = ()) -> str:
    if isinstance(value, str):
        return _string_hint(value, partial, query)
    if isinstance(value, (list, tuple)):
        ctx = query_context(query)
        failed = [v for v in value if ground_value(v, ctx, enum)[3]]
        shown = ", ".join(_show(v, 40) for v in failed[:5])
        return f"has element(s) not found in the request: {shown}" if shown else "is not grounded in the request"
    return "is not a number stated in the request"


def psi3_message(misses: Sequence[tuple[str, Any, float | None]], query: str,
                 schema: Mapping[str, Any] | None = None) -> str | None:
    """psi3 from the ``(param, value, partial)`` misses of stage 3; None when there are none.

    ``schema`` (the tool's properties) keeps unstated ``enum`` elements of a list out of the hint.
    """
    if not misses:
        return None
    lines = [f"{_code(param)} = {_show(value)} {_value_hint(value, partial, query, schema_enum(schema, param))}."
             for param, value, partial in misses]
    return ("Some argument values are not grounded in the user's request; use values the user "
            "actually stated: " + " ".join(lines))


def type_message(mistyped: Sequence[tuple[str, str]], values: Mapping[str, Any]) -> str | None:
    """Calibrated mode: values whose JSON type contradicts the schema (``flags.type_conflicts``)."""
    if not mistyped:
        return None
    lines = [f"{_code(param)} = {_show(values.get(param))} is not of the schema's type `{declared}`."
             for param, declared in mistyped]
    return "Some argument values have the wrong type: " + " ".join(lines)


def duplicate_message(index: int, earlier: int) -> str:
    """Calibrated mode: call ``index`` repeats call ``earlier`` exactly (1-based positions)."""
    return (f"Call {index} repeats call {earlier} exactly (same function, same arguments); make each call "
            "do what the request asks once, or drop the repeat.")


def psi3(report: CascadeReport, call: Any, query: str, registry: Registry | None = None) -> str | None:
    """Stage-3 correction: each argument in G whose value is not found in the query.

    With the ``registry``, the tool's ``enum`` values are honoured as the cascade does.
    """
    name, arguments, _ = split_call(call)
    tool = resolve_tool(name, registry) if registry is not None else None
    schema = tool.properties if tool is not None else None
    ctx = query_context(query)
    misses = []
    for param in report.h:
        if param in arguments:
            value = arguments[param]
            _, _, partial, miss = ground_value(value, ctx, schema_enum(schema, param))
            if miss:
                misses.append((param, value, partial))
    return psi3_message(misses, query, schema)
