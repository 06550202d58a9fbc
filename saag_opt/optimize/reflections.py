"""``<run>/reflections.jsonl``: what the reflection LM was given at each proposal, for reading and replay.

Why: a proposal is only as good as what its reflection read; keeping each parent text and reflective
dataset lets a user see why an edit was written, and lets ``experiments/bench/proposer_yield.py``
replay the very same inputs through another proposer or model. The file holds the reflection
LM's inputs only; they may quote gold on the feedback lines labelled for the reflection
(``feedback.GOLD_LABEL``), as the reflection prompt itself does, and nothing here reaches a reviewer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonlines

REFLECTIONS_FILE = "reflections.jsonl"


def _plain(value: Any) -> Any:
    """JSON-friendly copy of a reflective dataset (dspy values become strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class ReflectionRecorder:
    """gepa callback: append one line per proposal start (iteration, parent texts, components, dataset)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / REFLECTIONS_FILE
        self._lock = threading.Lock()

    def on_proposal_start(self, event: Mapping[str, Any]) -> None:
        """Record what the proposer is about to read (appended and flushed: a crash keeps the lines before)."""
        row = {"iteration": int(event.get("iteration", -1)), "parent": _plain(event.get("parent_candidate") or {}),
               "components": list(event.get("components") or ()),
               "dataset": _plain(event.get("reflective_dataset") or {})}
        with self._lock, jsonlines.open(self.path, mode="a") as out:
            out.write(row)


def read_reflections(path: Path) -> Iterator[dict[str, Any]]:
    """The recorded reflections of a run, in order."""
    with jsonlines.open(path) as rows:
        yield from rows


__all__ = ["REFLECTIONS_FILE", "ReflectionRecorder", "read_reflections"]
