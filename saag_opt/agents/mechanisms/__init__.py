"""Review mechanisms: how the base agent, a reviewer and the SAAG cascade combine (docs/design.md §3, §5).

One family per module; the shared types are ``base``, the spec grammar ``registry``. The face gives
the data types a mechanism's outcome is made of under their old path too, because GEPA checkpoints
(``gepa_state.bin``, cloudpickle) written when ``saag_opt.agents.mechanisms`` was one module name them
there: an optimize run from before keeps resuming.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.agents.mechanisms.base import Candidate, MechanismOutcome, ReviewRound
else:
    __getattr__, __dir__ = lazy_exports(__name__, {"base": ("Candidate", "MechanismOutcome", "ReviewRound")})

__all__ = ["Candidate", "MechanismOutcome", "ReviewRound"]
