"""Scripted gold replay for tau2 tasks: a proposer that makes the gold actions, a user that does its part.

Through the project's tau2 agent (``saag_opt.agents.tau2``: every proposal a mechanism step) and
tau2's own orchestrator and evaluator, with no LM: ``GoldProposer`` stands where the base agent's
model stands, and ``gold_user`` where tau2's user simulator stands. Both read one ``GoldScript``,
the task's gold actions in order:

* the proposer's next action is the agent action after the calls already executed (counted from
  the step example's tool results); when user actions (telecom's phone settings) come before it,
  it asks the user in text; with none left it sends the task's ``communicate_info``;
* the user opens, performs the user actions due before the agent's next action, one call each,
  says so, and sends ``###STOP###`` once everything is done.

``wrong`` makes the proposer go wrong on purpose: ``{action index: corrupted call}`` is proposed in
place of that gold action, until the proposer sees reviewer feedback or a ``Not executed`` note
for it; then the gold action. That is the flip tests' agent.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from saag_opt.agents.base import FeedbackTurn, Proposal
from saag_opt.data.tau2 import task_of
from saag_opt.data.tau2_package import tau2
from saag_opt.episodes import Episode
from saag_opt.model import Example, Prediction, ToolCall

ASK_USER = "Please do the next steps on your side and tell me when you are done."
OPENING = "Hi, I need help."
USER_DONE = "Done."


@dataclass
class GoldScript:
    """One task's gold actions and how far the user got (shared by the proposer and the user)."""

    actions: tuple[Any, ...]
    communicate: str
    history: int = 0
    """Agent calls already in the task's message history (they ran before the replay starts)."""
    user_done: int = 0
    agent_next: int = 0
    """Index of the agent's next gold action (len(actions) when it has none left)."""

    @classmethod
    def of(cls, episode: Episode) -> GoldScript:
        """The script of a tau2 episode."""
        task = task_of(episode)
        criteria = task.evaluation_criteria
        actions = tuple(criteria.actions or ()) if criteria is not None else ()
        info = list(criteria.communicate_info or ()) if criteria is not None else []
        history = task.initial_state.message_history if task.initial_state is not None else None
        ran = sum(len(m.tool_calls or ()) for m in history or () if m.role == "assistant")
        script = cls(actions, " ".join(info) or "Your request is complete.", ran)
        script.agent_next = script.agent_action(0)
        return script

    def agent_action(self, k: int) -> int:
        """The index of the k-th agent action (len(actions) when there is none)."""
        indices = [i for i, a in enumerate(self.actions) if a.requestor == "assistant"]
        return indices[k] if k < len(indices) else len(self.actions)

    def user_actions_before(self, index: int) -> list[int]:
        """The user actions that come before action ``index``."""
        return [i for i, a in enumerate(self.actions[:index]) if a.requestor == "user"]

    @property
    def user_total(self) -> int:
        """All user actions of the task."""
        return len(self.user_actions_before(len(self.actions)))


def replayable(episode: Episode) -> bool:
    """A task whose gold can be replayed: not env assertions without any action to satisfy them (mock has one)."""
    criteria = task_of(episode).evaluation_criteria
    return criteria is None or bool(criteria.actions) or not criteria.env_assertions


def _executed(example: Example) -> int:
    return sum(1 for m in example.messages if m.get("role") == "system"
               and str(m.get("content") or "").startswith("Tool result ("))


def _corrected(example: Example) -> bool:
    """Feedback since the last executed call: a ``Not executed`` note of a withheld step."""
    for message in reversed(example.messages):
        content = str(message.get("content") or "")
        if message.get("role") == "system" and content.startswith("Tool result ("):
            return False
        if message.get("role") == "system" and content.startswith("Not executed:"):
            return True
    return False


@dataclass
class GoldProposer:
    """Stands for the base agent (``propose``, ``label``, ``prompt_hash``, ``temperature``; no LM)."""

    script: GoldScript
    wrong: Mapping[int, ToolCall] = field(default_factory=dict)
    label: str = "gold-replay"
    prompt_hash: str = "tau2-gold"
    temperature: float = 0.0
    mode: str = "native"
    proposals: list[tuple[str, Prediction]] = field(default_factory=list)

    def propose(self, example: Example, *, feedback: Sequence[FeedbackTurn | tuple[Prediction, str]] = (),
                temperature: float | None = None) -> Proposal:
        """The next gold action, a request to the user, or the final message (module docstring)."""
        k = _executed(example) - self.script.history
        index = self.script.agent_action(k)
        self.script.agent_next = index
        if self.script.user_done < len(self.script.user_actions_before(index)):
            prediction = Prediction(raw=ASK_USER, status="empty")
        elif index < len(self.script.actions):
            action = self.script.actions[index]
            call = ToolCall(action.name, dict(action.arguments))
            if index in self.wrong and not feedback and not _corrected(example):
                call = self.wrong[index]
            prediction = Prediction((call,), raw=None, status="ok")
        else:
            prediction = Prediction(raw=self.script.communicate, status="empty")
        self.proposals.append((example.id, prediction))
        return Proposal(prediction, temperature=temperature)


@functools.lru_cache(maxsize=1)
def _user_class() -> type:
    t = tau2()

    class GoldUser(t.BaseUser):  # type: ignore[misc,name-defined]
        """tau2 user that performs the task's user actions when due, then stops (module docstring)."""

        def __init__(self, script: GoldScript) -> None:
            super().__init__(instructions=None, llm=None, llm_args=None)
            self.script = script
            self.spoke = False
            self._ids = itertools.count()

        def get_init_state(self, message_history: list[Any] | None = None) -> Any:
            return t.UserState(system_messages=[], messages=list(message_history or []))

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return bool(t.UserSimulator.is_stop(message))

        def set_seed(self, seed: int) -> None:
            """No model, nothing to seed."""

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            due = self.script.user_actions_before(self.script.agent_next)
            if self.script.user_done < len(due):
                action = self.script.actions[due[self.script.user_done]]
                self.script.user_done += 1
                reply = t.UserMessage(role="user", tool_calls=[t.ToolCall(
                    id=f"user_{next(self._ids)}", name=action.name, arguments=dict(action.arguments), requestor="user")])
            elif not self.spoke:
                reply = t.UserMessage(role="user", content=OPENING)
            elif (isinstance(message, t.AssistantMessage) and self.script.agent_next >= len(self.script.actions)
                  and self.script.user_done >= self.script.user_total):
                reply = t.UserMessage(role="user", content="Thank you. ###STOP###")
            else:
                reply = t.UserMessage(role="user", content=USER_DONE)
            self.spoke = self.spoke or not reply.tool_calls
            state.messages.append(reply)
            return reply, state

    return GoldUser


def gold_user(script: GoldScript) -> Any:
    """A user factory (``agents.tau2.UserFactory``) for the scripted user of ``script``."""
    return lambda environment, task: _user_class()(script)


__all__ = ["ASK_USER", "OPENING", "USER_DONE", "GoldProposer", "GoldScript", "gold_user", "replayable"]
