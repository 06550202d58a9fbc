"""The runtime guard: a tuned reviewer in front of a live agent's tool calls (docs/design.md §14).

``Guard.load(...)`` then ``guard.review(messages, tools, tool_calls)`` -> ``Decision``. Adapters for
a plain OpenAI loop, the OpenAI Agents SDK, dspy.ReAct and LangChain v1 live in their own modules and
import their framework only when used.
"""

from saag_opt.runtime.decision import ACTIONS, Action, Decision
from saag_opt.runtime.guard import Guard, OnError
from saag_opt.runtime.inputs import GuardInputError

__all__ = ["ACTIONS", "Action", "Decision", "Guard", "GuardInputError", "OnError"]
