"""The run directory: its files, its lifecycle, and how a run reads back (its provenance: ``provenance``).

Every file here is written through ``saag_opt.atomic`` (a temp file + ``os.replace``), so a reader
(or a crash) never sees half a file.

A run directory is shaped like an eval log (docs/design.md §10): ``run.json`` (``RunHeader``) is
written at start with ``status="started"`` and rewritten atomically at the end through
``finish_header`` (``guarded_run`` does so when the body raises). What the rows and summary of a
run hold is the verb's business: each verb says so with ``register_summary`` (``evaluation.results``
for evaluate runs), and ``read_run`` reads any registered run back typed, the way inspect's
``read_eval_log`` does. ``read_model`` is the one reader of a JSON file as a pydantic model.

Low layer: imports only ``atomic``, ``errors``, ``memo``, ``provenance``, pydantic and jsonlines, so ``agents``,
``artifacts``, ``data`` and ``lm`` can use it.
"""

from __future__ import annotations

import gzip
import logging
import os
import traceback
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

import jsonlines
from pydantic import BaseModel, ConfigDict, Field

from saag_opt.atomic import atomic_write_json
from saag_opt.errors import CostCapReached, RunError, SaagOptError, validation_message
from saag_opt.provenance import git_revision, package_versions

SCHEMA_VERSION = 1
"""Version of the run-directory format."""

RunStatus = Literal["started", "success", "error", "interrupted", "cancelled", "stopped"]

RECORDS_FILE = "records.jsonl"
"""The rows every verb but tune writes (one ``ExampleRecord`` per example and condition)."""
SUMMARY_FILE = "summary.json"
"""What a run concluded, written when it ends (the verb's registered model)."""
COSTS_FILE = "costs.json"
"""The run's LM ledger (``lm.spend.ledgerfile`` writes it), kept current while the run goes."""

M = TypeVar("M", bound=BaseModel)


# -- time and JSONL rows ---------------------------------------------------------------------------


def utc_now() -> str:
    """ISO-8601 UTC timestamp with seconds precision, e.g. ``2026-03-30T12:00:00+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_run_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` per non-blank line of a JSONL run file (records, trials; ``.gz``: compressed).

    A last line without its newline that does not parse is a write cut short (the process was
    killed, the disk filled): that row never finished, so it is skipped with a warning.

    Raises:
        RunError: an unreadable file, or a line that is not UTF-8 JSON (file:line).
    """
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":  # a collected run (experiments/results) keeps its rows compressed
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise RunError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from exc
    lines = data.split(b"\n")
    for line, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            value = jsonlines.Reader([raw.decode("utf-8")]).read()
        except (UnicodeDecodeError, jsonlines.InvalidLineError) as exc:
            if line == len(lines):  # no newline after it
                logging.getLogger(__name__).warning("%s:%d: ignoring a row cut short while being written", path, line)
                return
            reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc).rsplit(" (line ", 1)[0]
            raise RunError(f"{path}:{line}: bad row: {reason}") from exc
        yield line, value


# -- run.json ---------------------------------------------------------------------------------------


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
    """started -> success | error | interrupted (SIGTERM/Ctrl-C; resumable) | stopped (``--max-cost``
    reached; finished work kept). ``cancelled``: older runs."""
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


def new_header(run_dir: Path, verb: str, **fields: Any) -> RunHeader:
    """A ``started`` header for ``run_dir`` with the start time and provenance (git, packages) filled in."""
    return RunHeader(run_id=run_dir.name, verb=verb, created=utc_now(), git_revision=git_revision(),
                     packages=package_versions(), **fields)


def write_header(run_dir: Path, header: RunHeader) -> None:
    """(Re)write ``run.json`` atomically."""
    atomic_write_json(run_dir / "run.json", header.model_dump(mode="json"))


def read_header(run_dir: Path) -> RunHeader:
    """``run.json`` of a run directory, validated.

    Raises:
        RunError: missing or unreadable ``run.json``.
    """
    return read_model(run_dir / "run.json", RunHeader, what="run.json")


def resume_header(run_dir: Path, verb: str, *also: str) -> RunHeader:
    """``run.json`` of the run ``--resume RUN_DIR`` names, which must be a ``verb`` run (or one of ``also``).

    Raises:
        RunError: missing or unreadable ``run.json``, or a run of another verb (both name ``--resume``).
    """
    try:
        header = read_header(run_dir)
    except RunError as exc:
        raise RunError(f"--resume {exc}") from exc
    if header.verb not in (verb, *also):
        raise RunError(f"--resume {run_dir}: it is a {header.verb!r} run, not {'an' if verb[0] in 'aeiou' else 'a'} "
                       f"{verb} run")
    return header


def resumed(header: RunHeader, args_passed: Mapping[str, Any] | None, **extra: Any) -> list[dict[str, Any]]:
    """``header``'s ``resumes`` with this resume added: when, the options it passed, when the attempt before ended.

    Why ``previous_end``: what a run wrote can then be told from what ran on the machine between two
    attempts (the base proposals ``experiments/recompute.py`` bundles are picked by time).
    """
    entry = {"at": utc_now(), "previous_end": header.finished, "args_passed": dict(args_passed or {}), **extra}
    return [*(getattr(header, "resumes", None) or []), entry]


# -- reading files and runs back -------------------------------------------------------------------


def read_model(path: Path, model: type[M], *, error: type[SaagOptError] = RunError, what: str | None = None) -> M:
    """``path`` parsed and validated as ``model``: the one reader of a JSON file the package wrote.

    One line names the file and the bad field: ``PATH: cannot read (REASON)``, or with ``what``
    (the file's name in the directory the user gave) ``DIR: cannot read WHAT (REASON)``. A caller
    for whom a missing file is normal checks ``path.is_file()`` first.

    Raises:
        error: the file is missing, unreadable, not JSON, or not a valid ``model``.
    """
    where = f"{path.parent}: cannot read {what}" if what else f"{path}: cannot read"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise error(f"{where} ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        return model.model_validate_json(text)
    except ValueError as exc:
        raise error(f"{where} ({validation_message(exc, whole='file')})") from exc


def read_rows(path: Path, model: type[M]) -> list[M]:
    """The rows of a JSONL run file validated as ``model`` (a torn last row is skipped: ``read_run_jsonl``).

    Raises:
        RunError: an unreadable file, or a row that is not a ``model`` (with file and line).
    """
    rows = []
    for line, value in read_run_jsonl(path):
        try:
            rows.append(model.model_validate(value))
        except ValueError as exc:
            raise RunError(f"{path}:{line}: bad record: {validation_message(exc, whole='record')}") from exc
    return rows


class CostsFile(BaseModel):
    """``costs.json`` (``CostLedger.to_dict``): per-role accounts and totals; other keys are kept."""

    model_config = ConfigDict(extra="allow")

    roles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Role -> account (calls, tokens, dollars, seconds ...), plus ``total``."""


def read_costs(run_dir: Path) -> dict[str, Any] | None:
    """``run_dir/costs.json`` as written, or None when there is none or it does not parse.

    Lenient on purpose: the ledger is accounting beside a run's results; a damaged one must neither
    stop a resume (it starts counting from zero) nor hide the results.
    """
    path = run_dir / COSTS_FILE
    try:
        return read_model(path, CostsFile).model_dump() if path.is_file() else None
    except RunError:
        return None


@dataclass(frozen=True)
class RunKind:
    """How the runs of one verb read back: the model of their summary and of their rows."""

    summary: type[BaseModel]
    records: type[BaseModel]
    records_file: str = RECORDS_FILE


_KINDS: dict[str, RunKind] = {}


def register_summary(verb: str, summary: type[BaseModel], *, records: type[BaseModel],
                     records_file: str = RECORDS_FILE) -> None:
    """Say how ``verb`` runs read back: ``summary.json`` as ``summary``, each row of ``records_file`` as ``records``.

    Each verb registers its own where its summary model lives, so this low layer imports none of
    them; registering a verb again replaces its entry.
    """
    _KINDS[verb] = RunKind(summary, records, records_file)


@dataclass(frozen=True)
class Run:
    """A run directory read back, each file as its verb's model (``read_run``)."""

    path: Path
    """The run directory."""
    header: RunHeader
    """``run.json``."""
    summary: Any = None
    """``summary.json`` as the verb's registered model; None until the run wrote one."""
    records: list[Any] = field(default_factory=list)
    """The rows as the verb's row model (empty with ``header_only`` or before the first row)."""


def read_run(path: str | os.PathLike[str], *, header_only: bool = False) -> Run:
    """Read a run directory of any registered verb back, validated (like inspect's ``read_eval_log``).

    ``header_only`` leaves out the rows, the one file that grows with the run. Rows may be
    gzip-compressed (``records.jsonl.gz``, as collected runs keep them).

    Raises:
        RunError: missing or unreadable ``run.json``; a verb no module registered; an unreadable
            ``summary.json``; a bad row (file:line).
    """
    run_dir = Path(path)
    header = read_header(run_dir)
    kind = _KINDS.get(header.verb)
    if kind is None:
        raise RunError(f"{run_dir / 'run.json'}: cannot read a {header.verb!r} run (the run kinds known here: "
                       f"{', '.join(sorted(_KINDS)) or 'none'})")
    summary_path = run_dir / SUMMARY_FILE
    summary = read_model(summary_path, kind.summary) if summary_path.is_file() else None
    if header_only:
        return Run(run_dir, header, summary)
    rows = run_dir / kind.records_file
    if not rows.is_file() and rows.with_name(rows.name + ".gz").is_file():
        rows = rows.with_name(rows.name + ".gz")
    return Run(run_dir, header, summary, read_rows(rows, kind.records) if rows.is_file() else [])


RunFinishedHook = Callable[[Path], None]
_FINISH_HOOKS: list[RunFinishedHook] = []


def on_run_finished(hook: RunFinishedHook) -> Callable[[], None]:
    """Call ``hook(run_dir)`` whenever a run ends (any status), after ``run.json`` is final.

    How a higher layer reacts to runs ending without this low layer importing it: the CLI registers
    the HTML report writer here for the duration of a command. A hook that raises is logged and never
    changes the run's outcome. Registering a hook twice is a no-op. Returns a function that
    unregisters it.
    """
    if hook not in _FINISH_HOOKS:
        _FINISH_HOOKS.append(hook)

    def remove() -> None:
        if hook in _FINISH_HOOKS:
            _FINISH_HOOKS.remove(hook)

    return remove


def finish_header(run_dir: Path, header: RunHeader, exc: BaseException | None = None,
                  status: str = "success") -> None:
    """Rewrite ``run.json`` with the final status, then run the ``on_run_finished`` hooks.

    Every verb ends its run through here. A failure records its message (and a traceback unless it
    is a user error); SIGTERM/Ctrl-C is ``interrupted`` and the spend cap is ``stopped`` (both
    resumable, finished work kept).
    """
    update: dict[str, Any] = {"finished": utc_now(), "status": status}
    if isinstance(exc, KeyboardInterrupt):  # saag_opt.stopping.RunInterrupted is one
        update |= {"status": "interrupted", "error": RunErrorInfo(
            message=f"{exc or 'interrupted (KeyboardInterrupt)'}; finished examples are kept, the run is resumable")}
    elif isinstance(exc, CostCapReached):
        update |= {"status": "stopped", "error": RunErrorInfo(message=str(exc))}
    elif exc is not None:
        tb = None if isinstance(exc, SaagOptError) else traceback.format_exc()
        update |= {"status": "error", "error": RunErrorInfo(message=f"{type(exc).__name__}: {exc}", traceback=tb)}
    write_header(run_dir, header.model_copy(update=update))
    for hook in list(_FINISH_HOOKS):
        try:
            hook(run_dir)
        except Exception:  # a report that cannot be drawn must not fail a finished run
            logging.getLogger(__name__).warning("run-finished hook %r failed for %s", hook, run_dir, exc_info=True)


@contextmanager
def guarded_run(run_dir: Path, header: RunHeader) -> Iterator[None]:
    """Mark the run error/interrupted in ``run.json`` if the body raises, then re-raise."""
    try:
        yield
    except BaseException as exc:
        finish_header(run_dir, header, exc)
        raise


__all__ = [
    "COSTS_FILE",
    "RECORDS_FILE",
    "SCHEMA_VERSION",
    "SUMMARY_FILE",
    "CostsFile",
    "Run",
    "RunErrorInfo",
    "RunFinishedHook",
    "RunHeader",
    "RunKind",
    "RunStatus",
    "create_run_dir",
    "finish_header",
    "git_revision",
    "guarded_run",
    "new_header",
    "on_run_finished",
    "package_versions",
    "read_costs",
    "read_header",
    "read_model",
    "read_rows",
    "read_run",
    "read_run_jsonl",
    "register_summary",
    "utc_now",
]
