"""``OptimizeConfig``: one review set-up plus GEPA's fields, validated; stored in ``run.json`` for resume."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, field_validator, model_validator

from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.mechanisms.registry import mechanism_names
from saag_opt.agents.report_note import REPORT_NOTE
from saag_opt.agents.setup import ReviewSetup, SetupConfig
from saag_opt.choices import AcceptName, BudgetName, ProposerName
from saag_opt.data.catalog import simulated_user_refusal
from saag_opt.data.workload import Workload, workload
from saag_opt.errors import ConfigError
from saag_opt.lm import check_model, default_workers
from saag_opt.resuming import RUN_OPTION


class GepaSetup(ReviewSetup):
    """A review set-up GEPA can tune: its mechanism calls the reviewer, so there is a prompt to evolve."""

    @field_validator("mechanism")
    @classmethod
    def _calls_the_reviewer(cls, mechanism: Mechanism) -> Mechanism:
        if not mechanism.components:
            raise ValueError(f"{mechanism.spec!r} never calls the LLM reviewer, so there is no reviewer prompt to "
                             f"optimize; use one of {', '.join(mechanism_names(reviewer_only=True))} (e.g. r2)")
        return mechanism


class OptimizeConfig(SetupConfig):
    """Everything ``saag-opt optimize`` needs: ``setup`` (the reviewer GEPA tunes, as evaluate measures it) and GEPA's fields.

    The set-up is what GEPA's rollouts and the seed-vs-best test phase both run (its prompt is the
    seed). Stored in ``run.json`` (no secrets), flat (``SetupConfig``); budgets and the other
    fields marked ``RUN_OPTION`` may change on ``--resume`` (budgets are cumulative).
    """

    model_config = ConfigDict(extra="forbid")

    SETUP_DEFAULTS: ClassVar[Mapping[str, Any]] = {"base": "gpt-4o", "reviewer": "gpt-5-mini"}
    """The models an optimize run uses when none is named (the reviewer's instructions evolve)."""

    setup: GepaSetup
    """The reviewer GEPA tunes, as ``evaluate`` would measure it (see ``ReviewSetup``)."""
    reflection: str | None = None
    """Reflection LM spec; None = same as the reviewer."""
    dataset: str = "shipped:bfcl"
    """Dataset spec: single-call examples (``saag_opt.data.load_dataset``) or BFCL multi-turn entries
    (``load_episodes``; one rollout = one reviewed conversation, see ``optimize.conversations``)."""
    budget: Annotated[BudgetName | None, RUN_OPTION] = None
    """GEPA auto budget; exclusive with ``max_metric_calls``; both None = ``light``."""
    max_metric_calls: Annotated[int | None, RUN_OPTION] = Field(default=None, gt=0)
    """Cumulative cap on program rollouts (GEPA metric calls)."""
    max_cost: Annotated[float | None, RUN_OPTION] = Field(default=None, gt=0)
    """Hard cap in USD on the whole run (every role, reflection and the test phase included, summed
    over resumes): a call that could pass it is never sent; the run stops cleanly and can resume."""
    workers: Annotated[int | None, RUN_OPTION] = Field(default=None, ge=1, le=64)
    """Concurrent rollouts; None = 4, or 1 with an embedded model."""
    seed: int = 0
    """GEPA's seed (minibatch sampling, candidate selection)."""
    train_limit: int | None = Field(default=None, gt=0)
    """Use at most this many TRAIN examples."""
    val_limit: int | None = Field(default=None, gt=0)
    """Use at most this many VAL examples."""
    test_limit: Annotated[int | None, RUN_OPTION] = Field(default=None, gt=0)
    """Use at most this many TEST examples for the final comparison."""
    minibatch: int = Field(default=3, ge=1)
    """GEPA reflection minibatch size."""
    proposals: int = Field(default=1, ge=1, le=8)
    """Proposals per GEPA iteration, each from the same parent on its own minibatch (gepa's ``SameParentSampling``);
    every one the acceptance criterion takes enters the pool. 1 = GEPA's sequential loop."""
    accept: AcceptName = "strict"
    """When a proposed instruction enters the pool: it must beat its parent on the minibatch
    (``strict``, GEPA's default) or may tie it (``equal``: GEPA's ``improvement_or_equal``). Ties
    still get a full val evaluation, and ``best`` moves only with ``rails.pick_best``'s margin; ``equal`` lets a
    weak (local) reviewer's run explore when small minibatches rarely show a strict gain."""
    proposer: ProposerName = "add"
    """How a proposal is written: ``add`` asks the reflection LM for one new rule as schema-constrained JSON,
    ``edit`` for one rule added, replaced or deleted (``optimize.edit_proposer``), ``rewrite`` for a whole new
    instruction (dspy's InstructionProposer). ``add`` by default: given the same reflections, the 1.5B's
    ``edit`` replaced seed rules with shorter or unrelated ones, ``add`` kept them (docs/design.md §7)."""
    max_chars: int = Field(default=4000, ge=200)
    """Hard cap on a proposed instruction's length (InstructionProposer max_chars)."""
    reflection_max_tokens: int = Field(default=16000, ge=1000)
    """Generous reflection max_tokens (a truncated proposal is adopted verbatim by gepa)."""
    evaluate_test: Annotated[bool, RUN_OPTION] = True
    """Compare seed and best on TEST at the end."""
    runs_dir: Path = Path("runs")
    """Where ``<timestamp>-optimize/`` is created."""
    resume: Path | None = None
    """Run directory to resume; its stored config wins except for the run options passed again."""

    @model_validator(mode="after")
    def _no_simulated_user(self) -> OptimizeConfig:
        refusal = simulated_user_refusal("optimize", self.dataset)
        if refusal is not None:
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _one_budget(self) -> OptimizeConfig:
        if self.budget is not None and self.max_metric_calls is not None:
            raise ValueError("give either budget or max_metric_calls, not both")
        return self

    @model_validator(mode="after")
    def _reflection_takes_the_proposer(self) -> OptimizeConfig:
        """The edit proposers ask the reflection model for schema-constrained JSON: refuse one that cannot give it."""
        try:
            check_model(self.reflection_spec, "reflection", json_schema=self.proposer != "rewrite")
        except ConfigError as exc:
            raise ConfigError(f"{exc}; or --proposer rewrite" if self.proposer != "rewrite" else str(exc)) from None
        return self

    @model_validator(mode="after")
    def _default_workers(self) -> OptimizeConfig:
        if self.workers is None:
            self.workers = default_workers(self.setup.base, self.setup.reviewer, self.reflection)
        return self

    @property
    def workload(self) -> Workload:
        """The dataset's kind of work (single calls or conversations), asked of the catalog here only."""
        return workload(self.dataset)

    @property
    def components(self) -> tuple[str, ...]:
        """What GEPA evolves: the reviewer predictors the mechanism calls, and the report note with ``--saag-informed``.

        Why the note: the informed reviewer follows the report it is shown, so how the report is framed
        is a lever beside its instructions (``agents.report_note.REPORT_NOTE``). Only for the edit proposers:
        dspy's rewrite proposer writes reviewer instructions, not a note.
        """
        components = self.setup.mechanism.components
        if self.setup.saag_informed and "review" in components and self.proposer != "rewrite":
            return (*components, REPORT_NOTE)
        return components

    @property
    def reviewer_spec(self) -> str:
        """The reviewer model (never None here: every mechanism GEPA accepts calls the reviewer)."""
        return str(self.setup.reviewer)

    @property
    def reflection_spec(self) -> str:
        """The reflection model actually used."""
        return self.reflection or self.reviewer_spec

    @property
    def budget_name(self) -> BudgetName | None:
        """``budget``, defaulting to ``light`` when no cap is given."""
        return self.budget or (None if self.max_metric_calls is not None else "light")


__all__ = ["GepaSetup", "OptimizeConfig"]
