"""JSONL datasets: BFCL-format rows and saag-opt's own example schema.

Two row shapes live in ``.jsonl`` files:

* **BFCL-format** (what ``datasets/bfcl.jsonl`` ships): ``{"id", "category", "question",
  "function", "ground_truth"}``. ``question`` and ``function`` are BFCL's own fields, kept with
  BFCL's original parameter types (the loader normalises them); ``ground_truth`` is BFCL's
  possible-answer list, or ``null`` when no call is correct (``live_relevance``: any call is).
* **Our schema** (registry-size benchmarks, converted Glaive data, anything whose registry differs
  from BFCL's): ``{"id", "category", "messages", "tools", "gold", "expect"?, "split"?, "source"?}``.
  ``write_examples`` writes it and ``load_examples_jsonl`` reads it back to equal ``Example`` values.

Every reader comes in two flavours: ``iter_*`` yields ``(line, Example | DatasetError)`` so a caller
can report bad rows and keep going; ``load_*`` raises the first ``DatasetError`` (message
``path:line: ...``). Duplicate ids are bad rows too, because splits and caches key on the id.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import jsonlines
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from saag_opt.atomic import atomic_write_jsonl
from saag_opt.data.bfcl import example_from_bfcl_row
from saag_opt.errors import DatasetError
from saag_opt.model import Example, Expectation, Registry

RowResult = tuple[int, Union[Example, DatasetError]]
"""What lenient iterators yield: the 1-based line a row starts on, and its Example or error."""

JsonlFormat = Literal["bfcl", "examples"]

GoldRow = dict[str, dict[str, list[Any]]]


class BfclRow(BaseModel):
    """One BFCL-format row: a BFCL question entry plus its possible answer and category."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, coerce_numbers_to_str=True)
    """BFCL id, e.g. ``simple_python_12`` (a number is read as its text, as in predictions files)."""
    category: str = Field(min_length=1)
    """BFCL category, e.g. ``simple_python`` or ``irrelevance``."""
    question: list[Any] = Field(min_length=1)
    """BFCL turns: a list of turns, each a list of ``{role, content}`` messages (a flat list of
    messages is accepted as one turn)."""
    function: list[dict[str, Any]]
    """The registry as BFCL writes it (BFCL types such as ``dict``/``float`` are kept)."""
    ground_truth: Union[list[GoldRow], None]
    """BFCL possible answer: ``[{name: {param: [acceptable values]}}]``; ``null`` = no call correct."""


class MessageRow(BaseModel):
    """One chat message; extra OpenAI keys (``tool_calls``, ``tool_call_id``, ``name``) are kept."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks."""
    content: Union[str, None]
    """Text (may be empty for an assistant message that only carries ``tool_calls``)."""


class ExampleRow(BaseModel):
    """One row of saag-opt's own example schema."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, coerce_numbers_to_str=True)
    """Unique id (a number is read as its text); registry-size variants append ``@r<N>`` to the base id."""
    category: str = Field(min_length=1)
    """Category (BFCL category, ``glaive``, ...)."""
    messages: list[MessageRow] = Field(min_length=1)
    """The conversation the agent sees."""
    tools: list[dict[str, Any]]
    """Function dicts ``{name, description, parameters}`` (JSON Schema or BFCL types)."""
    gold: Union[list[GoldRow], None]
    """Expected calls ``[{name: {param: [acceptable values]}}]``; ``null`` when no gold call exists."""
    expect: Union[Expectation, None] = None
    """``calls`` | ``no_call`` | ``any_call``; default: ``calls`` if gold is given, else ``no_call``."""
    split: Union[str, None] = None
    """Recorded split (``train``/``val``/``test``), if any."""
    source: Union[str, None] = None
    """Where the example came from (file, package version)."""


# --------------------------------------------------------------------------------------- reading


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any | DatasetError]]:
    """Yield ``(line, parsed JSON value)`` per non-empty line, or a DatasetError for a bad line.

    Each line is decoded on its own, so a line that is not UTF-8 is reported with its number and
    the lines after it are still read; a UTF-8 byte-order mark and CRLF line ends are accepted.

    Raises:
        DatasetError: the file does not exist or cannot be opened.
    """
    where = str(path)
    try:
        fp = open(path, "rb")  # noqa: SIM115 - closed in finally below
    except OSError as exc:
        raise DatasetError(f"cannot open dataset file: {exc.strerror or exc}", path=where) from exc
    try:
        for number, raw in enumerate(fp, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield number, DatasetError(f"not UTF-8 text (byte {exc.start + 1} of the line is "
                                           f"0x{raw[exc.start]:02x})", path=where, line=number)
                continue
            if not text.strip():
                continue
            try:
                value = jsonlines.Reader([text]).read()
            except jsonlines.InvalidLineError as exc:
                yield number, DatasetError(str(exc).rsplit(" (line ", 1)[0], path=where, line=number)
                continue
            yield number, value
    finally:
        fp.close()


def read_records(path: str | Path) -> Iterator[tuple[int, Any | DatasetError]]:
    """Yield ``(line, record)`` from a JSON array file or a JSON Lines file (told by the first character).

    A syntax error inside a JSON array ends the file (nothing after it can be located reliably).

    Raises:
        DatasetError: the file cannot be opened.
    """
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot open dataset file: {exc.strerror or exc}", path=where) from exc
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        yield from read_jsonl(path)
        return
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        yield line, DatasetError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", path=where, line=line)
        return
    yield from _iter_array(text, where)


def _iter_array(text: str, where: str) -> Iterator[tuple[int, Any | DatasetError]]:
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    line, counted = 1, 0

    def line_at(p: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, p)
        counted = p
        return line

    while True:
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == "]":
            return
        start = line_at(pos)
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield start, DatasetError(f"invalid JSON in array: {exc.msg}", path=where, line=line_at(exc.pos))
            return
        yield start, value
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos >= len(text) or text[pos] != "]":
            yield line_at(pos), DatasetError("expected ',' or ']' in JSON array", path=where, line=line_at(pos))
            return


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def describe_validation_error(exc: ValidationError, limit: int = 3) -> str:
    """One line naming the bad fields, e.g. ``messages.0.role: Input should be 'user', ...``."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "row"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def unique_ids(items: Iterable[RowResult], path: str | Path) -> Iterator[RowResult]:
    """Turn a repeated example id into an error on the later row (splits and caches key on ids)."""
    seen: dict[str, int] = {}
    for line, item in items:
        if isinstance(item, Example):
            if item.id in seen:
                item = DatasetError(f"duplicate id {item.id!r} (first on line {seen[item.id]})",
                                    path=str(path), line=line)
            else:
                seen[item.id] = line
        yield line, item


def strict(items: Iterable[RowResult]) -> list[Example]:
    """Collect examples, raising the first DatasetError (for ``load_*``)."""
    out: list[Example] = []
    for _, item in items:
        if isinstance(item, DatasetError):
            raise item
        out.append(item)
    return out


def _convert(path: str | Path, rows: Iterable[tuple[int, Any | DatasetError]],
             convert: Callable[[dict[str, Any], str], Example]) -> Iterator[RowResult]:
    where = str(path)
    for line, value in rows:
        if isinstance(value, DatasetError):
            yield line, value
            continue
        if not isinstance(value, dict):
            yield line, DatasetError(f"row must be a JSON object, got {type(value).__name__}", path=where, line=line)
            continue
        try:
            yield line, _answerable(convert(value, where))
        except ValidationError as exc:
            yield line, DatasetError(f"bad row: {describe_validation_error(exc)}", path=where, line=line)
        except DatasetError as exc:
            yield line, DatasetError(str(exc), path=where, line=line)
        except (ValueError, TypeError, KeyError) as exc:
            yield line, DatasetError(f"bad row: {exc}", path=where, line=line)


def _answerable(example: Example) -> Example:
    """The example itself, if it can be asked and answered.

    Why: without a user message with text the agent is asked nothing and SAAG grounds every
    argument in an empty query; gold naming a tool the row does not register can never be matched;
    two tools whose OpenAI-safe names collide (``a.b`` and ``a_b``) reach the agent as one name.
    Each used to load and then score predictions wrong (or fail every request).

    Raises:
        DatasetError: no user message with text, gold naming an unregistered tool, or colliding names.
    """
    if not example.query.strip():
        raise DatasetError(f"example {example.id!r} has no user message with text")
    safe: dict[str, str] = {}
    for tool in example.registry:
        other = safe.setdefault(tool.safe_name, tool.name)
        if other != tool.name:
            raise DatasetError(f"example {example.id!r}: tools {other!r} and {tool.name!r} are both sent as "
                               f"{tool.safe_name!r} (OpenAI names allow only letters, digits, _ and -)")
    for call in example.gold or ():
        for name in call:
            if example.registry.resolve(name) is None:
                raise DatasetError(f"example {example.id!r}: gold calls {name!r}, which is not in its tools "
                                   f"({', '.join(example.registry.names) or 'none'})")
    return example


# ------------------------------------------------------------------------------------ BFCL format


def bfcl_row_to_example(row: Mapping[str, Any], source: str = "") -> Example:
    """Validate one BFCL-format row and build its Example via the BFCL loader's converter.

    ``ground_truth: null`` means no call is correct, except in ``live_relevance`` where any call is.

    Raises:
        pydantic.ValidationError: a field is missing or has the wrong type.
        ValueError: the row is inconsistent (e.g. gold names a function not in ``function``).
    """
    parsed = BfclRow.model_validate(row)
    question = parsed.question
    if question and isinstance(question[0], dict):  # a flat message list is one turn
        question = [question]
    bfcl_row = {"id": parsed.id, "question": question, "function": parsed.function}
    if parsed.ground_truth is not None:
        answer = {"id": parsed.id, "ground_truth": parsed.ground_truth}
        return example_from_bfcl_row(bfcl_row, answer, parsed.category, source=source)
    expect: Expectation = "any_call" if parsed.category == "live_relevance" else "no_call"
    as_category = "live_relevance" if expect == "any_call" else "irrelevance"
    example = example_from_bfcl_row(bfcl_row, None, as_category, source=source)
    return dataclasses.replace(example, category=parsed.category, expect=expect, gold=None)


def iter_bfcl_jsonl(path: str | Path) -> Iterator[RowResult]:
    """Lenient reader of a BFCL-format JSONL file: ``(line, Example | DatasetError)`` per row."""
    rows = _convert(path, read_records(path), lambda row, where: bfcl_row_to_example(row, source=where))
    return unique_ids(rows, path)


def load_bfcl_jsonl(path: str | Path) -> list[Example]:
    """Strict reader of a BFCL-format JSONL file.

    Raises:
        DatasetError: first bad row, as ``path:line: what is wrong``.
    """
    return strict(iter_bfcl_jsonl(path))


def write_bfcl_rows(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write BFCL-format rows after validating each (keeps BFCL's original types and key order).

    Raises:
        DatasetError: a row does not match the BFCL-format schema (line = its 1-based position).
    """
    out = []
    for i, row in enumerate(rows, start=1):
        try:
            out.append(BfclRow.model_validate(row).model_dump(mode="json"))
        except ValidationError as exc:
            raise DatasetError(f"bad row: {describe_validation_error(exc)}", path=str(path), line=i) from exc
    _write(path, out)


# ------------------------------------------------------------------------------------ our schema


def example_to_row(example: Example) -> dict[str, Any]:
    """The JSON row of one Example in our schema (``split``/``source`` only when set)."""
    row: dict[str, Any] = {
        "id": example.id,
        "category": example.category,
        "messages": [_plain(m) for m in example.messages],
        "tools": example.registry.to_dicts(),
        "gold": None if example.gold is None else [_plain(g) for g in example.gold],
        "expect": example.expect,
    }
    if example.split is not None:
        row["split"] = example.split
    if example.source:
        row["source"] = example.source
    return row


def row_to_example(row: Mapping[str, Any], source: str = "") -> Example:
    """Validate one row of our schema and build its Example.

    Raises:
        pydantic.ValidationError: a field is missing or has the wrong type.
        ValueError: ``expect`` and ``gold`` disagree, or a tool is malformed.
    """
    parsed = ExampleRow.model_validate(row)
    expect: Expectation = parsed.expect or ("calls" if parsed.gold else "no_call")
    if expect == "calls" and not parsed.gold:
        raise ValueError("expect='calls' needs a non-empty 'gold'")
    if expect != "calls" and parsed.gold is not None:
        raise ValueError(f"expect={expect!r} but 'gold' is given; use null")
    registry = Registry.from_dicts(parsed.tools)
    for call in parsed.gold or []:
        if len(call) != 1:
            raise ValueError(f"each gold call must have exactly one function name, got {sorted(call)}")
    messages = tuple(_plain(m) for m in row["messages"])  # validated above; raw keeps key order
    gold = None if parsed.gold is None else tuple(parsed.gold)
    return Example(id=parsed.id, category=parsed.category, messages=messages, registry=registry, gold=gold,
                   expect=expect, split=parsed.split, source=parsed.source or source)


def iter_examples_jsonl(path: str | Path) -> Iterator[RowResult]:
    """Lenient reader of our schema: ``(line, Example | DatasetError)`` per row.

    A row without ``source`` gets the file path as its source.
    """
    rows = _convert(path, read_records(path), lambda row, where: row_to_example(row, source=where))
    return unique_ids(rows, path)


def load_examples_jsonl(path: str | Path) -> list[Example]:
    """Strict reader of our schema.

    Raises:
        DatasetError: first bad row, as ``path:line: what is wrong``.
    """
    return strict(iter_examples_jsonl(path))


def write_examples(path: str | Path, examples: Iterable[Example]) -> int:
    """Write examples in our schema; ``load_examples_jsonl`` reads them back equal. Returns the count.

    Raises:
        DatasetError: two examples share an id.
    """
    rows, seen = [], set()
    for i, ex in enumerate(examples, start=1):
        if ex.id in seen:
            raise DatasetError(f"duplicate id {ex.id!r}", path=str(path), line=i)
        seen.add(ex.id)
        rows.append(example_to_row(ex))
    _write(path, rows)
    return len(rows)


# --------------------------------------------------------------------------------- auto-detection


BFCL_KEYS = frozenset({"question", "function"})
EXAMPLE_KEYS = frozenset({"messages", "tools"})


def detect_jsonl_format(path: str | Path) -> JsonlFormat:
    """Tell BFCL-format rows from our schema by the keys of the first parsable row.

    Raises:
        DatasetError: the file is empty or its first row has neither shape.
    """
    for line, value in read_records(path):
        if isinstance(value, DatasetError):
            continue
        keys = set(value) if isinstance(value, dict) else set()
        if BFCL_KEYS <= keys:
            return "bfcl"
        if EXAMPLE_KEYS <= keys:
            return "examples"
        raise DatasetError("row is neither BFCL-format (question, function, ground_truth) nor saag-opt "
                           f"schema (messages, tools, gold); keys: {sorted(keys)}", path=str(path), line=line)
    raise DatasetError("no JSON rows found", path=str(path))


def iter_jsonl(path: str | Path) -> Iterator[RowResult]:
    """Lenient reader of either JSONL shape (detected from the first row)."""
    if detect_jsonl_format(path) == "bfcl":
        return iter_bfcl_jsonl(path)
    return iter_examples_jsonl(path)


def load_jsonl(path: str | Path) -> list[Example]:
    """Strict reader of either JSONL shape.

    Raises:
        DatasetError: unknown shape or a bad row (``path:line``).
    """
    return strict(iter_jsonl(path))


# ---------------------------------------------------------------------------------------- helpers


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _write(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    atomic_write_jsonl(Path(path), rows)
