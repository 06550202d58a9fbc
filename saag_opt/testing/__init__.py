"""Test doubles shipped with the package, so users' own tests can use them too.

The scripted OpenAI-compatible server is a product part of the ``fake`` model backend, so it lives
in ``saag_opt.lm.scripted_server``; it is re-exported here, where tests look for it. ``ScriptedWorld`` is a
handler for it that tells the base agent, the reviewer, the reflection and tau2's user apart.
"""

from __future__ import annotations

from saag_opt.lm.scripted_server import (
    Fault,
    RecordedRequest,
    Reply,
    ScriptedOpenAIServer,
    echo_handler,
)
from saag_opt.testing.scripted_world import ScriptedWorld, UnknownRequest, dspy_reply, read_request, tentative_calls

__all__ = ["Fault", "RecordedRequest", "Reply", "ScriptedOpenAIServer", "ScriptedWorld", "UnknownRequest",
           "dspy_reply", "echo_handler", "read_request", "tentative_calls"]
