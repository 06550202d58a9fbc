"""The scripted server's old path: it lives in ``saag_opt.lm.scripted_server`` now (the ``fake`` backend runs it).

Kept so ``from saag_opt.testing.scripted_server import ...`` in existing tests keeps working.
"""

from __future__ import annotations

from saag_opt.lm.scripted_server import (
    Fault,
    FaultKind,
    Handler,
    RecordedRequest,
    Reply,
    ScriptedOpenAIServer,
    echo_handler,
)

__all__ = ["Fault", "FaultKind", "Handler", "RecordedRequest", "Reply", "ScriptedOpenAIServer", "echo_handler"]
