"""``OptimizeConfig``: everything ``saag-opt optimize`` needs, validated; stored in ``run.json`` for resume."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from saag_opt.lm.retry import RequestTimeout
from saag_opt.optimize.budget import BudgetName
from saag_opt.saag.modes import INTERVENTION_GROUNDING, ModeName

RESUMABLE_OVERRIDES = frozenset({"max_metric_calls", "budget", "max_cost", "workers", "evaluate_test",
                                 "test_limit"})
"""Fields a resume may change (budgets are cumulative); everything else comes from run.json."""


class OptimizeConfig(BaseModel):
    """Everything ``saag-opt optimize`` needs; stored in ``run.json`` (no secrets) for resume."""

    model_config = ConfigDict(extra="forbid")

    base: str = "gpt-4o"
    """Base agent model spec (frozen during optimization)."""
    reviewer: str = "gpt-5-mini"
    """Reviewer model spec (its instructions evolve)."""
    reflection: str | None = None
    """Reflection LM spec; None = same as the reviewer."""
    prompt: str = "reviewer@v2"
    """Seed prompt reference."""
    mechanism: str = "r2"
    """Review mechanism the reviewer is optimized for; it must call the reviewer (r2, s5, gate+r2, ...)."""
    saag_informed: bool = False
    """Experimental: the reviewer also sees the gold-free SAAG report of the call it reviews, in GEPA's
    rollouts and on TEST, built as ``evaluate --saag-informed`` builds it (``agents.make_reviewer``)."""
    grounding: ModeName = INTERVENTION_GROUNDING
    """Stage 3 of the gold-free cascade: what ``saag_informed`` shows and when ``gate+`` lets a call pass."""
    dataset: str = "shipped:bfcl"
    """Dataset spec (see ``saag_opt.data.load_dataset``)."""
    budget: BudgetName | None = None
    """GEPA auto budget; exclusive with ``max_metric_calls``; both None = ``light``."""
    max_metric_calls: int | None = Field(default=None, gt=0)
    """Cumulative cap on program rollouts (GEPA metric calls)."""
    max_cost: float | None = Field(default=None, gt=0)
    """Hard cap in USD on the whole run (every role, reflection and the test phase included, summed
    over resumes): a call that could pass it is never sent; the run stops cleanly and can resume."""
    on_unusable: Literal["approve", "reject"] = "approve"
    """What an unreadable review (after its retry) means, in rollouts and on test."""
    request_timeout: RequestTimeout = None
    """Seconds one LM request may take before it is retried, every role and the test phase (None = the
    HTTP client's bound; ``lm.retry``)."""
    workers: int | None = Field(default=None, ge=1, le=64)
    """Concurrent rollouts; None = 4, or 1 with an embedded model."""
    seed: int = 0
    """GEPA's seed (minibatch sampling, candidate selection)."""
    train_limit: int | None = Field(default=None, gt=0)
    """Use at most this many TRAIN examples."""
    val_limit: int | None = Field(default=None, gt=0)
    """Use at most this many VAL examples."""
    test_limit: int | None = Field(default=None, gt=0)
    """Use at most this many TEST examples for the final comparison."""
    minibatch: int = Field(default=3, ge=1)
    """GEPA reflection minibatch size."""
    accept: Literal["strict", "equal"] = "strict"
    """When a proposed instruction enters the pool: it must beat its parent on the minibatch
    (``strict``, GEPA's default) or may tie it (``equal``: GEPA's ``improvement_or_equal``). Ties
    still get a full val evaluation, and ``best`` moves only with ``rails.pick_best``'s margin; ``equal`` lets a
    weak (local) reviewer's run explore when small minibatches rarely show a strict gain."""
    max_chars: int = Field(default=4000, ge=200)
    """Hard cap on a proposed instruction's length (InstructionProposer max_chars)."""
    reflection_max_tokens: int = Field(default=16000, ge=1000)
    """Generous reflection max_tokens (a truncated proposal is adopted verbatim by gepa)."""
    evaluate_test: bool = True
    """Compare seed and best on TEST at the end."""
    runs_dir: str = "runs"
    """Where ``<timestamp>-optimize/`` is created."""
    prompts_dir: str | None = None
    """Prompt store root (None = ``$SAAG_OPT_PROMPTS``, else the user data dir; see ``saag_opt.paths``)."""
    resume: str | None = None
    """Run directory to resume; its stored config wins except for the fields in ``overrides``."""

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, value: str) -> str:
        from saag_opt.agents.mechanisms import mechanism_names, parse_mechanism

        if not parse_mechanism(value).components:
            raise ValueError(f"{value!r} never calls the LLM reviewer, so there is no reviewer prompt to optimize; "
                             f"use one of {', '.join(mechanism_names(reviewer_only=True))} (e.g. r2)")
        return value

    @model_validator(mode="after")
    def _one_budget(self) -> OptimizeConfig:
        if self.budget is not None and self.max_metric_calls is not None:
            raise ValueError("give either budget or max_metric_calls, not both")
        return self

    @model_validator(mode="after")
    def _default_workers(self) -> OptimizeConfig:
        if self.workers is None:
            from saag_opt.lm import default_workers

            self.workers = default_workers(self.base, self.reviewer, self.reflection)
        return self

    @property
    def reflection_spec(self) -> str:
        """The reflection model actually used."""
        return self.reflection or self.reviewer

    @property
    def budget_name(self) -> BudgetName | None:
        """``budget``, defaulting to ``light`` when no cap is given."""
        return self.budget or (None if self.max_metric_calls is not None else "light")



__all__ = ["RESUMABLE_OVERRIDES", "OptimizeConfig"]
