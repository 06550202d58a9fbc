"""What both scorers share about files: rows read one by one, bad rows as ``Rejection``, the ``--json`` output.

A scorer (``score.calls``, ``score.conversations``) says how one row is judged; reading the file,
keeping bad rows as data (``path:line: message``) and writing the scored rows with their summary
beside them are the same for every kind of file, so they live here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from saag_opt.atomic import atomic_write_json, atomic_write_jsonl
from saag_opt.data.jsonl import read_records
from saag_opt.errors import DatasetError

Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class Rejection:
    """A row that could not be scored."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def judge_rows(path: str | Path, missing: str, judge: Callable[[Any, int], Row | str]) -> tuple[list[Row], list[Rejection]]:
    """Every row of ``path`` (JSON Lines or a JSON array) given to ``judge(value, line)``: its scored row, or why not.

    ``missing``: the message when ``path`` is not a file ("predictions file not found").

    Raises:
        DatasetError: the file does not exist or cannot be read at all.
    """
    where = str(path)
    if not Path(path).is_file():
        raise DatasetError(missing, path=where)
    rows: list[Row] = []
    rejections: list[Rejection] = []
    for line, value in read_records(path):
        outcome = judge(value, line)
        if isinstance(outcome, str):
            rejections.append(Rejection(where, line, outcome))
        else:
            rows.append(outcome)
    return rows, rejections


class Scored(Protocol):
    """What a scorer returns, as far as writing it goes."""

    @property
    def summary(self) -> BaseModel:
        """The numbers over every scored row."""

    def json_rows(self) -> list[dict[str, Any]]:
        """One JSON object per scored row."""


def summary_path(out: str | Path) -> Path:
    """The summary beside ``out``: ``scores.jsonl`` -> ``scores.summary.json``; ``run.out`` -> ``run.out.summary.json``."""
    out = Path(out)
    if out.suffix in (".jsonl", ".json"):
        return out.with_suffix(".summary.json")
    return out.with_name(out.name + ".summary.json")


def write_score_json(result: Scored, out: str | Path) -> tuple[Path, Path]:
    """Write one JSON row per scored row to ``out`` and the summary beside it (``summary_path``), atomically.

    Returns:
        The rows path and the summary path.

    Raises:
        DatasetError: the output directory cannot be created or written.
    """
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create the output directory: {exc.strerror or exc}", path=str(out)) from exc
    summary = summary_path(out)
    try:
        atomic_write_jsonl(out, result.json_rows())
        atomic_write_json(summary, result.summary.model_dump(mode="json"))
    except OSError as exc:
        raise DatasetError(f"cannot write output: {exc.strerror or exc}", path=str(exc.filename or out)) from exc
    return out, summary


__all__ = ["Rejection", "Scored", "judge_rows", "summary_path", "write_score_json"]
