"""Conversations as evaluate work: per entry, the base agent alone and the mechanism, each on a fresh environment.

Both runs of an entry share the base-prediction cache of the set-up's context, so the steps they
have in common (up to the first one the reviewer changes) are proposed once; the environment's
``check`` (or tau2's evaluator, ``evaluate/tau2_play.py``) judges each transcript. A failure inside
one run is an ``error`` record (scored invalid). ``--dry-run`` is ``preflight_multi_turn``
(``evaluation.estimate.estimate_episodes``: tool docs and the history's growth step by step). The
loop that runs entries is ``evaluate.loop``; the run directory around it is ``evaluate.run``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.mechanisms.no_review import NoReview
from saag_opt.agents.tau2 import DEFAULT_MAX_STEPS, Tau2Sizes, pass_hat_ks, simulated_user, task_sizes
from saag_opt.data.tau2 import task_id_of
from saag_opt.data.workload import Workload
from saag_opt.episodes import Episode
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.play import BASE, Play, RunParts, play_episode, run_condition
from saag_opt.evaluate.tau2_play import tau2_play
from saag_opt.evaluation.conversation_records import EpisodeRecord, EpisodeSummary, summarise_episodes
from saag_opt.evaluation.estimate import Estimate, estimate_episodes, estimate_tau2
from saag_opt.events import emit, listening_for_steps
from saag_opt.lm import CostLedger


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


def _entries(config: EvaluateConfig) -> list[Episode]:
    """The run's entries (tau2: each task ``trials`` times), as ``run_evaluation`` loads them."""
    return cast(list[Episode], config.workload.load(split=config.split, limit=config.limit, skip=config.skip,
                                                    trials=config.trials))


def tau2_max_steps(config: EvaluateConfig) -> int:
    """The step limit of the config's tau2 runs (``--max-steps``, else tau2's default)."""
    return config.max_steps or DEFAULT_MAX_STEPS


def play_for(config: EvaluateConfig, workload: Workload, ledger: CostLedger) -> Play:
    """The episode loop, or tau2's orchestrator for ``tau2:<domain>``.

    tau2's user simulator runs on ``user_model`` (default the base model), booked on the run's ledger
    under role ``user``.
    """
    if not workload.simulated_user:
        return play_episode
    return tau2_play(simulated_user(config.user_model or config.setup.base, ledger=ledger,
                                    call_options=config.setup.call_options(), reminder=config.user_reminder),
                     max_steps=tau2_max_steps(config))


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


def preflight_multi_turn(config: EvaluateConfig) -> Estimate:
    """``--dry-run`` on a multi-turn dataset: expected calls, tokens and dollars by role; opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``run_evaluation`` would, before any work.
    """
    episodes = _entries(config)
    if not episodes:
        raise ConfigError(f"dataset: {config.dataset!r} (split {config.split!r}) has no entries")
    setup = config.setup
    version = setup.prompt_version()
    if config.workload.simulated_user:
        return estimate_tau2(task_sizes(episodes), base=setup.base,
                             reviewer=setup.reviewer, user=config.user_model or setup.base, mechanism=setup.mechanism,
                             instructions=dict(version.instructions) if version is not None else {},
                             max_steps=tau2_max_steps(config))
    return estimate_episodes(episodes, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                             instructions=dict(version.instructions) if version is not None else {})


def preflight_compare_episodes(settings: EvaluateConfig, refs: Sequence[str]) -> Estimate:
    """``compare --dry-run`` on a multi-turn dataset: the shared base pass, then one pass per prompt version.

    Raises:
        ConfigError, DatasetError, ArtifactError: as the compare would, before any work.
    """
    episodes = _entries(settings)
    setup = settings.setup
    if settings.workload.simulated_user:
        return _compare_tau2(settings, refs, task_sizes(episodes))
    total = estimate_episodes(episodes, base=setup.base, reviewer=None, mechanism=setup.replace(mechanism="none")
                              .mechanism, command="compare")
    for ref in refs:
        version = setup.replace(prompt=ref).prompt_version()
        total.merge(estimate_episodes(episodes, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                                      instructions=dict(version.instructions) if version is not None else {},
                                      base_cached=True))
    return total


def _compare_tau2(settings: EvaluateConfig, refs: Sequence[str], sizes: Sequence[Tau2Sizes]) -> Estimate:
    """``preflight_compare_episodes`` on tau2: the shared base pass, then each version's reviewed runs."""
    setup = settings.setup
    user = settings.user_model or setup.base
    steps = tau2_max_steps(settings)
    total = estimate_tau2(sizes, base=setup.base, reviewer=None, user=user,
                          mechanism=setup.replace(mechanism="none").mechanism, command="compare", max_steps=steps)
    for ref in refs:
        version = setup.replace(prompt=ref).prompt_version()
        total.merge(estimate_tau2(sizes, base=setup.base, reviewer=setup.reviewer, user=user,
                                  mechanism=setup.mechanism, base_cached=True, max_steps=steps,
                                  instructions=dict(version.instructions) if version is not None else {}))
    return total


__all__ = ["ConversationWork", "pass_hat_k_by_condition", "play_for", "preflight_compare_episodes",
           "preflight_multi_turn", "tau2_max_steps"]
