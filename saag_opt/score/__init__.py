"""The ``score`` verb: a file of saved outputs judged offline against a dataset, no LM involved.

``score.run.score`` picks the scorer by the dataset's workload: single calls (``score.calls``: the
SAAG cascade and the dataset's own truth) or conversations (``score.conversations``: a BFCL
multi-turn result file and BFCL's checkers). ``score.files`` holds what both share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.score.calls import (
        AbstentionCounts,
        PredictionRow,
        ScoredPrediction,
        ScoreResult,
        ScoreRow,
        ScoreSummary,
        score_predictions,
    )
    from saag_opt.score.conversations import EpisodeScoreResult, EpisodeScoreRow, EpisodeScoreSummary, score_multi_turn
    from saag_opt.score.files import Rejection, summary_path, write_score_json
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "calls": (
            "AbstentionCounts", "PredictionRow", "ScoredPrediction", "ScoreResult", "ScoreRow", "ScoreSummary",
            "score_predictions",
        ),
        "conversations": ("EpisodeScoreResult", "EpisodeScoreRow", "EpisodeScoreSummary", "score_multi_turn"),
        "files": ("Rejection", "summary_path", "write_score_json"),
    })

__all__ = [
    "AbstentionCounts",
    "EpisodeScoreResult",
    "EpisodeScoreRow",
    "EpisodeScoreSummary",
    "PredictionRow",
    "Rejection",
    "ScoreResult",
    "ScoreRow",
    "ScoreSummary",
    "ScoredPrediction",
    "score_multi_turn",
    "score_predictions",
    "summary_path",
    "write_score_json",
]
