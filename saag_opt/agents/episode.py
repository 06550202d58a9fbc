"""The episode loop: turns of steps, each tentative step reviewed by a mechanism before anything runs.

Per turn (BFCL's ``inference_multi_turn_FC``): the user's messages join the conversation; then,
step after step, the agent proposes, the mechanism reviews, and the *final* prediction of the step
decides:

* it makes calls: the environment executes them, the calls and their results join the
  conversation, and the agent takes the next step;
* it makes none (the agent answered in text or abstained, or the review withheld the proposed
  calls: a ``guard+r<N>`` block, or a revision into no call): the turn ends. Calls the review
  withheld are never executed, so they are in no transcript and return nothing to ground in;
* after ``max_steps`` executed steps (BFCL's ``MAXIMUM_STEP_LIMIT`` = 20, counted as BFCL counts:
  the step that makes the count exceed it ends the run) the run is cut off: the remaining turns
  do not run, and BFCL's rule then fails the entry (force-terminated).

There is no second review loop here: each step is one ``Mechanism.run(step_example, agent, reviewer,
ctx=ctx)`` (``r<N>``, ``s<N>``, ``g<N>``, ``gate+...``, ``guard+r<N>``, ``binary`` / ``saag`` self-repair
and ``none`` alike), on the ``StepExample`` of ``agents/conversation.py``, which says what the SAAG
cascade grounds in (user turns and tool results). Nothing here reads gold: the environment's
``check`` judges the transcript afterwards (``saag_opt.evaluation.conversation_records``).

The caller owns the environment: ``run_episode`` resets it and leaves it open, so the caller can
``check`` the transcript and then ``close`` it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.conversation import Conversation
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.reviewer import Reviewer
from saag_opt.episodes import Environment, Episode, ToolResult, Transcript
from saag_opt.events import note_step
from saag_opt.model import Prediction, ToolCall

MAXIMUM_STEP_LIMIT = 20
"""BFCL's ``MAXIMUM_STEP_LIMIT`` (``bfcl_eval/constants/default_prompts.py``)."""


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """One step: the mechanism's outcome (proposal, reviews, final) and what the environment returned."""

    turn: int
    index: int
    outcome: MechanismOutcome
    results: tuple[ToolResult, ...] = ()
    """One per final call when they ran (a refused call has ``executed=False``); empty when nothing ran."""

    @property
    def proposed(self) -> Prediction:
        """The agent's round-0 proposal."""
        return self.outcome.base.prediction

    @property
    def final(self) -> Prediction:
        """What the mechanism let through."""
        return self.outcome.final

    @property
    def executed(self) -> tuple[ToolCall, ...]:
        """The calls that ran (what the checker replays)."""
        return tuple(call for call, result in zip(self.final.calls, self.results) if result.executed)

    @property
    def withheld(self) -> bool:
        """The agent proposed calls and the review let none run (a block, or a revision into no call)."""
        return bool(self.proposed.calls) and not self.final.calls

    @property
    def revised(self) -> bool:
        """Calls ran, and they are not the ones proposed."""
        return bool(self.final.calls) and self.final.calls != self.proposed.calls


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """One turn: its steps in order; ``cut_off``: the step limit ended the run in this turn."""

    index: int
    steps: tuple[StepOutcome, ...]
    added_tools: tuple[str, ...] = ()
    cut_off: bool = False
    messages: tuple[Mapping[str, Any], ...] = ()
    """The turn's own user messages when they are not the episode's (what tau2's user simulator wrote)."""

    @property
    def transcript(self) -> tuple[tuple[ToolCall, ...], ...]:
        """The executed calls per step (steps that ran nothing left out)."""
        return tuple(step.executed for step in self.steps if step.executed)


@dataclass(frozen=True)
class EpisodeOutcome:
    """What one mechanism did over a whole episode (no verdict: the environment's ``check`` gives it)."""

    episode_id: str
    category: str
    mechanism: str
    turns: tuple[TurnOutcome, ...]

    @property
    def steps(self) -> tuple[StepOutcome, ...]:
        """Every step, in order."""
        return tuple(step for turn in self.turns for step in turn.steps)

    @property
    def transcript(self) -> Transcript:
        """Per turn, per step, the executed calls: what ``Environment.check`` reads."""
        return tuple(turn.transcript for turn in self.turns)

    @property
    def cut_off(self) -> bool:
        """The step limit ended the run before its last turn finished."""
        return any(turn.cut_off for turn in self.turns)

    @property
    def seconds(self) -> float:
        """Every LM call of every step (the mechanism outcomes' ``seconds``)."""
        return sum(step.outcome.seconds for step in self.steps)

    @property
    def reviewer_calls(self) -> int:
        """LLM reviewer calls over the episode."""
        return sum(step.outcome.reviewer_calls for step in self.steps)

    @property
    def agent_calls(self) -> int:
        """Base-agent calls beyond each step's round-0 proposal (revisions, candidates)."""
        return sum(step.outcome.agent_calls for step in self.steps)

    @property
    def reviewer_unusable(self) -> int:
        """Reviewer replies that stayed unreadable."""
        return sum(step.outcome.reviewer_unusable for step in self.steps)


def run_episode(episode: Episode, environment: Environment, agent: BaseAgent, reviewer: Reviewer | None,
                mechanism: Mechanism, ctx: MechanismContext, *, max_steps: int = MAXIMUM_STEP_LIMIT) -> EpisodeOutcome:
    """Run ``episode`` on ``environment`` (reset here, left open), each step through ``mechanism`` (module docstring).

    LM failures propagate, as from ``Mechanism.run``; the caller records the entry as failed.

    Raises:
        ValueError: ``max_steps`` < 1.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    environment.reset(episode)
    conversation = Conversation(episode.id)
    turns: list[TurnOutcome] = []
    for index, turn in enumerate(episode.turns):
        conversation.user(turn.messages)
        registry = environment.tools(index)
        steps: list[StepOutcome] = []
        ran, cut_off = 0, False
        while True:
            example = conversation.step(index, len(steps), registry, episode.category)
            note_step()
            outcome = mechanism.run(example, agent, reviewer, ctx=ctx)
            if not outcome.final.calls:
                conversation.answered(outcome.final)
                steps.append(StepOutcome(index, len(steps), outcome))
                break
            results = environment.execute(outcome.final.calls)
            conversation.executed(outcome.final.calls, results)
            steps.append(StepOutcome(index, len(steps), outcome, tuple(results)))
            ran += 1
            if ran > max_steps:
                cut_off = True
                break
        turns.append(TurnOutcome(index, tuple(steps), tuple(t.name for t in turn.added_tools), cut_off))
        if cut_off:
            break
    return EpisodeOutcome(episode.id, episode.category, mechanism.spec, tuple(turns))


__all__ = ["MAXIMUM_STEP_LIMIT", "EpisodeOutcome", "StepOutcome", "TurnOutcome", "run_episode"]
