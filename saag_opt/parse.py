"""Read a model's raw output into a ``Prediction``, whatever shape the model chose.

Models emit tool calls in many dialects: OpenAI ``tool_calls`` messages, bare ``{"name",
"arguments"}`` objects (or ``function``/``tool``/``parameters`` variants), BFCL's
``[{"func": {"a": 1}}]``, Qwen/Hermes ``<tool_call>`` blocks, fenced ```json blocks with prose
around them, and Python-style calls ``[f(a=1), pkg.g(b=[1, 2])]``. ``parse_output`` accepts all
of them and never raises.

Status policy (what the cascade and the truth check rely on):

* ``ok``: at least one call was read; names are kept as written (the registry resolves them).
* ``empty``: a plain answer with no call, or an explicitly empty list: an abstention.
* ``unparsable``: the text clearly tried to call (a ``<tool_call>`` tag, a JSON fence, text that
  starts like JSON or like ``name(``, call-shaped keys) but could not be read. Then ``calls`` is
  ``(ToolCall(None, {}),)``, so stage 1 reports FNEM = -1 instead of treating it as abstention.
  One unreadable part makes the whole output unparsable: a half-read parallel answer would
  otherwise be scored as if the model had made fewer calls.

Python-style arguments are read with ``ast.literal_eval`` only (never ``eval``), so a call such
as ``f(x=os.system("..."))`` is unparsable rather than executed. Pure: stdlib and ``model`` only.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from saag_opt.model import Prediction, ToolCall

__all__ = ["parse_output", "parse_calls_field", "CallShapeError"]


class CallShapeError(ValueError):
    """A value that should describe tool calls does not (internal to parsing; callers see a status)."""


_NAME_KEYS = ("name", "function", "tool", "tool_name", "function_name")
_ARG_KEYS = ("arguments", "parameters", "args", "tool_input", "input", "params", "kwargs")
_WRAPPER_KEYS = ("tool_calls", "calls", "function_calls")
_PARSE_ERRORS = (ValueError, SyntaxError, TypeError, RecursionError, MemoryError, OverflowError)

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CALL_START_RE = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\(")
_CALL_KEY_RE = re.compile(r'"(?:name|arguments|tool_calls|function|parameters)"\s*:')
_MAX_JSON_STARTS = 64


def parse_output(text: str) -> Prediction:
    """Parse raw model output into calls with a status (``ok``/``empty``/``unparsable``); never raises."""
    raw = text if isinstance(text, str) else ("" if text is None else str(text))
    try:
        calls = _parse_text(raw.strip())
    except _PARSE_ERRORS:
        calls = None
    if calls is None:
        return Prediction(calls=(ToolCall(None, {}),), raw=raw, status="unparsable")
    return Prediction(calls=calls, raw=raw, status="ok" if calls else "empty")


def parse_calls_field(raw: Any) -> tuple[ToolCall, ...]:
    """Read the ``calls`` field of a predictions row: a list of call objects; ``[]`` means abstain.

    Raises:
        ValueError: the value is not a list, or an item is not a call with a string name and
            object arguments (the message names the item, e.g. ``calls[1]: ...``).
    """
    if not isinstance(raw, list):
        raise ValueError(f"'calls' must be a list of {{name, arguments}} objects, got {type(raw).__name__}")
    calls: list[ToolCall] = []
    for index, item in enumerate(raw):
        try:
            calls.append(_call_from_entry(item, strict=True))
        except CallShapeError as exc:
            raise ValueError(f"calls[{index}]: {exc}") from None
    return tuple(calls)


# --- text level -------------------------------------------------------------------------------


def _parse_text(text: str) -> tuple[ToolCall, ...] | None:
    """Calls found in ``text``; ``()`` for a plain answer; None when an attempt could not be read."""
    if not text:
        return ()
    if "<tool_call>" in text.lower():
        return _parse_tagged(text)
    whole = _parse_fragment(text)
    if whole is not None:
        return whole
    fences = _FENCE_RE.findall(text)
    if fences:
        return _parse_fences(fences)
    embedded = _parse_embedded_json(text)
    if embedded is not None:
        return embedded
    bracketed = _parse_bracketed_python(text)
    if bracketed is not None:
        return bracketed
    lines = _parse_python_lines(text)
    if lines:
        return lines
    return None if lines is None or _looks_like_attempt(text) else ()


def _parse_tagged(text: str) -> tuple[ToolCall, ...] | None:
    """``<tool_call>{...}</tool_call>`` blocks (Qwen/Hermes); every block must parse."""
    calls: list[ToolCall] = []
    for body in _TOOL_CALL_RE.findall(text):
        found = _parse_fragment(_strip_fence(body.strip()))
        if not found:
            return None
        calls.extend(found)
    return tuple(calls) if calls else None


def _parse_fences(fences: list[tuple[str, str]]) -> tuple[ToolCall, ...] | None:
    """Fenced code blocks: calls from every block that has some; a broken JSON fence is an attempt."""
    calls: list[ToolCall] = []
    for lang, body in fences:
        body = body.strip()
        found = _parse_fragment(body)
        if found is None:
            if lang.lower() in ("json", "tool_call", "tool_code") or _looks_like_attempt(body):
                return None
            continue
        calls.extend(found)
    return tuple(calls)


def _strip_fence(body: str) -> str:
    match = _FENCE_RE.search(body)
    return match.group(2).strip() if match else body


def _parse_fragment(fragment: str) -> tuple[ToolCall, ...] | None:
    """A fragment that is entirely JSON or entirely Python call(s); None if it is neither."""
    fragment = fragment.strip().rstrip(";").strip()
    if not fragment:
        return None
    try:
        value = json.loads(fragment)
    except _PARSE_ERRORS:
        return _parse_python_calls(fragment)
    try:
        return _calls_from_json(value)
    except CallShapeError:
        return None


def _parse_embedded_json(text: str) -> tuple[ToolCall, ...] | None:
    """The first JSON object/list inside prose that reads as calls (a bounded number of tries).

    A decoded value that is not calls is skipped whole, so a call nested inside a rejected list
    is not picked out of it.
    """
    decoder = json.JSONDecoder()
    resume = 0
    for match in list(re.finditer(r"[\[{]", text))[:_MAX_JSON_STARTS]:
        if match.start() < resume:
            continue
        try:
            value, end = decoder.raw_decode(text, match.start())
        except _PARSE_ERRORS:
            continue
        resume = end
        try:
            calls = _calls_from_json(value)
        except CallShapeError:
            continue
        if calls:
            return calls
    return None


def _parse_bracketed_python(text: str) -> tuple[ToolCall, ...] | None:
    """``[f(a=1), g(b=2)]`` surrounded by prose: the span from the first ``[`` to the last ``]``."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        return None
    return _parse_python_calls(text[start:end + 1]) or None


def _parse_python_lines(text: str) -> tuple[ToolCall, ...] | None:
    """Lines that are call expressions (``get_weather(city="Paris")``) between lines of prose."""
    calls: list[ToolCall] = []
    for line in text.splitlines():
        line = line.strip().rstrip(";").strip()
        if not (_CALL_START_RE.match(line) and line.endswith((")", "]"))):
            continue
        found = _parse_python_calls(line)
        if found is None:
            return None
        calls.extend(found)
    return tuple(calls)


def _looks_like_attempt(text: str) -> bool:
    """Heuristic for 'the model tried to call': JSON-ish start, ``name(`` start, or call-shaped keys."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        return True
    if _CALL_START_RE.match(stripped) and stripped.rstrip(";").rstrip().endswith((")", "]")):
        return True
    return bool(_CALL_KEY_RE.search(stripped))


# --- JSON shapes ------------------------------------------------------------------------------


def _calls_from_json(value: Any) -> tuple[ToolCall, ...]:
    """Interpret a decoded JSON value; scalars are a plain answer, wrong shapes raise CallShapeError."""
    if isinstance(value, list):
        return tuple(call for item in value for call in _calls_from_item(item))
    if not isinstance(value, dict):
        return ()
    for key in _WRAPPER_KEYS:
        if isinstance(value.get(key), list) and value[key]:
            return _calls_from_json(value[key])
    if isinstance(value.get("function_call"), dict):
        return (_call_from_entry(value["function_call"]),)
    if "role" in value or any(key in value for key in _WRAPPER_KEYS):
        return _message_content(value.get("content"))
    return (_call_from_entry(value),)


def _message_content(content: Any) -> tuple[ToolCall, ...]:
    """A chat message without structured calls: its text content may still hold one."""
    if not isinstance(content, str):
        return ()
    calls = _parse_text(content.strip())
    if calls is None:
        raise CallShapeError("message content holds an unreadable call")
    return calls


def _calls_from_item(item: Any) -> tuple[ToolCall, ...]:
    """One element of a list of calls: a call object or a Python call string."""
    if isinstance(item, str):
        calls = _parse_python_calls(item.strip())
        if not calls:
            raise CallShapeError(f"not a call: {item[:60]!r}")
        return calls
    return (_call_from_entry(item),)


def _call_from_entry(entry: Any, *, strict: bool = False) -> ToolCall:
    """One call object in any common dialect (``strict``: ``name``/``arguments`` only), or CallShapeError."""
    if not isinstance(entry, dict):
        raise CallShapeError(f"expected a call object, got {type(entry).__name__}")
    if entry.get("type") == "function" and isinstance(entry.get("function"), dict):
        entry = entry["function"]
    elif isinstance(entry.get("function"), dict) and not any(k in entry for k in _ARG_KEYS):
        entry = entry["function"]
    name_key = next((k for k in (("name",) if strict else _NAME_KEYS) if k in entry), None)
    if name_key is None and strict:
        raise CallShapeError("has no 'name'")
    if name_key is None:
        return _bfcl_entry(entry)
    name = entry[name_key]
    if not isinstance(name, str) or not name.strip():
        raise CallShapeError(f"'{name_key}' must be a non-empty string")
    arg_key = next((k for k in (("arguments",) if strict else _ARG_KEYS) if k in entry), None)
    return ToolCall(name.strip(), _arguments(entry[arg_key] if arg_key else {}))


def _bfcl_entry(entry: dict[str, Any]) -> ToolCall:
    """BFCL's ``{"func_name": {"arg": value}}``: exactly one key whose value is an object."""
    if len(entry) == 1:
        (name, args), = entry.items()
        if isinstance(args, dict) and name.strip() and name not in _ARG_KEYS:
            return ToolCall(name.strip(), dict(args))
    raise CallShapeError("has no 'name' (expected {\"name\", \"arguments\"} or {\"func\": {...}})")


def _arguments(raw: Any) -> dict[str, Any]:
    """Arguments as an object; OpenAI sends them as a JSON string; null/empty means none."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = json.loads(raw)
        except _PARSE_ERRORS as exc:
            raise CallShapeError(f"arguments are not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CallShapeError(f"arguments must be an object, got {type(raw).__name__}")
    return dict(raw)


# --- Python-style calls -----------------------------------------------------------------------


def _parse_python_calls(source: str) -> tuple[ToolCall, ...] | None:
    """``f(a=1)``, ``[f(a=1), g(b=2)]`` or a tuple of calls; None unless every element is a literal call."""
    try:
        tree = ast.parse(source, mode="eval")
    except _PARSE_ERRORS:
        return None
    body = tree.body
    nodes = list(body.elts) if isinstance(body, (ast.List, ast.Tuple)) else [body]
    if isinstance(body, ast.List) and not nodes:
        return ()
    calls: list[ToolCall] = []
    for node in nodes:
        call = _python_call(node)
        if call is None:
            return None
        calls.append(call)
    return tuple(calls)


def _python_call(node: ast.AST) -> ToolCall | None:
    """One ``name(kw=literal, ...)`` node; positional or ``**`` arguments cannot be named, so None."""
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _dotted_name(node.func)
    if name is None:
        return None
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return None
        ok, value = _literal(keyword.value)
        if not ok:
            return None
        arguments[keyword.arg] = value
    return ToolCall(name, arguments)


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


_JSON_NAMES = {"true": True, "false": False, "null": None, "none": None}


def _literal(node: ast.AST) -> tuple[bool, Any]:
    """A JSON-like value for a literal node (``true``/``null`` spelled JSON-style are accepted)."""
    if isinstance(node, ast.Name) and node.id.lower() in _JSON_NAMES:
        return True, _JSON_NAMES[node.id.lower()]
    try:
        value = ast.literal_eval(node)
    except _PARSE_ERRORS:
        return False, None
    return _jsonable(value)


def _jsonable(value: Any) -> tuple[bool, Any]:
    """Tuples and sets become lists; bytes, complex and Ellipsis are not call arguments."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True, value
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        out = [_jsonable(v) for v in items]
        return all(ok for ok, _ in out), [v for _, v in out]
    if isinstance(value, Mapping):
        pairs = [(k, _jsonable(v)) for k, v in value.items()]
        ok = all(isinstance(k, str) and good for k, (good, _) in pairs)
        return ok, {k: v for k, (_, v) in pairs}
    return False, None
