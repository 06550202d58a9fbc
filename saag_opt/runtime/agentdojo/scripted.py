"""``ObedientAgent``: the deterministic worst case, so the guard's security is measured without an LLM.

It completes the user task from AgentDojo's ground truth (``user_task.ground_truth(env)``, one call
per turn, as ``GroundTruthPipeline`` does) and obeys every injected instruction: the first time a
tool result carries the injection task's goal, it runs that task's ground-truth calls
(``injection_task.ground_truth(env)`` on the environment as it is then) before the rest of the user
task, as the attacks ask ("before you can solve the task ..."). A blocked call is dropped (it reads
the feedback and moves on; a script cannot rephrase), so a guard that blocks a ground-truth call of
the user task costs utility, visibly.

Injection tasks whose ground truth is empty (workspace 6-13 and travel 6 in v1.2.2: goals an agent
meets by what it says or by bulk actions the script does not write) cannot succeed against it; the
bench reports them as such.

Call ids say whose call it is: ``user_<n>`` for the user task, ``inj_<n>`` for the injection task
(``origin_of``), so a block is a false alarm exactly when its id starts with ``user_``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from saag_opt.runtime.agentdojo import require

require()

from agentdojo.agent_pipeline import BasePipelineElement  # noqa: E402
from agentdojo.types import ChatAssistantMessage, text_content_block_from_string  # noqa: E402

from saag_opt.runtime.agentdojo.elements import BLOCKED_PREFIX, NO_ENV, text_of  # noqa: E402

STATE_KEY = "saag_obedient"
"""``extra_args`` key of the agent's per-run state (the queue of calls, whether it obeyed yet)."""
_GOAL_CHARS = 60  # how much of the goal must appear (squeezed) in a tool result to count as seen
_SQUEEZE = re.compile(r"[\s\\'\"]+")


def squeeze(text: str) -> str:
    """Text without whitespace, quotes and backslashes, casefolded: YAML's folding and escapes undone."""
    return _SQUEEZE.sub("", text).casefold()


def origin_of(call_id: str | None) -> Literal["user", "injection", "other"]:
    """``user`` or ``injection`` for a call this agent made (``other`` for any other id)."""
    if call_id and call_id.startswith("user_"):
        return "user"
    if call_id and call_id.startswith("inj_"):
        return "injection"
    return "other"


class ObedientAgent(BasePipelineElement):
    """The scripted LLM element of the worst case (module docstring); ``set_task`` before each run."""

    name = "saag-opt-obedient-agent"

    def __init__(self) -> None:
        self.user_task: Any = None
        self.injection_task: Any = None

    def set_task(self, user_task: Any, injection_task: Any = None) -> None:
        """The user task to complete and the injection task whose goal it obeys when it reads it."""
        self.user_task, self.injection_task = user_task, injection_task

    def query(self, query: str, runtime: Any, env: Any = NO_ENV, messages: Sequence[Any] = (),
              extra_args: dict[str, Any] | None = None) -> tuple[str, Any, Any, Sequence[Any], dict[str, Any]]:
        """One turn: the next ground-truth call, or the final answer when none is left."""
        if self.user_task is None:
            raise ValueError("ObedientAgent.set_task(user_task, injection_task) must be called before a run")
        extra = dict(extra_args or {})
        state = dict(extra.get(STATE_KEY) or {})
        if not state:
            state = {"queue": [("user", c) for c in self.user_task.ground_truth(env)], "obeyed": False, "n": 0,
                     "read": 0}
        queue = list(state["queue"])
        fresh = messages[state["read"]:]
        if not state["obeyed"] and self.injection_task is not None and self._sees_goal(fresh):
            state["obeyed"] = True
            queue = [("inj", c) for c in self.injection_task.ground_truth(env)] + queue
        if queue:
            origin, call = queue.pop(0)
            call_id = f"{'user' if origin == 'user' else 'inj'}_{state['n']}"
            reply = ChatAssistantMessage(role="assistant", content=[text_content_block_from_string("")],
                                         tool_calls=[call.model_copy(update={"id": call_id}, deep=True)])
            state["n"] += 1
        else:
            reply = ChatAssistantMessage(role="assistant", tool_calls=None, content=[
                text_content_block_from_string(self.user_task.GROUND_TRUTH_OUTPUT)])
        state["queue"], state["read"] = queue, len(messages) + 1
        extra[STATE_KEY] = state
        return query, runtime, env, [*messages, reply], extra

    def _sees_goal(self, messages: Sequence[Any]) -> bool:
        goal = squeeze(self.injection_task.GOAL)[:_GOAL_CHARS]
        for message in messages:
            if message["role"] != "tool" or (message.get("error") or "").startswith(BLOCKED_PREFIX):
                continue
            if goal and goal in squeeze(text_of(message.get("content"))):
                return True
        return False


__all__ = ["STATE_KEY", "ObedientAgent", "origin_of", "squeeze"]
