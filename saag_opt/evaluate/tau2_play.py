"""How ``evaluate`` plays a tau2 task: tau2's orchestrator with the reviewed agent, tau2's evaluator as the truth.

The ``Play`` of ``evaluate/play.py`` for ``tau2:<domain>`` entries: the runner pairs
``base`` (``none``) and the mechanism per task as it pairs BFCL entries, and both runs of a task use
the same user model, trial and seed (trial k of tau2's ``DEFAULT_SEED``), so the user's side is as
comparable as tau2 allows; with a deterministic user model the two conversations agree up to the
first step the reviewer changes, whose proposals the base-prediction cache then shares.
"""

from __future__ import annotations

from saag_opt.agents.episode import EpisodeOutcome
from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.tau2 import DEFAULT_MAX_STEPS, Tau2BaseAgent, UserFactory, run_task
from saag_opt.episodes import Episode, Judgement
from saag_opt.evaluate.play import Play, RunParts


def tau2_play(user: UserFactory, *, max_steps: int = DEFAULT_MAX_STEPS) -> Play:
    """A ``Play`` that runs a task through ``agents.tau2.run_task`` with ``user`` as the user simulator.

    The set-up's base agent is given tau2's prompt (``Tau2BaseAgent``, same LM, ledger and mode); the
    trial is the entry's (``data.tau2.with_trials``; 0 for a task run once).
    """

    def play(parts: RunParts, episode: Episode, mechanism: Mechanism) -> tuple[EpisodeOutcome, Judgement]:
        agent = parts.agent if isinstance(parts.agent, Tau2BaseAgent) else Tau2BaseAgent(
            parts.agent.lm, ledger=parts.agent.ledger, mode=parts.agent.mode, max_attempts=parts.agent.max_attempts,
            temperature=parts.agent.temperature)
        run = run_task(episode, agent=agent, reviewer=parts.reviewer, mechanism=mechanism, ctx=parts.ctx, user=user,
                       max_steps=max_steps)
        return run.outcome, run.judgement

    return play


__all__ = ["tau2_play"]
