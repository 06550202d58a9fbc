"""``score``: which scorer judges a file, decided once by the dataset's workload (``data.workload``).

Single calls: a predictions file, judged by the SAAG cascade and the examples' ground truth
(``score.calls``). Conversations: a BFCL multi-turn result file, judged by BFCL's own checkers
(``score.conversations``, docs/design.md §18). tau2's conversations are played with a simulated
user and judged by tau2's evaluator while they run, so there is no result file to score: refused
with the message ``optimize`` gives. The scorers are called through their modules, so the root
face's ``saag_opt.score`` is the very function this calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union, cast

from saag_opt.data.catalog import simulated_user_refusal
from saag_opt.data.workload import Workload, WorkloadKind
from saag_opt.errors import ConfigError
from saag_opt.saag.modes import GroundingMode
from saag_opt.score import calls, conversations

if TYPE_CHECKING:
    from saag_opt.episodes import Episode
    from saag_opt.model import Example

ScoreOutcome = Union[calls.ScoreResult, conversations.EpisodeScoreResult]
"""What ``score`` returns: single calls' result, or conversations'."""


def _calls(path: Path, work: Workload, grounding: GroundingMode) -> ScoreOutcome:
    return calls.score_predictions(path, cast("Sequence[Example]", work.load()), grounding=grounding)


def _conversations(path: Path, work: Workload, grounding: GroundingMode) -> ScoreOutcome:
    del grounding  # BFCL's checkers judge states and calls, not the SAAG cascade
    return conversations.score_multi_turn(path, cast("Sequence[Episode]", work.load()))


SCORERS: dict[WorkloadKind, Callable[[Path, Workload, GroundingMode], ScoreOutcome]] = {
    WorkloadKind.CALLS: _calls,
    WorkloadKind.CONVERSATIONS: _conversations,
}
"""The scorer of each kind of work that leaves a file to score."""


def score(path: str | Path, work: Workload, *, grounding: GroundingMode = "paper") -> ScoreOutcome:
    """Score the file ``path`` against the dataset ``work`` names, with the scorer of its kind.

    ``grounding``: stage 3 of the SAAG cascade for single calls (``paper`` or ``calibrated``).

    Raises:
        ConfigError: a kind with no file to score (tau2), or a bad dataset spec.
        DatasetError: the dataset or the file cannot be read at all.
    """
    scorer = SCORERS.get(work.kind)
    if scorer is None:
        raise ConfigError(simulated_user_refusal("score", work.spec)
                          or f"{work.spec!r}: `saag-opt score` has no scorer for {work.kind.value}")
    return scorer(Path(path), work, grounding)


__all__ = ["SCORERS", "ScoreOutcome", "score"]
