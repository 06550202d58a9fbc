"""Run directories and their files: ``run.json``, ``records.jsonl``, ``summary.json``, ``costs.json``.

Shaped like an eval log (STYLE practice 13): the header is written at start with
``status="started"`` and rewritten atomically at the end; records are append-only JSONL, one row
per example and condition (``base`` and the mechanism); the summary is written on completion.
Everything on disk is a pydantic model with documented fields, so ``read_run`` validates it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import jsonlines
from pydantic import BaseModel, ConfigDict, Field

from saag_opt.errors import RunError, SaagOptError
from saag_opt.evaluation.score import CategoryScore, RelevanceSuite

SCHEMA_VERSION = 1
"""Version of the run-directory format."""

RunStatus = Literal["started", "success", "error", "cancelled"]

_PACKAGES = ("saag-opt", "dspy", "gepa", "litellm", "openai", "rapidfuzz", "pydantic", "bfcl-eval")


class RunErrorInfo(BaseModel):
    """Why a run ended with ``status="error"``."""

    message: str
    """One-line description."""
    traceback: str | None = None
    """Python traceback for unexpected failures."""


class RunHeader(BaseModel):
    """``run.json``: what was run, with what, and how it ended."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    """Run-directory format version."""
    run_id: str
    """Directory name, e.g. ``20260101-120000-evaluate``."""
    verb: str
    """The command that produced it (``evaluate``)."""
    status: RunStatus = "started"
    """started -> success | error | cancelled."""
    created: str
    """ISO-8601 UTC start time."""
    finished: str | None = None
    """ISO-8601 UTC end time."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The validated config (no secrets)."""
    args_passed: dict[str, Any] = Field(default_factory=dict)
    """Only the options the user set explicitly."""
    models: dict[str, str] = Field(default_factory=dict)
    """Role -> model spec text."""
    plugins: dict[str, Any] = Field(default_factory=dict)
    """How each plug-in was built (e.g. mechanism spec, args, experimental flag)."""
    dataset: dict[str, Any] = Field(default_factory=dict)
    """Dataset spec, split, example count and a hash of the example ids."""
    git_revision: str | None = None
    """Commit of the working tree, when inside a git checkout."""
    packages: dict[str, str] = Field(default_factory=dict)
    """Versions of the packages that shape the results, plus python."""
    error: RunErrorInfo | None = None
    """Set when ``status == "error"``."""


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
    """Evaluation-side SAAG report of the final prediction (``diagnose``, gold-aware applicability)."""
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
    """Latency of the condition: base call (its original time when cached) + everything after."""
    tokens: int = 0
    """Tokens billed for this row in this run (0 when served from cache)."""
    cached: bool = False
    """The round-0 base prediction came from the base-prediction cache."""
    notes: list[str] = Field(default_factory=list)
    """Fallbacks taken (invalid selector index, unusable grades, ...)."""
    error: str | None = None
    """Set when the example failed (LM call failed after retries, ...); the row still counts."""


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


def utc_now() -> str:
    """ISO-8601 UTC timestamp."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write_json(path: Path, payload: Any) -> None:
    """Write JSON via temp file + ``os.replace`` (readers never see half a file)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, ensure_ascii=False, default=str)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_run_dir(runs_dir: Path, verb: str) -> Path:
    """``runs/<timestamp>-<verb>/`` (suffixed ``-2``, ``-3`` ... if it exists).

    Raises:
        RunError: the directory cannot be created.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            path = runs_dir / (f"{stamp}-{verb}" if attempt == 1 else f"{stamp}-{verb}-{attempt}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
    except OSError as exc:
        raise RunError(f"cannot create a run directory under {runs_dir}: {exc}") from exc
    raise RunError(f"cannot create a run directory under {runs_dir}: too many runs this second")


def write_header(run_dir: Path, header: RunHeader) -> None:
    """(Re)write ``run.json`` atomically."""
    atomic_write_json(run_dir / "run.json", header.model_dump(mode="json"))


def finish_header(run_dir: Path, header: RunHeader, exc: BaseException | None = None,
                  status: str = "success") -> None:
    """Rewrite ``run.json`` with the final status; a failure records its message (and a traceback
    unless it is a user error), Ctrl-C is ``cancelled``. Every verb ends its run through here."""
    update: dict[str, Any] = {"finished": utc_now(), "status": status}
    if isinstance(exc, KeyboardInterrupt):
        update |= {"status": "cancelled", "error": RunErrorInfo(message="interrupted (KeyboardInterrupt)")}
    elif exc is not None:
        tb = None if isinstance(exc, SaagOptError) else traceback.format_exc()
        update |= {"status": "error", "error": RunErrorInfo(message=f"{type(exc).__name__}: {exc}", traceback=tb)}
    write_header(run_dir, header.model_copy(update=update))


@contextmanager
def guarded_run(run_dir: Path, header: RunHeader) -> Iterator[None]:
    """Mark the run error/cancelled in ``run.json`` if the body raises, then re-raise."""
    try:
        yield
    except BaseException as exc:
        finish_header(run_dir, header, exc)
        raise


def package_versions() -> dict[str, str]:
    """Versions of the packages that shape results (missing ones omitted) plus python."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_revision(cwd: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the working directory, or None outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


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


class EvaluationSummary(BaseModel):
    """``summary.json`` of an evaluate run."""

    run_id: str
    """Run directory name."""
    mechanism: str
    """Mechanism spec."""
    experimental: bool
    """The mechanism or reviewer variant is experimental (SAAG gate, SAAG-informed reviewer)."""
    prompt: str | None
    """Reviewer prompt reference (None without a reviewer)."""
    n_examples: int
    """Examples evaluated."""
    errors: int
    """Examples with an error in either condition."""
    base: ConditionSummary
    """The base agent alone."""
    reviewed: ConditionSummary
    """With the mechanism."""
    help_harm: dict[str, Any]
    """Help/harm table over examples without errors (``HelpHarm.to_dict``)."""
    latency: LatencySummary
    """Latency overhead."""
    reviewer_calls_per_item: float | None
    """Mean LLM reviewer calls per example."""
    agent_calls_per_item: float | None
    """Mean extra base-agent calls (revisions, candidates) per example."""
    gated_share: float | None = None
    """gate+ mechanisms: share of examples the SAAG gate passed without an LLM review."""
    costs: dict[str, Any] = Field(default_factory=dict)
    """Cost ledger per role (calls, tokens, dollars, seconds)."""


class RunContents(BaseModel):
    """What ``read_run`` returns."""

    header: RunHeader
    """``run.json``."""
    records: list[ExampleRecord] = Field(default_factory=list)
    """``records.jsonl`` rows (empty with ``header_only``)."""
    summary: EvaluationSummary | None = None
    """``summary.json`` if written."""


def read_run(path: str | os.PathLike[str], *, header_only: bool = False) -> RunContents:
    """Read a run directory back (validated).

    Raises:
        RunError: missing or unreadable ``run.json`` / ``records.jsonl`` (with file and line).
    """
    run_dir = Path(path)
    try:
        header = RunHeader.model_validate_json((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{run_dir / 'run.json'}: cannot read run header: {str(exc).splitlines()[0]}") from exc
    summary_path = run_dir / "summary.json"
    summary = (EvaluationSummary.model_validate_json(summary_path.read_text(encoding="utf-8"))
               if summary_path.is_file() else None)
    if header_only:
        return RunContents(header=header, summary=summary)
    records = []
    records_path = run_dir / "records.jsonl"
    if records_path.is_file():
        with jsonlines.open(records_path) as reader:
            for line, row in enumerate(reader, start=1):
                try:
                    records.append(ExampleRecord.model_validate(row))
                except ValueError as exc:
                    raise RunError(f"{records_path}:{line}: bad record: {str(exc).splitlines()[0]}") from exc
    return RunContents(header=header, records=records, summary=summary)
