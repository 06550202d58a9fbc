"""Conversations run from hand-built parts (agent, reviewer, mechanism, context), without a run directory.

Tests that need a spy environment or a scripted agent drive ``evaluate.loop.run_pairs`` with a
``ConversationWork`` themselves: this is ``run_evaluation``'s loop and summary, minus the set-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saag_opt.agents.episode import MAXIMUM_STEP_LIMIT
from saag_opt.episodes import Environment, Episode, open_environment
from saag_opt.errors import CostCapReached
from saag_opt.evaluate.conversations import ConversationWork
from saag_opt.evaluate.loop import run_pairs
from saag_opt.evaluate.play import RunParts, play_episode
from saag_opt.evaluation.conversation_records import EpisodeRecord, EpisodeSummary
from saag_opt.evaluation.results import keep_finished
from saag_opt.events import EventSink
from saag_opt.lm.spend.cap import SpendCap


@dataclass(frozen=True)
class EntriesRun:
    """Both records per entry (entry order, base first), the summary, and the cap that stopped the run."""

    records: list[EpisodeRecord]
    summary: EpisodeSummary
    stopped_by: CostCapReached | None = None


def run_entries(episodes: Sequence[Episode], *, agent: Any, reviewer: Any, mechanism: Any, ctx: Any,
                reviewer_lm: Any = None, run_id: str = "", records_path: Path | None = None,
                max_steps: int = MAXIMUM_STEP_LIMIT, seed: int = 0, on_event: EventSink | None = None,
                environment: Callable[[str], Environment] = open_environment, workers: int = 1,
                cap: SpendCap | None = None) -> EntriesRun:
    """Base and ``mechanism`` on every entry, as ``run_evaluation`` runs them."""
    parts = RunParts(agent, reviewer, mechanism, ctx, reviewer_lm, run_id, max_steps, environment, play_episode,
                     on_event)
    work = ConversationWork(parts, workers)
    kept: list[EpisodeRecord] = []
    if records_path is not None and records_path.is_file():  # what a resumed run keeps (``run._reopen``)
        kept = keep_finished(records_path, mechanism.spec, (e.id for e in episodes), EpisodeRecord)
    run = run_pairs(work, episodes, kept=kept, records_path=records_path, cap=cap, on_event=on_event)
    return EntriesRun(run.records, work.summarise(run.pairs, seed=seed, stopped=run.stopped), run.capped)
