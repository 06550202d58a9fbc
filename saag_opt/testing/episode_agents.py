"""Scripted base agents for episodes: the oracle of a gold replay, and one that goes wrong on cue.

They stand where a ``BaseAgent`` stands (``propose(example, feedback=..., temperature=...)``) and
read nothing but the step example's id (``<episode>#t<turn>s<step>``, ``agents/conversation.py``)
and the feedback they got. What they propose comes from the script they were built with, so a
gold replay's oracle is given the gold by whoever builds it (a test or experiments/bench), never
through anything a mechanism sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from saag_opt.agents.base import FeedbackTurn, Proposal
from saag_opt.agents.conversation import step_position
from saag_opt.model import Example, Prediction, ToolCall

StepScript = Callable[[str, int, int, int], Prediction]
"""``(episode id, turn, step, feedback turns so far) -> what the agent proposes``."""

DONE = Prediction((), raw="Done.", status="empty")
"""The text answer that ends a turn."""


def calls(*items: ToolCall) -> Prediction:
    """A prediction making ``items``; none = the ``DONE`` text answer."""
    return Prediction(tuple(items), raw=None, status="ok") if items else DONE


@dataclass
class ScriptedStepAgent:
    """A base agent whose every proposal comes from ``script``; records what it was asked."""

    script: StepScript
    label: str = "scripted-step-agent"
    prompt_hash: str = "scripted"
    temperature: float = 0.0
    seconds: float = 0.01
    asked: list[tuple[str, int, int, int]] = field(default_factory=list)

    def propose(self, example: Example, *, feedback: Sequence[FeedbackTurn | tuple[Prediction, str]] = (),
                temperature: float | None = None) -> Proposal:
        """The script's prediction for this step and feedback count."""
        episode, turn, step = step_position(example.id)
        self.asked.append((episode, turn, step, len(feedback)))
        return Proposal(self.script(episode, turn, step, len(feedback)), seconds=self.seconds, tokens=1,
                        temperature=temperature)


def gold_replay_agent(gold: Mapping[str, Sequence[Sequence[ToolCall]]]) -> ScriptedStepAgent:
    """The oracle: at step 0 of each turn it makes that turn's gold calls (none: it answers), then answers.

    ``gold``: episode id -> per turn, the gold calls (``data.bfcl_environment.gold_calls``).
    """
    def script(episode: str, turn: int, step: int, feedback: int) -> Prediction:
        return calls(*gold[episode][turn]) if step == 0 else DONE

    return ScriptedStepAgent(script, label="gold-replay")


__all__ = ["DONE", "ScriptedStepAgent", "StepScript", "calls", "gold_replay_agent"]
