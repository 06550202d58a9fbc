"""Test doubles shipped with the package, so users' own tests can use them too."""

from __future__ import annotations

from saag_opt.testing.scripted_server import (
    Fault,
    RecordedRequest,
    Reply,
    ScriptedOpenAIServer,
    echo_handler,
)

__all__ = ["Fault", "RecordedRequest", "Reply", "ScriptedOpenAIServer", "echo_handler"]
