"""What an evaluate run produced: the rows of ``records.jsonl`` and the ``summary.json`` model.

Records are append-only JSONL, one row per example and condition (``base`` and the mechanism),
written as they finish; the summary is written on completion. Everything on disk is a pydantic
model with documented fields, registered here for evaluate runs, so ``runfiles.read_run`` (also
importable from here) validates it. The run directory itself (``run.json``, atomic writes,
provenance) is ``saag_opt.runfiles``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import jsonlines
from pydantic import BaseModel, Field

from saag_opt.atomic import atomic_write_jsonl
from saag_opt.evaluation.categories import CategoryScore, RelevanceSuite
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.runfiles import read_rows, read_run, register_summary


class CallRecord(BaseModel):
    """A prediction as stored: calls, raw text, parse status."""

    calls: list[dict[str, Any]] = Field(default_factory=list)
    """``[{"name", "arguments"}]``; empty = abstained."""
    raw: str | None = None
    """Raw model text (trimmed)."""
    status: str = "ok"
    """``ok`` | ``empty`` | ``unparsable``."""


class RoundRecord(BaseModel):
    """One review/repair round."""

    index: int
    """0-based round number."""
    reviewer: str
    """``llm`` or ``saag``."""
    verdict: str
    """approve | reject | reviewer_failed | saag_pass | saag_fail."""
    tentative: CallRecord
    """The prediction under review."""
    feedback: str | None = None
    """Feedback injected into the base agent (None on approval)."""
    revised: CallRecord | None = None
    """The agent's revision after this round's feedback."""
    note: str | None = None
    """Why a round is unusual (e.g. unreadable reviewer output)."""


class CandidateRecord(BaseModel):
    """One s<N>/g<N> candidate."""

    index: int
    """Position shown to the selector."""
    temperature: float
    """Sampling temperature."""
    prediction: CallRecord
    """The candidate."""
    score: float | None = None
    """Grade in [0, 1] (g<N>)."""
    rationale: str | None = None
    """Grader's rationale."""
    passed: bool | None = None
    """saag+s<N>: the gold-free SAAG cascade passed it (None = not checked)."""


class ExampleRecord(BaseModel):
    """One row of ``records.jsonl``: one example under one condition."""

    run_id: str
    """The run it belongs to."""
    example_id: str
    """Example id."""
    category: str
    """Dataset category."""
    split: str | None = None
    """Split tag of the example."""
    condition: str
    """``base`` or the mechanism spec (``r2``, ``gate+r2``, ...)."""
    final: CallRecord | None = None
    """The executed prediction (None when the example failed before one existed)."""
    correct: bool = False
    """Ground-truth verdict (BFCL semantics); False for failed examples."""
    truth_reason: str | None = None
    """Machine-readable reason from the truth check."""
    saag: dict[str, Any] | None = None
    """Evaluation-side SAAG report of the final prediction (``diagnose_with_gold``, gold-aware applicability)."""
    base: CallRecord | None = None
    """Round-0 base prediction (mechanism rows)."""
    base_saag: dict[str, Any] | None = None
    """SAAG report of the base prediction (mechanism rows)."""
    rounds: list[RoundRecord] = Field(default_factory=list)
    """Review/repair rounds in order."""
    candidates: list[CandidateRecord] = Field(default_factory=list)
    """s<N>/g<N> candidates."""
    selected: int | None = None
    """Index of the executed candidate."""
    reviewer_calls: int = 0
    """LLM reviewer calls made."""
    agent_calls: int = 0
    """Base-agent calls beyond round 0 (revisions, candidates)."""
    gated: bool = False
    """The SAAG gate let the base call through without an LLM review."""
    seconds: float = 0.0
    """Latency of the condition: base call + everything after; a proposal or LM reply replayed from a
    cache counts at the time of its original call."""
    untimed_replays: int = 0
    """LM replies replayed from the cache whose original time is unknown (entries older than the time
    store): counted at their ~0 s replay time, so ``seconds`` is a lower bound when > 0."""
    tokens: int = 0
    """Tokens billed for this row in this run (0 when served from cache)."""
    cached: bool = False
    """The round-0 base prediction came from the base-prediction cache."""
    notes: list[str] = Field(default_factory=list)
    """Fallbacks taken (invalid selector index, unusable grades, ...)."""
    reviewer_unusable: int = 0
    """Reviewer replies (review, selection or grade) still unreadable after one retry."""
    error: str | None = None
    """Set when the example failed (LM call failed after retries, ...); the row still counts."""


R = TypeVar("R", bound=ExampleRecord)
"""A record type: ``ExampleRecord`` or one that extends it (a conversation's ``EpisodeRecord``)."""


class RecordWriter:
    """Append-only, thread-safe ``records.jsonl`` writer (one flushed line per record)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._writer = jsonlines.open(path, mode="a", flush=True)

    def write(self, record: ExampleRecord) -> None:
        """Append one record."""
        with self._lock:
            self._writer.write(record.model_dump(mode="json"))

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._writer.close()


# -- summary.json ----------------------------------------------------------------------------------


class ConditionSummary(BaseModel):
    """Accuracy of one condition (``base`` or the mechanism)."""

    condition: str
    """``base`` or the mechanism spec."""
    n: int
    """Examples."""
    correct: int
    """Correct examples."""
    accuracy: float | None
    """correct / n."""
    categories: dict[str, CategoryScore] = Field(default_factory=dict)
    """Category -> accuracy."""
    relevance_suite: RelevanceSuite | None = None
    """Unweighted mean over simple/multiple/parallel/parallel_multiple (those present)."""
    irrelevance: float | None = None
    """Accuracy on the ``irrelevance`` categories (pooled), if any."""
    errors: int = 0
    """Examples whose record carries an ``error``."""
    reviewer_unusable: int = 0
    """Reviewer replies that stayed unreadable after one retry (``--on-unusable`` decided them)."""
    mean_seconds: float | None = None
    """Mean latency per example (errors excluded)."""


class LatencySummary(BaseModel):
    """Latency overhead of the mechanism (paper section 4.5: BFCL 6.2x)."""

    base_mean_seconds: float | None
    """Mean base-call seconds (original time for cached calls)."""
    final_mean_seconds: float | None
    """Mean seconds of the whole mechanism per example, base call included."""
    overhead_x: float | None
    """final / base; None when the base mean is 0 or unknown."""
    untimed_replays: int = 0
    """Replayed LM replies of unknown original time in the pairs (``ExampleRecord.untimed_replays``):
    when > 0 the seconds above are lower bounds (latency incomplete)."""


class PairedSummary(BaseModel):
    """What every evaluate run's ``summary.json`` holds, single calls or conversations: the paired numbers.

    One core, so compare, tune and optimize read either kind alike; each kind adds its own fields.
    """

    run_id: str
    """Run directory name."""
    mechanism: str
    """Mechanism spec."""
    experimental: bool
    """The mechanism or reviewer variant is experimental (SAAG gate, SAAG-informed reviewer)."""
    prompt: str | None = None
    """Reviewer prompt reference (None without a reviewer)."""
    errors: int
    """Items with an error in either condition."""
    base: ConditionSummary
    """The base agent alone."""
    reviewed: ConditionSummary
    """With the mechanism."""
    help_harm: HelpHarm
    """Help/harm table over the items without errors (McNemar, bootstrap CI of the net change)."""
    latency: LatencySummary
    """Latency overhead."""
    reviewer_calls_per_item: float | None
    """Mean LLM reviewer calls per item."""
    agent_calls_per_item: float | None
    """Mean extra base-agent calls (revisions, candidates) per item."""
    gated_share: float | None = None
    """gate+ mechanisms: share of the items (of conversations: of the steps) the SAAG gate passed without an
    LLM review."""
    costs: dict[str, Any] = Field(default_factory=dict)
    """Cost ledger per role (calls, tokens, dollars, seconds)."""
    contaminated: list[str] = Field(default_factory=list)
    """Evaluated splits the reviewer prompt was trained or selected on (``["val"]``): not held out."""
    reviewer_mismatch: str | None = None
    """Why the reviewer run is not the one the (GEPA) prompt was tuned for, e.g. tuned seeing the SAAG
    report and run without ``--saag-informed`` (``PromptVersion.reviewer_mismatch``); None = it is."""
    stopped: str | None = None
    """Why the run ended before every item was evaluated (``--max-cost`` reached); None = complete."""
    on_unusable: str = "approve"
    """How unreadable reviews (``reviewed.reviewer_unusable``) were decided: approve or reject."""

    @property
    def n_items(self) -> int:
        """Items evaluated (examples or entries)."""
        raise NotImplementedError


class EvaluationSummary(PairedSummary):
    """``summary.json`` of an evaluate run on single calls."""

    n_examples: int
    """Examples evaluated."""

    @property
    def n_items(self) -> int:
        """Examples evaluated."""
        return self.n_examples


def read_records(path: Path) -> list[ExampleRecord]:
    """The rows of a ``records.jsonl`` (any run verb writes the same rows).

    A record cut short by a kill is left out with a warning (``runfiles.read_run_jsonl``).

    Raises:
        RunError: an unreadable file, or a row that is not an ``ExampleRecord`` (with file and line).
    """
    return read_rows(path, ExampleRecord)


def finished_records(path: Path, condition: str, ids: Iterable[str], record: type[R]) -> list[R]:
    """The ``record`` rows of the items in ``ids`` that finished: a ``base`` row and a ``condition`` row each.

    What a resumed run keeps (``evaluate --resume``). A last row cut short by a crash is skipped
    (``runfiles.read_run_jsonl``) so its example is redone; an example with only one of its rows, one
    not in ``ids`` (any more), or one that ended in an error (a call that failed after its retries:
    resuming after an outage must try it again) is dropped so it is run again; a repeated row keeps
    the first copy.

    Raises:
        RunError: an unreadable file, or a line (other than a torn last one) that is not an
            ``ExampleRecord`` (with file and line).
    """
    if not path.is_file():
        return []
    wanted = set(ids)
    rows: dict[tuple[str, str], R] = {}
    for row in read_rows(path, record):
        if row.example_id in wanted and row.condition in ("base", condition):
            rows.setdefault((row.example_id, row.condition), row)
    done = {example_id for (example_id, _), record in rows.items()
            if (example_id, "base") in rows and (example_id, condition) in rows
            and rows[(example_id, "base")].error is None and rows[(example_id, condition)].error is None}
    return [record for (example_id, _), record in rows.items() if example_id in done]


def keep_finished(path: Path, condition: str, ids: Iterable[str], record: type[R]) -> list[R]:
    """What a resumed run keeps (``finished_records``), with ``path`` rewritten (atomically) to hold those rows alone.

    Why the rewrite: an item cut in half, a failed one or a torn last line would otherwise pair with
    its rerun; every item then appears exactly once.
    """
    kept = finished_records(path, condition, ids, record)
    atomic_write_jsonl(path, [row.model_dump(mode="json") for row in kept])
    return kept


register_summary("evaluate", EvaluationSummary, records=ExampleRecord)

__all__ = ["CallRecord", "CandidateRecord", "ConditionSummary", "EvaluationSummary", "ExampleRecord", "LatencySummary",
           "PairedSummary", "RecordWriter", "RoundRecord", "finished_records", "keep_finished", "read_records", "read_run"]
