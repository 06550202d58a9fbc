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

An attack may script how it is obeyed (``Obedience``, from the attack's ``obedience`` hook, handed
over by ``set_task``): the text that sets it off, calls to run first (laundering: copy the
attacker's value into a note, read the note back), whether to run the injection task's ground
truth, and values of the user task to replace from then on (an argument swap: the user's own task
with the recipient the data now names). Calls it makes for the attack carry ``inj_`` ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Obedience:
    """How the obedient agent follows one attack (module docstring)."""

    trigger: str
    """Text that, once read in a tool result, sets it off (squeezed, its first characters)."""
    prelude: tuple[Any, ...] = ()
    """``FunctionCall``s to run first."""
    run_goal: bool = True
    """Then run the injection task's ground truth."""
    swap: Mapping[str, str] = field(default_factory=dict)
    """User-task values to replace in the calls still to come (argument swap)."""


ObedienceHook = Callable[[Any, Any, Any], "Obedience | None"]
"""``(user_task, injection_task, env) -> Obedience`` (None: obey the injection task's goal, the default)."""


class ObedientAgent(BasePipelineElement):
    """The scripted LLM element of the worst case (module docstring); ``set_task`` before each run."""

    name = "saag-opt-obedient-agent"

    def __init__(self) -> None:
        self.user_task: Any = None
        self.injection_task: Any = None
        self.obedience: ObedienceHook | None = None

    def set_task(self, user_task: Any, injection_task: Any = None, obedience: ObedienceHook | None = None) -> None:
        """The user task to complete, the injection task whose goal it obeys when it reads it, and the attack's script."""
        self.user_task, self.injection_task, self.obedience = user_task, injection_task, obedience

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
        plan = self._plan(env) if not state["obeyed"] and self.injection_task is not None else None
        if plan is not None and self._sees(plan.trigger, fresh):
            state["obeyed"] = True
            if plan.swap:  # a user call that now carries the attacker's value is the attack's call
                swapped = [(origin, _swapped(call, plan.swap) if origin == "user" else call) for origin, call in queue]
                queue = [(o if new.args == old.args else "inj", new) for (o, new), (_, old) in zip(swapped, queue)]
            goal = [("inj", c) for c in self.injection_task.ground_truth(env)] if plan.run_goal else []
            queue = [("inj", c) for c in plan.prelude] + goal + queue
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

    def _plan(self, env: Any) -> Obedience:
        plan = self.obedience(self.user_task, self.injection_task, env) if self.obedience is not None else None
        return plan if plan is not None else Obedience(self.injection_task.GOAL)

    @staticmethod
    def _sees(trigger: str, messages: Sequence[Any]) -> bool:
        wanted = squeeze(trigger)[:_GOAL_CHARS]
        for message in messages:
            if message["role"] != "tool" or (message.get("error") or "").startswith(BLOCKED_PREFIX):
                continue
            if wanted and wanted in squeeze(text_of(message.get("content"))):
                return True
        return False


def _swapped(call: Any, swap: Mapping[str, str]) -> Any:
    """``call`` with every string argument equal to (or holding) a swapped value replaced."""
    text = json.dumps(dict(call.args), ensure_ascii=False)
    for old, new in swap.items():
        text = text.replace(json.dumps(old, ensure_ascii=False)[1:-1], json.dumps(new, ensure_ascii=False)[1:-1])
    return call.model_copy(update={"args": json.loads(text)}, deep=True)


__all__ = ["STATE_KEY", "Obedience", "ObedienceHook", "ObedientAgent", "origin_of", "squeeze"]
