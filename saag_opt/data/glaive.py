r"""Glaive function-calling v2, in its raw form and in LLaMA-Factory's ShareGPT conversion.

* **Raw** (``glaiveai/glaive-function-calling-v2``): ``{"system": "SYSTEM: ... -\n{schema}\n\n{schema}",
  "chat": "USER: ... ASSISTANT: <functioncall> {...} <|endoftext|> FUNCTION RESPONSE: ..."}``. The
  call's ``arguments`` is usually a JSON object wrapped in *single quotes*
  (``"arguments": '{"a": "it's"}'``), which is neither JSON nor a Python literal when the text
  holds an apostrophe; ``parse_function_call`` handles it.
* **ShareGPT** (``hiyouga/glaive-function-calling-v2-sharegpt``, LLaMA-Factory's
  ``glaive_toolcall_en_demo.json``): ``{"conversations": [{"from": "human"|"gpt"|"function_call"|
  "observation", "value"}], "tools": "<JSON string of function schemas>"}``.

Both become Examples the same way, one per function call:

* ``messages`` = the conversation before that call. Earlier calls are rendered as OpenAI assistant
  messages with ``tool_calls`` (ids ``call_<k>``) and their results as ``tool`` messages, so the
  history can be sent to any OpenAI-compatible chat API unchanged. The system prompt of the raw
  format is dropped: it only lists the functions, which the agent gets as its registry.
* ``registry`` = the conversation's own tools (a repeated name keeps its first schema);
  ``gold`` = ``[{name: {param: [value]}}]`` — one acceptable value per argument, the one Glaive used.
* id ``glaive_<record>_<k>`` (record = 0-based position in the file, k = 0-based call number);
  category ``glaive``.

Conversations without any call can optionally yield one ``no_call`` example (category
``glaive_no_call``, id ``glaive_<record>_nocall``): only when the conversation has tools and the
assistant answered the first user turn in plain text. We skip the text turns of conversations that
*do* call elsewhere, because there a text reply often asks for a missing argument, which is a
different decision from "no tool applies".

Files may be a JSON array (the published form) or JSON Lines; bad records are reported with the
line they start on.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from saag_opt.data.jsonl import RowResult, describe_validation_error, read_records, strict, unique_ids
from saag_opt.errors import DatasetError
from saag_opt.model import Example, Registry, ToolSpec

CATEGORY = "glaive"
NO_CALL_CATEGORY = "glaive_no_call"


class RawGlaiveRecord(BaseModel):
    """One record of the raw Glaive v2 release."""

    model_config = ConfigDict(extra="ignore")

    system: str
    """``SYSTEM: <preamble> -`` followed by the function schemas as JSON objects."""
    chat: str = Field(min_length=1)
    """The dialogue: ``USER:`` / ``ASSISTANT:`` / ``FUNCTION RESPONSE:`` turns."""


class ShareGptTurn(BaseModel):
    """One ShareGPT turn."""

    model_config = ConfigDict(extra="ignore")

    from_: str = Field(alias="from")
    """``human`` | ``gpt`` | ``function_call`` | ``observation`` (``system`` is accepted too)."""
    value: str
    """Text, or for ``function_call`` the JSON ``{"name", "arguments"}``."""


class ShareGptRecord(BaseModel):
    """One record of the ShareGPT conversion (LLaMA-Factory)."""

    model_config = ConfigDict(extra="ignore")

    conversations: list[ShareGptTurn] = Field(min_length=1)
    """The dialogue turns."""
    tools: Union[str, list[dict[str, Any]]] = "[]"
    """Function schemas: a JSON string (as published) or an already parsed list."""
    system: Union[str, None] = None
    """Optional system prompt."""


# ------------------------------------------------------------------------------ call parsing


def parse_arguments(text: str) -> dict[str, Any]:
    """Parse Glaive's ``arguments`` value: a JSON object, or one wrapped in single quotes.

    The quoted form is unwrapped by position (first and last quote), never by splitting on
    quotes, so apostrophes inside values survive. Python literals are the last resort.

    Raises:
        ValueError: nothing parses to an object.
    """
    text = text.strip()
    candidates = [text]
    if len(text) >= 2 and text[0] == text[-1] == "'":
        inner = text[1:-1]
        candidates += [inner, inner.replace("\\'", "'")]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, str):  # a JSON string holding the object
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                continue
        if isinstance(value, dict):
            return value
    for candidate in candidates:
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str):  # a quoted JSON text
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                continue
        if isinstance(value, dict):
            return value
    raise ValueError(f"cannot parse arguments: {text[:80]!r}")


_CALL_RE = re.compile(r'^\{\s*"name"\s*:\s*"(?P<name>[^"]+)"\s*,\s*"arguments"\s*:\s*(?P<args>.*)\}$', re.S)


def parse_function_call(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``{"name": ..., "arguments": ...}`` as Glaive writes it; returns ``(name, arguments)``.

    Raises:
        ValueError: no function name or unparsable arguments.
    """
    text = text.replace("<|endoftext|>", "").strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        args = value.get("arguments", {})
        if isinstance(args, str):
            args = parse_arguments(args) if args.strip() else {}
        if not isinstance(args, dict):
            raise ValueError(f"arguments of {value['name']!r} are not an object")
        return value["name"], args
    match = _CALL_RE.match(text)
    if match is None:
        raise ValueError(f"not a function call: {text[:80]!r}")
    args_text = match.group("args").strip()
    return match.group("name"), parse_arguments(args_text) if args_text else {}


def parse_system_functions(system: str) -> list[dict[str, Any]]:
    """The function schemas embedded in a raw Glaive system prompt (every JSON object with a name)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    pos = system.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(system, pos)
        except json.JSONDecodeError:
            pos = system.find("{", pos + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            found.append(value)
        pos = system.find("{", end)
    return found


# ------------------------------------------------------------------------------ conversations

Turn = tuple[str, str]
"""A normalised turn: (kind, text) with kind in user | assistant | call | observation | system."""

_RAW_TURN_RE = re.compile(r"(?:^|\n)[ \t]*(USER|ASSISTANT|FUNCTION RESPONSE|SYSTEM):[ \t]?")
_RAW_KIND = {"USER": "user", "ASSISTANT": "assistant", "FUNCTION RESPONSE": "observation", "SYSTEM": "system"}
_SHAREGPT_KIND = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "function_call": "call", "observation": "observation", "tool": "observation",
                  "system": "system"}


def raw_chat_turns(chat: str) -> list[Turn]:
    """Split a raw Glaive ``chat`` into turns; an assistant ``<functioncall>`` becomes a ``call`` turn."""
    turns: list[Turn] = []
    pieces = _RAW_TURN_RE.split(chat)
    for marker, body in zip(pieces[1::2], pieces[2::2]):
        text = body.replace("<|endoftext|>", "").strip()
        kind = _RAW_KIND[marker]
        if kind == "assistant" and "<functioncall>" in text:
            before, _, call = text.partition("<functioncall>")
            if before.strip():
                turns.append(("assistant", before.strip()))
            turns.append(("call", call.strip()))
        else:
            turns.append((kind, text))
    return turns


def conversation_examples(turns: Sequence[Turn], functions: Sequence[Mapping[str, Any]], record: int, *,
                          source: str, no_call: bool = False) -> list[Example]:
    """One Example per call in ``turns`` (plus an optional no-call example); see the module docstring.

    Raises:
        ValueError: a call cannot be parsed, or names a function the conversation does not offer.
    """
    registry = _registry(functions)
    examples: list[Example] = []
    history: list[dict[str, Any]] = []
    last_call_id: str | None = None
    for kind, text in turns:
        if kind == "call":
            name, args = parse_function_call(text)
            if name not in registry:
                raise ValueError(f"call {len(examples)} names {name!r}, which is not among the conversation's "
                                 f"tools {list(registry.names)}")
            if not any(m["role"] == "user" for m in history):
                raise ValueError(f"call {len(examples)} comes before any user message")
            gold = ({name: {param: [value] for param, value in args.items()}},)
            examples.append(Example(id=f"glaive_{record}_{len(examples)}", category=CATEGORY,
                                    messages=tuple(dict(m) for m in history), registry=registry, gold=gold,
                                    expect="calls", source=source))
            last_call_id = f"call_{len(examples) - 1}"
            history.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": last_call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}]})
        elif kind == "observation" and last_call_id is not None:
            history.append({"role": "tool", "tool_call_id": last_call_id, "content": text})
        elif kind == "observation":
            history.append({"role": "user", "content": f"FUNCTION RESPONSE: {text}"})
        else:
            history.append({"role": kind, "content": text})
    if no_call and not examples and len(registry):
        nocall = _no_call_example(turns, registry, record, source)
        if nocall is not None:
            examples.append(nocall)
    return examples


def _no_call_example(turns: Sequence[Turn], registry: Registry, record: int, source: str) -> Example | None:
    """Messages up to the first user turn, when the next turn is a plain assistant answer."""
    for i, (kind, _) in enumerate(turns):
        if kind == "user":
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            if nxt is None or nxt[0] != "assistant" or not nxt[1]:
                return None
            messages = tuple({"role": k, "content": t} for k, t in turns[: i + 1] if k in ("system", "user",
                                                                                          "assistant"))
            return Example(id=f"glaive_{record}_nocall", category=NO_CALL_CATEGORY, messages=messages,
                           registry=registry, gold=None, expect="no_call", source=source)
    return None


def _registry(functions: Sequence[Mapping[str, Any]]) -> Registry:
    tools: dict[str, ToolSpec] = {}
    for raw in functions:
        spec = ToolSpec.from_dict(raw)
        tools.setdefault(spec.name, spec)
    return Registry(list(tools.values()))


# ------------------------------------------------------------------------------------ records


def _iter_format(path: str | Path, to_examples: Callable[[Any, int, str], list[Example]]) -> Iterator[RowResult]:
    where = str(path)
    record = -1
    for line, value in read_records(path):
        record += 1
        if isinstance(value, DatasetError):
            yield line, value
            continue
        try:
            examples = to_examples(value, record, where)
        except ValidationError as exc:
            yield line, DatasetError(f"bad record: {describe_validation_error(exc)}", path=where, line=line)
            continue
        except (ValueError, TypeError) as exc:
            yield line, DatasetError(f"bad record: {exc}", path=where, line=line)
            continue
        for example in examples:
            yield line, example


def _tools_list(tools: Union[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    parsed = json.loads(tools) if isinstance(tools, str) else tools
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list) or not all(isinstance(t, dict) for t in parsed):
        raise ValueError("'tools' must be a JSON list of function objects")
    return parsed


def iter_glaive(path: str | Path, *, no_call: bool = False) -> Iterator[RowResult]:
    """Lenient reader of raw Glaive v2: ``(line, Example | DatasetError)``, several per record."""

    def convert(value: Any, record: int, where: str) -> list[Example]:
        rec = RawGlaiveRecord.model_validate(value)
        turns = raw_chat_turns(rec.chat)
        if not turns:
            raise ValueError("chat has no USER/ASSISTANT turns")
        return conversation_examples(turns, parse_system_functions(rec.system), record, source=where,
                                     no_call=no_call)

    return unique_ids(_iter_format(path, convert), path)


def load_glaive(path: str | Path, *, no_call: bool = False) -> list[Example]:
    """Strict reader of raw Glaive v2.

    Raises:
        DatasetError: first bad record, as ``path:line: what is wrong``.
    """
    return strict(iter_glaive(path, no_call=no_call))


def iter_glaive_sharegpt(path: str | Path, *, no_call: bool = False) -> Iterator[RowResult]:
    """Lenient reader of the ShareGPT conversion: ``(line, Example | DatasetError)``, several per record."""

    def convert(value: Any, record: int, where: str) -> list[Example]:
        rec = ShareGptRecord.model_validate(value)
        turns: list[Turn] = [("system", rec.system)] if rec.system else []
        for i, turn in enumerate(rec.conversations):
            kind = _SHAREGPT_KIND.get(turn.from_)
            if kind is None:
                raise ValueError(f"conversations.{i}.from: unknown role {turn.from_!r}")
            turns.append((kind, turn.value))
        try:
            functions = _tools_list(rec.tools)
        except json.JSONDecodeError as exc:
            raise ValueError(f"'tools' is not valid JSON: {exc.msg}") from exc
        return conversation_examples(turns, functions, record, source=where, no_call=no_call)

    return unique_ids(_iter_format(path, convert), path)


def load_glaive_sharegpt(path: str | Path, *, no_call: bool = False) -> list[Example]:
    """Strict reader of the ShareGPT conversion.

    Raises:
        DatasetError: first bad record, as ``path:line: what is wrong``.
    """
    return strict(iter_glaive_sharegpt(path, no_call=no_call))
