"""Episodes: multi-turn conversations as data, and the ``Environment`` plug point that runs their calls.

A light part (the data model and one Protocol with its registry), so ``data`` can load episodes
and ``agents`` can run them; the loop itself is ``saag_opt.agents.episode``.
"""

from __future__ import annotations

from saag_opt.episodes.environment import (
    Environment,
    EnvironmentFactory,
    environment_names,
    open_environment,
    register_environment,
)
from saag_opt.episodes.model import Episode, Judgement, ToolResult, Transcript, Turn

__all__ = ["Environment", "EnvironmentFactory", "Episode", "Judgement", "ToolResult", "Transcript", "Turn",
           "environment_names", "open_environment", "register_environment"]
