"""One prompt version: the file model, its content hash and its name rules (docs/design.md §8).

Decisions:

* ``sha256`` hashes the *content* only: canonical JSON of ``{"program", "instructions"}``. Metadata
  (scores, cost, notes, lineage) is kept beside the content and never changes the hash.
* Names (program, version, alias) match ``[A-Za-z0-9._-]+`` without a leading dot, so a name can
  never escape its directory (optuna artifacts/_filesystem.py checks ids the same way).
* A version knows which splits shaped it (``trained_on``, ``selected_on``) and what its reviewer saw
  (``saag_report``), so a score on a split it saw, or a reviewer it was not tuned for, is flagged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from saag_opt.choices import GroundingName, SplitName
from saag_opt.errors import ArtifactError, validation_message
from saag_opt.model import canonical_json
from saag_opt.runfiles import utc_now

SCHEMA_VERSION = 1
"""Bump when PromptVersion's fields change meaning; migrate old files in a before-validator."""

Source = Literal["manual", "gepa", "optuna"]
Split = SplitName
SPLIT_NAMES: tuple[Split, ...] = get_args(SplitName)

_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # always fullmatch: "$" accepts a trailing \n


def is_safe_name(name: str) -> bool:
    """``name`` can be a program, version or alias name: safe as a file name, no leading dot."""
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None


def validate_name(name: str, what: str = "version") -> str:
    """Return ``name`` if it is safe as a file name; path separators and leading dots are refused."""
    if not is_safe_name(name):
        raise ArtifactError(
            f"invalid {what} name {name!r}: use letters, digits, '.', '_' or '-' (no leading dot, "
            "no path separators, at most 100 characters)"
        )
    return name


def content_hash(program: str, instructions: Mapping[str, str]) -> str:
    """SHA-256 of the canonical JSON of program + instructions: what makes two versions 'the same'."""
    payload = canonical_json({"program": program, "instructions": dict(instructions)})
    return sha256(payload.encode("utf-8")).hexdigest()


class PromptVersion(BaseModel):
    """One immutable prompt version: per-predictor instructions plus where they came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    """File format version (see ``SCHEMA_VERSION``)."""
    version: str
    """Name inside the program, e.g. ``v2`` or ``v3-gepa``; safe as a file name."""
    program: str
    """The DSPy program the instructions belong to, e.g. ``reviewer``."""
    instructions: dict[str, str]
    """Predictor name (as ``named_predictors()`` spells it) -> instruction text."""
    sha256: str = ""
    """Content hash of program + instructions; filled in when empty, checked when given."""
    parents: list[str] = Field(default_factory=list)
    """Versions (same program) this one was derived from; empty for a root."""
    created: str = Field(default_factory=utc_now)
    """ISO-8601 UTC timestamp."""
    source: Source = "manual"
    """Who wrote it: a person (``manual``), a GEPA run, or an Optuna study."""
    models: dict[str, str] = Field(default_factory=dict)
    """Role -> model spec used when it was produced/scored, e.g. ``{"reviewer": "gpt-5-mini"}``."""
    dataset: str | None = None
    """Dataset it was optimised or scored on, if any."""
    split_hash: str | None = None
    """Hash of the train/val split, so scores are comparable only on the same split."""
    trained_on: list[Split] = Field(default_factory=list)
    """Splits of ``dataset`` whose examples shaped the instructions (GEPA: rollouts and reflection)."""
    selected_on: list[Split] = Field(default_factory=list)
    """Splits of ``dataset`` the version was chosen on (GEPA: the val scores)."""
    saag_report: GroundingName | None = None
    """The reviewer it was tuned for saw the gold-free SAAG report of each call, with this stage-3
    grounding (``optimize --saag-informed``); None = a plain reviewer (or unknown, for a manual prompt).
    Why kept: instructions learnt beside the report may lean on it, so ``evaluate`` warns when the
    reviewer it runs does not match (``reviewer_mismatch``)."""
    scores: dict[str, Any] = Field(default_factory=dict)
    """Metric name -> value (JSON values), e.g. ``{"val_accuracy": 0.925}``."""
    cost: dict[str, Any] = Field(default_factory=dict)
    """Spend to produce it, e.g. ``{"usd": 1.2, "metric_calls": 400}``."""
    notes: str = ""
    """Free text: provenance, caveats."""
    quarantine: str | None = None
    """Why GEPA's rails refused this proposal (``optimize.rails``): kept for the lineage, never aliased."""

    @field_validator("version", "program")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not is_safe_name(value):
            raise ValueError(f"{value!r} is not a safe name ([A-Za-z0-9._-], no leading dot)")
        return value

    @field_validator("instructions")
    @classmethod
    def _non_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("at least one predictor instruction is required")
        if any(not name.strip() for name in value):
            raise ValueError("predictor names must be non-empty")
        return value

    @field_validator("created")
    @classmethod
    def _iso(cls, value: str) -> str:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"created {value!r} is not an ISO-8601 timestamp") from exc
        if parsed.tzinfo is None:
            raise ValueError(f"created {value!r} has no UTC offset (write e.g. 2026-03-30T12:00:00+00:00)")
        return value

    @model_validator(mode="after")
    def _check_hash(self) -> PromptVersion:
        expected = content_hash(self.program, self.instructions)
        if not self.sha256:
            object.__setattr__(self, "sha256", expected)
        elif self.sha256 != expected:
            raise ValueError(f"sha256 {self.sha256[:12]}... does not match the content (expected {expected[:12]}...)")
        if self.version in self.parents:
            raise ValueError(f"version {self.version!r} lists itself as a parent")
        return self

    @property
    def ref(self) -> str:
        """``program@version``, the reference that resolves back to this version."""
        return f"{self.program}@{self.version}"

    def contaminated(self, splits: Iterable[str]) -> list[Split]:
        """Which of ``splits`` this version was trained or selected on (train, val, test order).

        Why: a score on such a split is not a held-out result. Splits are assigned by a hash of the
        example id, the same for every dataset, so the split name alone is what can overlap.
        """
        seen = set(self.trained_on) | set(self.selected_on)
        return [s for s in SPLIT_NAMES if s in seen and s in set(splits)]

    def reviewer_mismatch(self, saag_informed: bool, grounding: str) -> str | None:
        """Why a reviewer with these options is not the one this version was tuned for (None = it is, or unknown).

        Only a GEPA version knows what its reviewer saw; a manual prompt (the seeds) fits either.
        """
        if self.source != "gepa":
            return None
        if self.saag_report is not None and not saag_informed:
            return (f"tuned for a reviewer that sees the SAAG report (--saag-informed --grounding {self.saag_report}); "
                    "this reviewer does not see it")
        if self.saag_report is None and saag_informed:
            return "tuned for a reviewer without the SAAG report; this reviewer sees it (--saag-informed)"
        if saag_informed and self.saag_report != grounding:
            return (f"tuned beside a SAAG report with --grounding {self.saag_report}; this reviewer's report uses "
                    f"--grounding {grounding}")
        return None


def load_version_file(path: str | os.PathLike[str]) -> PromptVersion:
    """Read and validate one version JSON (hash included).

    Raises:
        ArtifactError: the file is missing, not JSON, or fails validation (message names the path).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: cannot read prompt version ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        return PromptVersion.model_validate_json(text)
    except ValidationError as exc:
        raise ArtifactError(f"{path}: invalid prompt version: {validation_message(exc, whole='file')}") from exc


__all__ = [
    "SCHEMA_VERSION", "SPLIT_NAMES", "PromptVersion", "Source", "Split", "content_hash", "is_safe_name",
    "load_version_file", "validate_name",
]
