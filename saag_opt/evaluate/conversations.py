"""Conversations as evaluate work: per entry, the base agent alone and the mechanism, each on a fresh environment.

Both runs of an entry share the base-prediction cache of the set-up's context, so the steps they
have in common (up to the first one the reviewer changes) are proposed once; the environment's
``check`` (or tau2's evaluator, ``evaluate/tau2_play.py``) judges each transcript. A failure inside
one run is an ``error`` record (scored invalid). ``--dry-run`` prices
a pass with ``evaluation.estimate.estimate_episodes`` (tool docs and the history's growth step by step). The
loop that runs entries is ``evaluate.loop``; the run directory around it is ``evaluate.run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saag_opt.agents.base import BasePredictionCache
from saag_opt.agents.episode import MAXIMUM_STEP_LIMIT
from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.mechanisms.no_review import NoReview
from saag_opt.agents.setup import Condition, open_setup
from saag_opt.agents.tau2 import DEFAULT_MAX_STEPS, pass_hat_ks, simulated_user, task_sizes
from saag_opt.data.tau2 import task_id_of
from saag_opt.episodes import Episode, open_environment
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.play import BASE, Play, RunParts, play_episode, run_condition
from saag_opt.evaluate.tau2_play import tau2_play
from saag_opt.evaluation.conversation_records import EpisodeRecord, EpisodeSummary, summarise_episodes
from saag_opt.evaluation.estimate import Estimate, estimate_episodes, estimate_tau2
from saag_opt.events import EventSink, emit, listening_for_steps
from saag_opt.lm import CostLedger
from saag_opt.paths import base_predictions_dir


@dataclass(frozen=True)
class ConversationWork:
    """Conversations, opened for a run: the set-up's pieces, how an entry is played, how many run at once."""

    parts: RunParts
    workers: int = 1
    pass_hat_k: bool = False
    """Report tau2's pass^k over each task's trials (a simulated user's entries)."""
    none: Mechanism = field(default_factory=NoReview)
    """The base condition: every step through ``none``."""

    def in_flight(self, todo: int) -> int:
        """``workers`` entries at once, each on its own environment."""
        return self.workers

    def run_item(self, item: Episode) -> tuple[EpisodeRecord, EpisodeRecord]:
        """Both conditions of one entry, base first (``run_condition``'s errors and raises)."""
        return (self._with_steps(item, self.none, BASE),
                self._with_steps(item, self.parts.mechanism, self.parts.mechanism.spec))

    def progress(self, pair: tuple[EpisodeRecord, EpisodeRecord]) -> str:
        """The entry's id and each condition's verdict."""
        base, final = pair
        return (f"{base.example_id}: base {'valid' if base.correct else 'invalid'}, "
                f"{final.condition} {'valid' if final.correct else 'invalid'}")

    def summarise(self, pairs: Sequence[tuple[EpisodeRecord, EpisodeRecord]], *, seed: int,
                  stopped: str | None) -> EpisodeSummary:
        """The paired numbers and the conversation counts of the entries that finished (tau2: pass^k too)."""
        mechanism = self.parts.mechanism
        summary = summarise_episodes(self.parts.run_id, mechanism.spec, pairs, experimental=mechanism.experimental,
                                     gated=mechanism.gated, seed=seed, stopped=stopped)
        if self.pass_hat_k:
            records = [record for pair in pairs for record in pair]
            summary = summary.model_copy(update={"pass_hat_k": pass_hat_k_by_condition(records)})
        return summary

    def close(self) -> None:
        """Nothing stays open between entries (each closes its environment)."""

    def _with_steps(self, episode: Episode, mechanism: Mechanism, condition: str) -> EpisodeRecord:
        """``run_condition`` with a ``step`` event at each step: a tau2 task can take minutes on a small model."""
        steps = 0

        def stepped() -> None:
            nonlocal steps
            steps += 1
            emit(self.parts.on_event, "step", f"{episode.id} ({condition}): step {steps}", entry=episode.id,
                 condition=condition, steps=steps)

        with listening_for_steps(stepped):
            return run_condition(self.parts, episode, mechanism, condition)


class Conversations:
    """How ``run_evaluation`` runs conversations on an environment (BFCL multi-turn): record type, work, header, estimate."""

    record = EpisodeRecord

    def open(self, config: EvaluateConfig, run_dir: Path, ledger: CostLedger,
             on_event: EventSink | None) -> tuple[Condition, ConversationWork]:
        """The set-up opened on ``ledger``, and its work (raises for ``--batch``: a step waits on the one before)."""
        if config.batch:
            raise ConfigError("--batch: multi-turn datasets are not sent as Batch API jobs yet (a step waits on "
                              "the one before it, so a round would hold one step per entry); drop --batch")
        condition = open_setup(config.setup, ledger, BasePredictionCache(config.cache_dir or base_predictions_dir()))
        parts = RunParts(condition.agent, condition.reviewer, condition.mechanism, condition.ctx,
                         condition.reviewer_lm, run_dir.name, self.max_steps(config), open_environment,
                         self.play(config, ledger), on_event)
        return condition, ConversationWork(parts, config.workers or 1, pass_hat_k=self.pass_hat_k)

    pass_hat_k = False
    """Whether the summary reports pass^k over each task's trials."""

    def play(self, config: EvaluateConfig, ledger: CostLedger) -> Play:
        """How one entry is played: the episode loop on its environment."""
        return play_episode

    def max_steps(self, config: EvaluateConfig) -> int:
        """The step limit of one entry."""
        return MAXIMUM_STEP_LIMIT

    def header(self, config: EvaluateConfig, items: Sequence[Episode]) -> dict[str, Any]:
        """What ``run.json`` records beyond the shared header: the environments the entries run on."""
        return {"plugins": {"environments": sorted({e.environment for e in items})}}

    def estimate(self, config: EvaluateConfig, items: Sequence[Episode], *, reviewer: str | None,
                 mechanism: Mechanism, instructions: Mapping[str, str], base_cached: bool = False,
                 command: str = "evaluate") -> Estimate:
        """One pass's calls, tokens and dollars (``evaluation.estimate.estimate_episodes``: the history's growth)."""
        return estimate_episodes(items, base=config.setup.base, reviewer=reviewer, mechanism=mechanism,
                                 instructions=instructions, base_cached=base_cached, command=command)


class SimulatedUser(Conversations):
    """tau2-bench: tau2's orchestrator plays each task with a user simulator, tau2's evaluator judges it."""

    pass_hat_k = True

    def play(self, config: EvaluateConfig, ledger: CostLedger) -> Play:
        """tau2's orchestrator, with the user simulator on ``user_model``.

        The simulator's calls are booked on the run's ledger under role ``user``.
        """
        return tau2_play(simulated_user(self.user_model(config), ledger=ledger, call_options=config.setup.call_options(),
                                        reminder=config.user_reminder), max_steps=self.max_steps(config))

    def max_steps(self, config: EvaluateConfig) -> int:
        """tau2's ``max_steps`` (``--max-steps``, else tau2's default)."""
        return config.max_steps or DEFAULT_MAX_STEPS

    @staticmethod
    def user_model(config: EvaluateConfig) -> str:
        """The user simulator's model spec."""
        return config.user_model or config.setup.base

    def header(self, config: EvaluateConfig, items: Sequence[Episode]) -> dict[str, Any]:
        """The environments, and the user simulator's model beside the base and the reviewer."""
        return super().header(config, items) | {"models": {"user": self.user_model(config)}}

    def estimate(self, config: EvaluateConfig, items: Sequence[Episode], *, reviewer: str | None,
                 mechanism: Mechanism, instructions: Mapping[str, str], base_cached: bool = False,
                 command: str = "evaluate") -> Estimate:
        """One pass over the tasks' trials (``evaluation.estimate.estimate_tau2``: the user simulator too)."""
        return estimate_tau2(task_sizes(items), base=config.setup.base, reviewer=reviewer, user=self.user_model(config),
                             mechanism=mechanism, instructions=instructions, base_cached=base_cached, command=command,
                             max_steps=self.max_steps(config))


def pass_hat_k_by_condition(records: Sequence[EpisodeRecord]) -> dict[str, dict[int, float]]:
    """Per condition, tau2's pass^k over each task's trials (an errored run counts as reward 0).

    A task is its category (the domain) and its id, so records pooled over domains (whose task ids
    repeat: airline and retail both have a task ``0``) keep their tasks apart; ``experiments/recompute.py``
    reads collected runs through this too.
    """
    rewards: dict[str, dict[str, list[float]]] = {}
    for record in records:
        reward = record.judgement.reward if record.judgement is not None else None
        task = f"{record.category}/{task_id_of(record.example_id)}"
        rewards.setdefault(record.condition, {}).setdefault(task, []).append(reward or 0.0)
    return {condition: pass_hat_ks(tasks) for condition, tasks in rewards.items()}


__all__ = ["ConversationWork", "Conversations", "SimulatedUser", "pass_hat_k_by_condition"]
