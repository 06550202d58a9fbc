"""Load the Berkeley Function Calling Leaderboard (single-turn) as ``Example``s.

The data comes from the ``bfcl-eval`` package, pinned to ``BFCL_VERSION``: either an installed
``bfcl_eval`` (found with ``importlib.util.find_spec``; none of its modules are imported, they pull
in every provider SDK) or the wheel that ``fetch_bfcl`` downloads into the user cache dir, read
straight from the zip. BFCL's ``.json`` files are JSON Lines; answers live under
``possible_answer/``. Licence: Apache-2.0 (``bfcl_eval/data/README.md``).
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonlines
from pydantic import BaseModel, ConfigDict, ValidationError

from saag_opt.errors import ConfigError, DatasetError
from saag_opt.model import Example, Expectation, Registry
from saag_opt.paths import cache_dir as default_cache_dir

__all__ = [
    "BFCL_VERSION",
    "bfcl_available",
    "bfcl_categories",
    "bfcl_data_dir",
    "bfcl_files",
    "default_cache_dir",
    "example_from_bfcl_row",
    "fetch_bfcl",
    "load_bfcl",
]

BFCL_VERSION = "2026.3.23"
"""The ``bfcl-eval`` release whose data and checker semantics saag-opt reproduces."""

_CATEGORIES = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
    "irrelevance", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
    "live_irrelevance", "live_relevance",
)
_WHEEL = f"bfcl_eval-{BFCL_VERSION}-py3-none-any.whl"
_HOW_TO_GET = (f"run `saag-opt datasets fetch bfcl` or `pip install --no-deps bfcl-eval=={BFCL_VERSION}`")


class BfclQuestionRow(BaseModel):
    """One line of ``BFCL_v4_<category>.json``."""

    model_config = ConfigDict(extra="allow")
    id: str
    """BFCL's example id, e.g. ``simple_python_0``."""
    question: Any
    """Turns of messages (list of lists), a flat list of messages, or a plain string."""
    function: list[dict[str, Any]] | dict[str, Any]
    """The registry: BFCL function docs (Gorilla types)."""


class BfclAnswerRow(BaseModel):
    """One line of ``possible_answer/BFCL_v4_<category>.json``."""

    model_config = ConfigDict(extra="allow")
    id: str
    """Matches the question's id."""
    ground_truth: list[dict[str, dict[str, list[Any]]]]
    """Gold calls: ``[{function: {param: [acceptable values]}}]``."""


def bfcl_categories() -> list[str]:
    """Every single-turn BFCL category (non-live, then live; irrelevance and relevance included)."""
    return list(_CATEGORIES)


def bfcl_data_dir() -> Path | None:
    """``bfcl_eval/data`` of an installed package, found without importing it (its imports are heavy)."""
    try:
        spec = importlib.util.find_spec("bfcl_eval")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        data = Path(location) / "data"
        if (data / "possible_answer").is_dir():
            return data
    return None


def _cached_wheel(cache_dir: Path | None = None) -> Path | None:
    wheel = (cache_dir or default_cache_dir()) / "bfcl" / _WHEEL
    return wheel if wheel.is_file() else None


def bfcl_available() -> bool:
    """True when BFCL data can be loaded without the network."""
    return bfcl_data_dir() is not None or _cached_wheel() is not None


def fetch_bfcl(cache_dir: Path | None = None) -> Path:
    """Download the pinned ``bfcl-eval`` wheel (no dependencies) into the cache; return its path.

    Raises:
        DatasetError: pip failed (its last output lines are in the message).
    """
    target = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "bfcl"
    existing = _cached_wheel(target.parent)
    if existing is not None:
        return existing
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", f"bfcl-eval=={BFCL_VERSION}", "-d", str(target)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheel = target / _WHEEL
    if proc.returncode != 0 or not wheel.is_file():
        tail = " ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-3:])
        raise DatasetError(f"could not download bfcl-eval=={BFCL_VERSION} with pip: {tail or 'no output'}",
                           path=str(target))
    return wheel


def _open_text(root: Path, relative: str) -> tuple[io.TextIOBase, str] | None:
    """Open ``relative`` (under ``data/``) in a data dir or a wheel; None if it is not there."""
    if root.is_file() and zipfile.is_zipfile(root):
        member = f"bfcl_eval/data/{relative}"
        with zipfile.ZipFile(root) as archive:
            if member not in archive.namelist():
                return None
            text = archive.read(member).decode("utf-8")
        return io.StringIO(text), f"{root}!{member}"
    path = root / relative
    if not path.is_file():
        return None
    return open(path, encoding="utf-8"), str(path)  # noqa: SIM115 - closed by the caller


def _read_jsonl(root: Path, relative: str) -> Iterator[tuple[int, Any, str]]:
    """(line number, decoded row, display path) for each non-empty line."""
    opened = _open_text(root, relative)
    if opened is None:
        raise DatasetError(f"BFCL file {relative} not found; {_HOW_TO_GET}", path=str(root))
    stream, shown = opened
    with stream:
        for lineno, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, jsonlines.Reader([line]).read(), shown
            except jsonlines.InvalidLineError as exc:
                raise DatasetError(f"invalid JSON: {exc}", path=shown, line=lineno) from None


def _resolve_root(root: str | Path | None) -> Path:
    if root is not None:
        path = Path(root).expanduser()
        if not path.exists():
            raise DatasetError(f"BFCL data root does not exist; {_HOW_TO_GET}", path=str(path))
        return path
    found = bfcl_data_dir() or _cached_wheel()
    if found is None:
        raise DatasetError(f"BFCL data {BFCL_VERSION} not found; {_HOW_TO_GET}")
    return found


def _answers(root: Path, category: str) -> dict[str, tuple[dict[str, Any], str, int]]:
    out: dict[str, tuple[dict[str, Any], str, int]] = {}
    for lineno, row, shown in _read_jsonl(root, f"possible_answer/BFCL_v4_{category}.json"):
        try:
            answer = BfclAnswerRow.model_validate(row)
        except ValidationError as exc:
            raise DatasetError(_short(exc), path=shown, line=lineno) from None
        out[answer.id] = (row, shown, lineno)
    return out


def _short(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "row"
    return f"{where}: {err.get('msg', 'invalid')}"


def bfcl_files(category: str, *, root: str | Path | None = None) -> tuple[Path, ...]:
    """The files ``load_bfcl(category, root=root)`` reads: the wheel, or the data dir's question and answer files.

    Raises:
        DatasetError: no BFCL data (as ``load_bfcl``).
    """
    base = _resolve_root(root)
    if base.is_file():
        return (base,)
    return base / f"BFCL_v4_{category}.json", base / "possible_answer" / f"BFCL_v4_{category}.json"


def load_bfcl(category: str, *, root: str | Path | None = None) -> list[Example]:
    """All examples of one BFCL single-turn category, in file order.

    ``root`` is a ``bfcl_eval/data`` directory or a ``bfcl_eval`` wheel; by default the installed
    package, then the cached wheel.

    Raises:
        ConfigError: unknown category (the message lists the choices).
        DatasetError: data missing (says how to fetch it) or a bad row (path:line).
    """
    if category not in _CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r}; choose one of: {', '.join(_CATEGORIES)}")
    base = _resolve_root(root)
    answers = {} if _expectation(category) != "calls" else _answers(base, category)
    examples: list[Example] = []
    for lineno, row, shown in _read_jsonl(base, f"BFCL_v4_{category}.json"):
        try:
            BfclQuestionRow.model_validate(row)
            answer = answers.get(row["id"])
            examples.append(example_from_bfcl_row(row, answer[0] if answer else None, category,
                                                  source=f"bfcl-eval=={BFCL_VERSION}"))
        except ValidationError as exc:
            raise DatasetError(_short(exc), path=shown, line=lineno) from None
        except DatasetError as exc:
            raise DatasetError(str(exc), path=shown, line=lineno) from None
    return examples


def _expectation(category: str) -> Expectation:
    if "irrelevance" in category:
        return "no_call"
    if "relevance" in category:
        return "any_call"
    return "calls"


def _messages(question: Any) -> tuple[dict[str, Any], ...]:
    """Flatten BFCL's turns of messages; a plain string is one user message."""
    if isinstance(question, str):
        return ({"role": "user", "content": question},)
    if not isinstance(question, Sequence):
        raise DatasetError("'question' must be a string or a list of messages")
    out: list[dict[str, Any]] = []
    for item in question:
        turn = item if isinstance(item, Sequence) and not isinstance(item, (str, Mapping)) else [item]
        for message in turn:
            if isinstance(message, str):
                message = {"role": "user", "content": message}
            if not isinstance(message, Mapping) or "role" not in message:
                raise DatasetError("each message in 'question' needs a 'role'")
            out.append(dict(message))
    return tuple(out)


def _gold(answer: Mapping[str, Any] | None, row_id: str) -> tuple[dict[str, Any], ...]:
    truth = answer.get("ground_truth") if answer is not None else None
    if not isinstance(truth, list) or not truth:
        raise DatasetError(f"example {row_id!r} has no ground_truth (possible answer) calls")
    for call in truth:
        ok = isinstance(call, Mapping) and len(call) == 1
        params = next(iter(call.values())) if ok else None
        if not isinstance(params, Mapping) or not all(isinstance(v, list) for v in params.values()):
            raise DatasetError(f"example {row_id!r}: each ground_truth call must be "
                               "{function: {param: [acceptable values]}}")
    return tuple(truth)


def example_from_bfcl_row(row: Mapping[str, Any], answer: Mapping[str, Any] | None, category: str, *,
                          source: str) -> Example:
    """Turn a BFCL question row (+ its possible-answer row) into an ``Example``.

    Irrelevance categories expect no call (gold None); ``live_relevance`` expects any call.

    Raises:
        DatasetError: missing id/function/question or malformed ground truth (no path; callers add it).
    """
    row_id = row.get("id")
    if not isinstance(row_id, str) or not row_id:
        raise DatasetError("row has no string 'id'")
    functions = row.get("function")
    if isinstance(functions, Mapping):
        functions = [functions]
    if not isinstance(functions, list):
        raise DatasetError(f"example {row_id!r}: 'function' must be a list of function docs")
    try:
        registry = Registry.from_dicts(functions)
    except ValueError as exc:
        raise DatasetError(f"example {row_id!r}: {exc}") from None
    if "question" not in row:
        raise DatasetError(f"example {row_id!r} has no 'question'")
    expect = _expectation(category)
    gold = _gold(answer, row_id) if expect == "calls" else None
    if expect == "any_call" and answer is not None and answer.get("ground_truth"):
        gold = _gold(answer, row_id)
    return Example(id=row_id, category=category, messages=_messages(row["question"]), registry=registry,
                   gold=gold, expect=expect, source=source)
