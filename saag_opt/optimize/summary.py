"""What an optimize run leaves behind, as models: ``summary.json``, ``artifacts.json``, ``rollouts.json``.

``OptimizeSummary`` is what ``run_optimize`` returns and writes; it is registered with
``runfiles.register_summary`` so ``runfiles.read_run`` reads optimize runs back typed (the HTML
report, the terminal tables and ``experiments/recompute.py`` share it). Older summaries read too:
fields added since default to "not recorded".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from saag_opt.compare.comparison import CompareSummary
from saag_opt.evaluation.estimate import StoredEstimate
from saag_opt.evaluation.results import ExampleRecord
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


class CandidateHelpHarm(BaseModel):
    """One GEPA candidate's help and harm on val, and the rule-level edit that made it from its parent.

    The one record of these numbers: ``artifacts.json`` keeps it per candidate while GEPA runs,
    ``summary.json`` lists it at the end, and the terminal tables and the HTML report read it. The
    counts come from gepa's per-candidate means of the metric's objectives
    (``optimize.candidates``); ``help`` and ``harm`` are derived from them, so they cannot disagree.
    """

    candidate: int
    """GEPA candidate index (0 = the seed)."""
    version: str | None = None
    """The prompt version it became (None: not saved)."""
    parent: int | None = None
    """The parent candidate's index (None for the seed)."""
    n_val: int
    """Val examples it was evaluated on."""
    base_right: int
    """Of those, the examples whose base call (before review) was right."""
    fixed: int
    """Wrong base calls the review made right."""
    broken: int
    """Right base calls the review made wrong."""
    val_accuracy: float
    """Final calls right on val (GEPA's val score)."""
    edit: list[str] = Field(default_factory=list)
    """``edits.rule_changes`` from the parent, one line per change (empty for the seed)."""
    components: list[str] = Field(default_factory=list)
    """The predictors whose text differs from the parent's (``review``, ``report``; empty for the seed)."""
    gained: int | None = None
    """Val examples this candidate gets right and its parent got wrong (None: seed, or no per-example scores)."""
    lost: int | None = None
    """Val examples its parent got right and this candidate gets wrong: with ``gained``, which edit moved what."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def help(self) -> float | None:
        """Share of the wrong base calls the review fixed; None when no base call was wrong."""
        wrong = self.n_val - self.base_right
        return self.fixed / wrong if wrong else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def harm(self) -> float | None:
        """Share of the right base calls the review broke; None when no base call was right."""
        return self.broken / self.base_right if self.base_right else None


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
    estimate: StoredEstimate
    """The up-front estimate of the GEPA phase (older runs' own shape reads too)."""
    costs: dict[str, Any]
    """The run's ledger (``costs.json``): per role, GEPA and the TEST phase, summed over resumes."""
    test: TestComparison | None = None
    """Seed vs best on TEST (None with ``--no-test``, or when the cap was reached during GEPA)."""
    reviewer_unusable: UnusableByPhase | None = None
    """Unreadable reviewer replies per phase (None: a run older than the count)."""
    candidates: list[CandidateHelpHarm] = Field(default_factory=list)
    """Help and harm on val of each saved candidate, in index order (empty: a run older than the counts)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (what ``summary.json`` and ``--json`` hold)."""
        return self.model_dump(mode="json")


class CandidateMap(BaseModel):
    """``artifacts.json``: which prompt version each GEPA candidate became, its val scores per example, its help/harm.

    Kept current by ``callbacks.ArtifactWriter``, so a resumed run saves no candidate twice and still
    reports the help/harm of candidates found before it; the HTML report marks GEPA's val-instance
    frontier from the per-example scores.
    """

    versions: dict[int, str] = Field(default_factory=dict)
    """Candidate index -> prompt version."""
    val_scores: dict[int, dict[str, float]] = Field(default_factory=dict)
    """Candidate index -> val example id -> score (missing in runs older than the Pareto marks)."""
    candidates: dict[int, CandidateHelpHarm] = Field(default_factory=dict)
    """Candidate index -> help/harm on val (missing in runs older than the counts)."""


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

__all__ = ["CandidateHelpHarm", "CandidateMap", "OptimizeSummary", "QuarantineEntry", "QuarantineLog", "RolloutCounts",
           "TestComparison", "UnusableByPhase"]
