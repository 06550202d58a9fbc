"""The evaluate loop, for either kind of work: each item's two records (``base``, then the mechanism's).

Items run on worker threads; the main thread writes each finished item's two rows inside
``stopping.deferred()``, so ``records.jsonl`` only ever holds whole items and ``--resume`` redoes just
the missing ones. Failure policy (docs/design.md §10), the same for single calls and conversations:
an error inside one item is that item's ``error`` record (the ``Work`` makes it); a spent cost cap, or
a stop request, starts no further item and ends the run with the finished ones (``Pairs.stopped``);
a model that turns out to be gone raises at once, the finished items kept on disk. At the end the
file is rewritten in item order (atomically), so its order does not depend on the threads.

What differs between single calls and conversations is the ``Work``: how one item runs and how it
is named. The loop never asks which kind it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from saag_opt import stopping
from saag_opt.atomic import atomic_write_jsonl
from saag_opt.data import round_robin
from saag_opt.errors import CostCapReached, ModelUnavailableError
from saag_opt.evaluation.results import ExampleRecord, RecordWriter
from saag_opt.events import EventSink, emit
from saag_opt.lm.spend.cap import SpendCap


class _Item(Protocol):
    """An item of work (an ``Example`` or an ``Episode``): named by its id, grouped by its category."""

    @property
    def id(self) -> str: ...

    @property
    def category(self) -> str: ...


I = TypeVar("I", bound=_Item)  # noqa: E741 - an item
I_contra = TypeVar("I_contra", bound=_Item, contravariant=True)
R = TypeVar("R", bound=ExampleRecord)


class Work(Protocol[I_contra, R]):
    """One kind of evaluate work, opened for a run: what the loop asks of single calls or of conversations."""

    def run_item(self, item: I_contra) -> tuple[R, R]:
        """The item's ``base`` record and its mechanism record; a failure inside it is an ``error`` record.

        Raises:
            CostCapReached: the spend cap refused a call (the item is unfinished, not recorded).
            ModelUnavailableError: a model is gone (unfinished, not recorded; the run stops).
        """
        ...

    def progress(self, pair: tuple[R, R]) -> str:
        """The ``example_finished`` event's text for a finished item."""
        ...

    def in_flight(self, todo: int) -> int:
        """How many items run at once, told once how many are left (the Batch API rounds size themselves by it)."""
        ...


@dataclass(frozen=True)
class Pairs(Generic[R]):
    """What the loop produced: every finished item's two records, in item order."""

    pairs: list[tuple[R, R]]
    stopped: str | None = None
    """Why items were left unstarted (a spent cap, a stop request); None = every item ran."""
    capped: CostCapReached | None = None
    """The spend cap that stopped the run, if that was why."""

    @property
    def records(self) -> list[R]:
        """The records, item by item, ``base`` first."""
        return [record for pair in self.pairs for record in pair]


class _StopRequested(Exception):
    """A stop was requested before the item started (it is not run)."""


def run_pairs(work: Work[I, R], items: Sequence[I], *, kept: Sequence[R] = (),
              records_path: Path | None = None, cap: SpendCap | None = None, on_event: EventSink | None = None,
              costs: Callable[[], dict[str, Any]] | None = None) -> Pairs[R]:
    """Run every item of ``items`` not already in ``kept`` (the rows an earlier attempt finished).

    Items start round-robin over their categories (``data.round_robin``: a run stopped early holds
    every category). ``records_path``: where rows are appended as items finish (None: in memory
    only); ``cap`` is checked before an item starts; ``costs``: the ledger's snapshot sent with each
    ``example_finished`` event (the progress bar's calls and dollars).

    Raises:
        ModelUnavailableError: systemic; the finished items are in ``records_path``.
    """
    done: dict[str, tuple[R, R]] = {}
    by_id: dict[str, list[R]] = {}
    for record in kept:
        by_id.setdefault(record.example_id, []).append(record)
    for rows in by_id.values():
        base = next((r for r in rows if r.condition == "base"), None)
        final = next((r for r in rows if r.condition != "base"), None)
        if base is not None and final is not None:
            done[base.example_id] = (base, final)
    todo = round_robin([item for item in items if item.id not in done])
    stopped: str | None = None
    capped: CostCapReached | None = None
    unavailable: ModelUnavailableError | None = None
    total = len(items)

    def start(item: I) -> tuple[R, R]:
        if stopping.requested():
            raise _StopRequested
        if cap is not None and cap.reached:
            raise CostCapReached(cap.message())
        return work.run_item(item)

    writer = RecordWriter(records_path) if records_path is not None else None
    try:
        with stopping.thread_pool(max(1, work.in_flight(len(todo))), thread_name_prefix="saag-eval") as pool:
            futures = {pool.submit(start, item): item for item in todo}
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                try:
                    pair = future.result()  # raises only when the run must stop
                except (CostCapReached, ModelUnavailableError, _StopRequested) as exc:
                    if isinstance(exc, CostCapReached):
                        capped = capped or exc
                    elif isinstance(exc, ModelUnavailableError):
                        unavailable = unavailable or exc
                    stopped = stopped or ("stop requested" if isinstance(exc, _StopRequested) else str(exc))
                    for other in futures:
                        other.cancel()
                    continue
                if writer is not None:
                    with stopping.deferred():  # a stop never splits an item's rows
                        writer.write(pair[0])
                        writer.write(pair[1])
                done[futures[future].id] = pair
                if on_event is not None:  # the ledger snapshot is not free (a tune trial has no observer)
                    emit(on_event, "example_finished", f"{len(done)}/{total} {work.progress(pair)}", done=len(done),
                         total=total, example_id=pair[0].example_id, base_correct=pair[0].correct,
                         final_correct=pair[1].correct, error=pair[1].error or pair[0].error,
                         costs=costs() if costs is not None else {})
    finally:
        if writer is not None:
            writer.close()
    pairs = [done[item.id] for item in items if item.id in done]
    if records_path is not None and todo:  # rows were appended in finishing order: item order, atomically
        atomic_write_jsonl(records_path, [r.model_dump(mode="json") for pair in pairs for r in pair])
    if unavailable is not None:
        raise unavailable
    return Pairs(pairs, stopped, capped)


__all__ = ["Pairs", "Work", "run_pairs"]
