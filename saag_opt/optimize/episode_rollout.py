"""An alias kept for old checkpoints: conversation runs pickled ``EpisodeRollout`` under this module path.

gepa's evaluation cache keeps every rollout output in ``gepa/gepa_state.bin`` (cloudpickle, which names
a class by its module), and conversation runs checkpointed before ``optimize.conversations`` existed
name ``saag_opt.optimize.episode_rollout.EpisodeRollout``; without this module they could not resume.
"""

from __future__ import annotations

from saag_opt.optimize.conversations import EpisodeRollout

__all__ = ["EpisodeRollout"]
