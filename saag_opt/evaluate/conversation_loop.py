"""Run a reviewer condition over multi-turn episodes: both conditions per entry, records, summary.

Per entry, two runs of the episode loop (``agents/episode.py``), each on a fresh environment:
``base`` (every step through ``none``) and the mechanism (every step through it); the environment's
``check`` judges each transcript. The two runs share the base-prediction cache of ``ctx``, so the
steps they have in common (up to the first one the reviewer changes) are proposed once.

The runner takes the parts already built (agent, reviewer, mechanism, context: one review set-up,
opened by the caller) and opens no model itself.

Failure policy, as ``evaluate``'s (docs/design.md §10): an LM call that fails after its retries, or
any other error inside one entry, becomes a record with ``error`` (scored invalid); a spent cost
cap ends the run with a summary over the finished entries (``stopped_by``); an unreachable model
raises, with the finished entries in ``records_path``. Entries run on ``workers`` threads, each
on its own environment, and the records come back in episode order. Resume is at entry
granularity: with ``records_path``, entries whose two rows are already there without an error are
kept as they are and not run again; the file is first rewritten with those rows alone (a lone row
of an entry cut in half, or a failed entry, would otherwise pair with its rerun); everything else is
(re)run and appended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from saag_opt import stopping
from saag_opt.agents.base import BaseAgent
from saag_opt.agents.episode import MAXIMUM_STEP_LIMIT, EpisodeOutcome, run_episode
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext
from saag_opt.agents.mechanisms.no_review import NoReview
from saag_opt.agents.reviewer import Reviewer
from saag_opt.episodes import Environment, Episode, Judgement, open_environment
from saag_opt.errors import ConfigError, CostCapReached, ModelUnavailableError
from saag_opt.evaluation.conversation_records import (
    EpisodeRecord,
    EpisodeSummary,
    episode_record,
    failed_episode_record,
    summarise_episodes,
)
from saag_opt.evaluation.results import RecordWriter, finished_records
from saag_opt.events import EventSink, emit, listening_for_steps
from saag_opt.lm.latency import lm_clock
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.runfiles import atomic_write_jsonl, read_rows

BASE = "base"
"""The condition name of the base agent alone (every step through ``none``)."""


@dataclass(frozen=True)
class EpisodeRun:
    """What ``evaluate_episodes`` produced: both records per entry (episode order, base first) and the summary."""

    records: list[EpisodeRecord]
    summary: EpisodeSummary
    stopped_by: CostCapReached | None = None
    """The spend cap that ended the run early (the summary covers the finished entries)."""


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


def _tokens(tracker: Any) -> int:
    total = 0
    for usage in tracker.get_total_tokens().values():
        total += int(usage.get("total_tokens") or 0) or (int(usage.get("prompt_tokens") or 0)
                                                        + int(usage.get("completion_tokens") or 0))
    return total


@dataclass(frozen=True)
class _Parts:
    agent: BaseAgent
    reviewer: Reviewer | None
    mechanism: Mechanism
    ctx: MechanismContext
    reviewer_lm: Any
    run_id: str
    max_steps: int
    environment: Callable[[str], Environment]
    play: Play
    on_event: EventSink | None = None


RunParts = _Parts
"""What a ``Play`` gets: the opened set-up's pieces (agent, reviewer, context, reviewer LM) and the run's limits."""

Play = Callable[["_Parts", Episode, Mechanism], tuple[EpisodeOutcome, Judgement]]
"""Runs one entry under a mechanism and judges it: the episode loop on its environment (``play_episode``),
or a peer suite's own runner (tau2's orchestrator, ``evaluate/tau2_play.py``)."""


def play_episode(parts: _Parts, episode: Episode, mechanism: Mechanism) -> tuple[EpisodeOutcome, Judgement]:
    """The episode loop on a fresh environment of the episode's, judged by its ``check``."""
    environment = parts.environment(episode.environment)
    try:
        outcome = run_episode(episode, environment, parts.agent, parts.reviewer, mechanism, parts.ctx,
                              max_steps=parts.max_steps)
        return outcome, environment.check(outcome.transcript)
    finally:
        environment.close()


def run_condition(parts: _Parts, episode: Episode, mechanism: Mechanism, condition: str) -> EpisodeRecord:
    """One run of ``episode`` under ``mechanism``, judged; any failure in it becomes an ``error`` record.

    Raises:
        CostCapReached, ModelUnavailableError: systemic; the entry is unfinished and not recorded.
        ConfigError: the entry cannot be played at all (an unknown environment).
    """
    try:
        scope = dspy.context(lm=parts.reviewer_lm) if parts.reviewer_lm is not None else nullcontext()
        with scope, dspy.track_usage() as tracker, lm_clock() as clock:
            outcome, judgement = parts.play(parts, episode, mechanism)
        return episode_record(parts.run_id, episode, condition, outcome, judgement, tokens=_tokens(tracker),
                              untimed=clock.untimed)
    except (CostCapReached, ModelUnavailableError, ConfigError):
        raise
    except Exception as exc:
        return failed_episode_record(parts.run_id, episode, condition, _error_text(exc))


def _kept(path: Path | None, condition: str, episodes: Sequence[Episode]) -> dict[tuple[str, str], EpisodeRecord]:
    """The rows of entries that finished in an earlier attempt (``finished_records``' rule), read in full."""
    if path is None or not path.is_file():
        return {}
    done = {(r.example_id, r.condition) for r in finished_records(path, condition, (e.id for e in episodes))}
    out: dict[tuple[str, str], EpisodeRecord] = {}
    for record in read_rows(path, EpisodeRecord):
        key = (record.example_id, record.condition)
        if key in done:
            out.setdefault(key, record)
    return out


class _StopRequested(Exception):
    """A stop was requested before the entry started (it is not run)."""


def _run_entry(parts: _Parts, episode: Episode, none: Mechanism,
               cap: SpendCap | None) -> tuple[EpisodeRecord, EpisodeRecord]:
    """Both conditions of one entry, base first (``run_condition``'s errors and raises).

    Raises:
        CostCapReached: the cap was spent before the entry started, or refused one of its calls.
        ModelUnavailableError: as ``run_condition``.
    """
    if stopping.requested():
        raise _StopRequested
    if cap is not None and cap.reached:
        raise CostCapReached(cap.message())
    return (_with_steps(parts, episode, none, BASE),
            _with_steps(parts, episode, parts.mechanism, parts.mechanism.spec))


def _with_steps(parts: _Parts, episode: Episode, mechanism: Mechanism, condition: str) -> EpisodeRecord:
    """``run_condition`` with a ``step`` event at each step: a tau2 task can take minutes on a small model."""
    steps = 0

    def stepped() -> None:
        nonlocal steps
        steps += 1
        emit(parts.on_event, "step", f"{episode.id} ({condition}): step {steps}", entry=episode.id,
             condition=condition, steps=steps)

    with listening_for_steps(stepped):
        return run_condition(parts, episode, mechanism, condition)


def evaluate_episodes(episodes: Sequence[Episode], *, agent: BaseAgent, reviewer: Reviewer | None,
                      mechanism: Mechanism, ctx: MechanismContext, reviewer_lm: Any = None, run_id: str = "",
                      records_path: Path | None = None, max_steps: int = MAXIMUM_STEP_LIMIT, seed: int = 0,
                      on_event: EventSink | None = None,
                      environment: Callable[[str], Environment] = open_environment,
                      costs: Callable[[], dict[str, Any]] | None = None, workers: int = 1,
                      cap: SpendCap | None = None, play: Play = play_episode) -> EpisodeRun:
    """Base and ``mechanism`` on every entry (module docstring); records appended to ``records_path`` if given.

    ``reviewer_lm``: the LM the reviewer's dspy calls run under (``dspy.context``), if it needs one;
    ``environment``: name -> a fresh environment (the registry's ``open_environment``); ``costs``: the
    ledger's snapshot, sent with each ``example_finished`` event (the progress bar's calls and dollars);
    ``workers``: entries run in parallel (each in its own environment; records are appended as entries
    finish and the file is rewritten in episode order at the end, so its order is deterministic);
    ``cap``: the ledger's ``SpendCap``, checked before an entry starts (a spent cap starts no entry);
    ``play``: how one entry runs and is judged (``Play``).

    Raises:
        ModelUnavailableError: systemic; the finished entries are in ``records_path``.
        ValueError: ``workers`` < 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    parts = _Parts(agent, reviewer, mechanism, ctx, reviewer_lm, run_id, max_steps, environment, play, on_event)
    kept = _kept(records_path, mechanism.spec, episodes)
    if records_path is not None and records_path.is_file():
        atomic_write_jsonl(records_path, [kept[(e.id, c)].model_dump(mode="json") for e in episodes
                                          for c in (BASE, mechanism.spec) if (e.id, c) in kept])
    writer = RecordWriter(records_path) if records_path is not None else None
    none = NoReview()
    done: dict[str, tuple[EpisodeRecord, EpisodeRecord]] = {}
    stopped: str | None = None
    capped: CostCapReached | None = None
    unavailable: ModelUnavailableError | None = None
    emit(on_event, "run_started", f"{len(episodes)} entries, {len(kept) // 2} already done", total=len(episodes),
         done=len(kept) // 2)

    def finished(episode: Episode, pair: tuple[EpisodeRecord, EpisodeRecord]) -> None:
        done[episode.id] = pair
        base, final = pair
        emit(on_event, "example_finished", f"{episode.id}: base {'valid' if base.correct else 'invalid'}, "
             f"{mechanism.spec} {'valid' if final.correct else 'invalid'}", done=len(done), total=len(episodes),
             example_id=episode.id, base_correct=base.correct, final_correct=final.correct,
             error=final.error or base.error, costs=costs() if costs is not None else {})

    todo = []
    for episode in episodes:
        base, final = kept.get((episode.id, BASE)), kept.get((episode.id, mechanism.spec))
        if base is not None and final is not None:
            finished(episode, (base, final))
        else:
            todo.append(episode)
    try:
        with stopping.thread_pool(workers, thread_name_prefix="saag-episode") as pool:
            futures = {pool.submit(_run_entry, parts, episode, none, cap): episode for episode in todo}
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                try:
                    pair = future.result()
                except (CostCapReached, ModelUnavailableError, _StopRequested) as exc:
                    if isinstance(exc, CostCapReached):  # the entry is unfinished: not recorded, resumable
                        capped = capped or exc
                    elif isinstance(exc, ModelUnavailableError):
                        unavailable = unavailable or exc
                    stopped = stopped or ("stop requested" if isinstance(exc, _StopRequested) else str(exc))
                    for other in futures:
                        other.cancel()
                    continue
                if writer is not None:
                    with stopping.deferred():  # a stop never splits an entry's rows
                        writer.write(pair[0])
                        writer.write(pair[1])
                finished(futures[future], pair)
    finally:
        if writer is not None:
            writer.close()
    pairs = [done[e.id] for e in episodes if e.id in done]
    if records_path is not None and todo:  # rows were appended in finishing order: episode order, atomically
        atomic_write_jsonl(records_path, [r.model_dump(mode="json") for pair in pairs for r in pair])
    if unavailable is not None:
        raise unavailable
    summary = summarise_episodes(run_id, mechanism.spec, pairs, experimental=mechanism.experimental,
                                 gated=mechanism.gated, seed=seed, stopped=stopped)
    emit(on_event, "run_finished", f"{len(pairs)} of {len(episodes)} entries", done=len(pairs), total=len(episodes))
    return EpisodeRun([record for pair in pairs for record in pair], summary, capped)


__all__ = ["BASE", "EpisodeRun", "Play", "RunParts", "evaluate_episodes", "play_episode", "run_condition"]
