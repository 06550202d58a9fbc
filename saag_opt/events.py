"""Progress events of a run (evaluate, compare, optimize, tune): one type, one way to send it.

Observers (the CLI's progress bar and log lines, a notebook, a test) get ``RunEvent``s through
``emit``. An observer that raises is logged and ignored (docs/design.md §10): a broken progress bar
must never stop a paid run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

EventKind = Literal[
    "run_started",       # data: run_dir, total (evaluate: examples to do)
    "resumed",           # --resume (evaluate, compare, optimize); data: run_dir (evaluate: total, done)
    "example_finished",  # data: done, total, example_id, base_correct, final_correct, error, costs
    "stage",             # compare: an evaluate pass begins; data: stage (base | a | b), label; tune: stage test
    "estimate",          # optimize: the up-front cost estimate of GEPA (Estimate.to_dict)
    "warning",
    "candidate",         # optimize: a GEPA candidate became a prompt version
    "stopped",           # --max-cost stopped a run or its test phase (the message says where and why)
    "progress",          # optimize: data: rollouts, budget, accepted, best_val, spent, iteration (GEPA callbacks)
    "proposal",          # optimize, --proposer add|edit: the edit the reflection LM proposed, or why none was usable;
                         # data: component, edit or reason
    "gepa_done",         # optimize: GEPA returned; data: best, stopped_by
    "evaluating",        # optimize: the seed-vs-best test comparison begins
    "trial_finished",    # tune: a trial ended (in any worker); data: row (trials.jsonl row), done, budget, spent,
                         # max_cost, front (number and objective values per point); run_started carries them too
    "batch",             # --batch: a Batch API job was submitted or changed status; data: batch_id, model, status,
                         # completed, failed, total (its end: answered, total)
    "step",              # a conversation (multi-turn BFCL, tau2) took a step; data: entry, condition, steps (so far)
    "run_finished",      # data: run_dir
]

EventSink = Callable[["RunEvent"], None]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunEvent:
    """What happened (``kind``), a line a person can read, and JSON-friendly details."""

    kind: EventKind
    message: str
    data: dict[str, Any] = field(default_factory=dict)


def emit(sink: EventSink | None, kind: EventKind, message: str, **data: Any) -> None:
    """Send an event to ``sink`` (if any); an observer that raises is logged, never propagated."""
    if sink is None:
        return
    try:
        sink(RunEvent(kind, message, data))
    except Exception:  # observers are best effort
        log.warning("event observer failed on %s", kind, exc_info=True)


_STEP_LISTENER: ContextVar[Callable[[], None] | None] = ContextVar("saag_opt_step_listener", default=None)


@contextmanager
def listening_for_steps(listener: Callable[[], None]) -> Iterator[None]:
    """Call ``listener`` at each ``note_step`` in this thread's context (one conversation being played).

    Why a context variable: the step loops (the episode loop, tau2's agent) know nothing of runs or
    sinks; the runner that plays an entry does, in the same thread.
    """
    token = _STEP_LISTENER.set(listener)
    try:
        yield
    finally:
        _STEP_LISTENER.reset(token)


def note_step() -> None:
    """A conversation takes a step: tell the listener, if any (never raises)."""
    listener = _STEP_LISTENER.get()
    if listener is None:
        return
    try:
        listener()
    except Exception:  # observers are best effort
        log.warning("step listener failed", exc_info=True)


__all__ = ["EventKind", "EventSink", "RunEvent", "emit", "listening_for_steps", "note_step"]
