"""What an optimize run leaves behind, as models: ``summary.json``, ``artifacts.json``, ``rollouts.json``.

``OptimizeSummary`` is what ``run_optimize`` returns and writes; it is registered with
``runfiles.register_summary`` so ``runfiles.read_run`` reads optimize runs back typed (the HTML
report, the terminal tables and ``experiments/recompute.py`` share it). Older summaries read too:
fields added since default to "not recorded".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from saag_opt.evaluation.comparison import CompareSummary
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.optimize.budget import CostEstimate
from saag_opt.runfiles import register_summary


class TestComparison(BaseModel):
    """Seed (A) against best (B) on the held-out TEST split: a compare run inside the optimize run."""

    __test__ = False  # not a pytest class

    seed: str
    """The seed prompt version."""
    best: str
    """The best version GEPA found (the seed when none beat it)."""
    compare_run: str | None = None
    """The compare run directory (``<run>/test/<ts>-compare``); None when the cap stopped it first."""
    comparison: CompareSummary | None = None
    """That compare run's summary; None when no example finished on both sides."""
    stopped: str | None = None
    """Why the comparison ended early (``--max-cost``); None = complete."""


class RolloutCounts(BaseModel):
    """``rollouts.json``: GEPA rollouts run and the unreadable reviewer replies among them (``RolloutContext``)."""

    rollouts: int = 0
    """Rollouts run (a resume re-running the seed's val evaluation counts them again)."""
    reviewer_unusable: int = 0
    """Reviewer replies still unreadable after one retry."""
    rollouts_with_unusable: int = 0
    """Rollouts with at least one such reply."""


class UnusableByPhase(BaseModel):
    """Unreadable reviewer replies per phase of the run (``optimize.unusable``)."""

    gepa_rollouts: RolloutCounts
    """GEPA's rollouts on train and val."""
    test: dict[str, int] | None = None
    """TEST, per prompt: ``{"seed", "best"}``; None when the TEST phase did not run."""


class OptimizeSummary(BaseModel):
    """``summary.json`` of an optimize run, and what ``run_optimize`` returns."""

    run_dir: Path
    """The run directory."""
    status: str
    """``success``, or ``stopped`` when ``--max-cost`` was reached."""
    saag_informed: bool = False
    """The reviewer saw the gold-free SAAG report, in GEPA's rollouts and on TEST."""
    grounding: str | None = None
    """Stage-3 mode of that report (and of a gate)."""
    seed_version: str
    """The seed prompt version."""
    best_version: str
    """The version aliased ``best``."""
    versions: dict[int, str]
    """GEPA candidate index -> prompt version."""
    val_scores: list[float]
    """Val score per candidate, in index order."""
    metric_calls: int
    """Rollouts used (cumulative over resumes)."""
    stopped_by: str | None
    """``max_metric_calls``, ``max_cost`` or ``stop_file``."""
    estimate: CostEstimate
    """The up-front estimate of the GEPA phase."""
    costs: dict[str, Any]
    """The run's ledger (``costs.json``): per role, GEPA and the TEST phase, summed over resumes."""
    test: TestComparison | None = None
    """Seed vs best on TEST (None with ``--no-test``, or when the cap was reached during GEPA)."""
    reviewer_unusable: UnusableByPhase | None = None
    """Unreadable reviewer replies per phase (None: a run older than the count)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (what ``summary.json`` and ``--json`` hold)."""
        return self.model_dump(mode="json")


class CandidateMap(BaseModel):
    """``artifacts.json``: which prompt version each GEPA candidate became, and its val scores per example.

    Kept current by ``callbacks.ArtifactWriter``, so a resumed run saves no candidate twice; the
    HTML report marks GEPA's Pareto front from the per-example scores.
    """

    versions: dict[int, str] = Field(default_factory=dict)
    """Candidate index -> prompt version."""
    val_scores: dict[int, dict[str, float]] = Field(default_factory=dict)
    """Candidate index -> val example id -> score (missing in runs older than the Pareto marks)."""


class QuarantineEntry(BaseModel):
    """One proposal GEPA's rails refused (its reason lives in the prompt version's ``quarantine``)."""

    version: str
    sha256: str
    parent: str
    iteration: int | None = None


class QuarantineLog(BaseModel):
    """``quarantine.json``: the run's quarantined proposals, kept by ``callbacks.ArtifactWriter``."""

    quarantined: list[QuarantineEntry] = Field(default_factory=list)


register_summary("optimize", OptimizeSummary, records=ExampleRecord)

__all__ = ["CandidateMap", "OptimizeSummary", "QuarantineEntry", "QuarantineLog", "RolloutCounts", "TestComparison",
           "UnusableByPhase"]
