"""One conversation played under one mechanism and judged: the piece single runs and GEPA's rollouts share.

``play_episode`` is the episode loop (``agents/episode.py``) on a fresh environment, judged by the
environment's ``check``; a peer suite plays its own way (tau2's orchestrator, ``evaluate/tau2_play.py``)
behind the same ``Play`` signature. ``run_condition`` turns one play into a record: a failure inside
it is an ``error`` record (scored invalid), systemic faults raise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.episode import EpisodeOutcome, run_episode
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext
from saag_opt.agents.reviewer import Reviewer
from saag_opt.episodes import Environment, Episode, Judgement
from saag_opt.errors import ConfigError, CostCapReached, ModelUnavailableError
from saag_opt.evaluate.calls import error_text, measured
from saag_opt.evaluation.conversation_records import EpisodeRecord, episode_record, failed_episode_record
from saag_opt.events import EventSink

BASE = "base"
"""The condition name of the base agent alone (every step through ``none``)."""


@dataclass(frozen=True)
class RunParts:
    """What a ``Play`` gets: the opened set-up's pieces (agent, reviewer, context, reviewer LM) and the run's limits."""

    agent: BaseAgent
    reviewer: Reviewer | None
    mechanism: Mechanism
    ctx: MechanismContext
    reviewer_lm: Any
    """The LM the reviewer's dspy calls run under (``dspy.context``), if it needs one."""
    run_id: str
    max_steps: int
    environment: Callable[[str], Environment]
    """Name -> a fresh environment (the registry's ``open_environment``)."""
    play: Play
    on_event: EventSink | None = None


Play = Callable[[RunParts, Episode, Mechanism], tuple[EpisodeOutcome, Judgement]]
"""Runs one entry under a mechanism and judges it: the episode loop on its environment (``play_episode``),
or a peer suite's own runner (tau2's orchestrator, ``evaluate/tau2_play.py``)."""


def play_episode(parts: RunParts, episode: Episode, mechanism: Mechanism) -> tuple[EpisodeOutcome, Judgement]:
    """The episode loop on a fresh environment of the episode's, judged by its ``check``."""
    environment = parts.environment(episode.environment)
    try:
        outcome = run_episode(episode, environment, parts.agent, parts.reviewer, mechanism, parts.ctx,
                              max_steps=parts.max_steps)
        return outcome, environment.check(outcome.transcript)
    finally:
        environment.close()


def run_condition(parts: RunParts, episode: Episode, mechanism: Mechanism, condition: str) -> EpisodeRecord:
    """One run of ``episode`` under ``mechanism``, judged; any failure in it becomes an ``error`` record.

    Raises:
        CostCapReached, ModelUnavailableError: systemic; the entry is unfinished and not recorded.
        ConfigError: the entry cannot be played at all (an unknown environment).
    """
    try:
        with measured(parts.reviewer_lm) as usage:
            outcome, judgement = parts.play(parts, episode, mechanism)
        return episode_record(parts.run_id, episode, condition, outcome, judgement, tokens=usage.tokens,
                              untimed=usage.untimed)
    except (CostCapReached, ModelUnavailableError, ConfigError):
        raise
    except Exception as exc:
        return failed_episode_record(parts.run_id, episode, condition, error_text(exc))


__all__ = ["BASE", "Play", "RunParts", "play_episode", "run_condition"]
