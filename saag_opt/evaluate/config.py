"""``EvaluateConfig``: one review set-up plus how an evaluate run goes; and what ``--resume`` continues with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, field_validator, model_validator

from saag_opt.agents.setup import SetupConfig
from saag_opt.choices import UserReminder
from saag_opt.data.workload import Workload, workload
from saag_opt.lm import default_workers, parse_model_spec
from saag_opt.resuming import RUN_OPTION, refuse_changes
from saag_opt.runfiles import resume_header


class EvaluateConfig(SetupConfig):
    """Everything ``saag-opt evaluate`` needs: ``setup`` (what is measured) and how to run it.

    Stored (without secrets) in ``run.json``, flat (``SetupConfig``); the fields marked
    ``RUN_OPTION`` are the ones ``--resume`` may change.
    """

    model_config = ConfigDict(extra="forbid")
    OMITTED_AT_DEFAULT = frozenset({"user_model", "user_reminder", "trials", "max_steps", "batch", "skip"})
    FLAGS: ClassVar[Mapping[str, str]] = {"trials": "--tau2-trials"}
    """Fields whose command-line flag is not the field's name (``resuming.flag``)."""

    dataset: str = "shipped:bfcl"
    """Dataset spec (see ``saag-opt datasets list``)."""
    split: str | None = None
    """Keep only this split (train | val | test)."""
    limit: int | None = Field(default=None, ge=1)
    """Keep N examples (after the split filter), spread round-robin over the categories."""
    skip: int = Field(default=0, ge=0)
    """Leave out the first N of that round-robin order before ``limit`` (fresh examples after a run of
    ``limit=N`` was looked at; ``catalog.stratified_slice``)."""
    workers: Annotated[int | None, RUN_OPTION] = Field(default=None, ge=1, le=64)
    """Examples evaluated concurrently (threads); None = 4, or 1 with an embedded model. No effect under
    ``batch`` (see there)."""
    seed: int = 0
    """Seed for the bootstrap CI (LM calls are deterministic through the cache)."""
    runs_dir: Path = Path("runs")
    """Where ``<timestamp>-evaluate/`` is created."""
    cache_dir: Path | None = None
    """Base-prediction cache; default ``<saag-opt cache>/base-predictions``."""
    fail_on_error: Annotated[float | None, RUN_OPTION] = Field(default=None, ge=0.0, le=1.0)
    """Mark the run failed when more than this share of examples errored."""
    user_model: str | None = None
    """tau2 datasets: the model of tau2's user simulator (a model spec); None = the base model."""
    user_reminder: UserReminder = "auto"
    """tau2 datasets: end the user simulator's prompt with a reminder that it is the customer
    (``agents.tau2.user_reminder_on``; ``auto``: for the embedded model only)."""
    max_steps: int | None = Field(default=None, ge=2, le=1000)
    """tau2 datasets: tau2's ``max_steps`` (agent, user and tool messages) before a run ends unfinished
    (reward 0); None = tau2's 100. A weak local pair that never finishes a task spends all of them."""
    trials: int = Field(default=1, ge=1, le=32)
    """tau2 datasets: runs per task (tau2's ``num_trials``; trial k gets tau2's k-th seed), for pass^k."""
    max_cost: Annotated[float | None, RUN_OPTION] = Field(default=None, gt=0.0)
    """Hard cap in USD over every LM call of the run: a call that could pass it is not sent, the run
    stops cleanly with the finished examples kept (``summary.stopped``)."""
    batch: Annotated[bool, RUN_OPTION] = False
    """Send each round of independent LM calls as one OpenAI Batch API job (half price, slower;
    ``lm.batch.rounds``). Every example is then in flight at once (up to ``BATCH_WORKERS``), since each only
    waits on its batch; the replies are the same as without it."""

    @field_validator("user_model")
    @classmethod
    def _user_model(cls, value: str | None) -> str | None:
        if value is not None:
            parse_model_spec(value)
        return value

    @property
    def workload(self) -> Workload:
        """The dataset's kind of work, resolved once here (``data.workload``)."""
        return workload(self.dataset)

    @model_validator(mode="after")
    def _tau2_options_need_tau2(self) -> EvaluateConfig:
        if self.workload.simulated_user:
            return self
        if self.user_model is not None:
            raise ValueError(f"user_model is the model of tau2's user simulator; dataset {self.dataset!r} has its "
                             "user turns in the data (use a tau2:<domain> dataset, or leave --user-model out)")
        if self.user_reminder != "auto":
            raise ValueError(f"user_reminder is for tau2's user simulator; dataset {self.dataset!r} has no "
                             "simulated user")
        if self.max_steps is not None:
            raise ValueError(f"max_steps is tau2's step limit; dataset {self.dataset!r} is not a tau2 dataset")
        if self.trials > 1:
            raise ValueError(f"trials > 1 (--tau2-trials) is for tau2 datasets (pass^k over a simulated user's runs); dataset "
                             f"{self.dataset!r} runs each entry once")
        return self

    @model_validator(mode="after")
    def _default_workers(self) -> EvaluateConfig:
        if self.workers is None:
            self.workers = default_workers(self.setup.base, self.setup.reviewer)
        return self


EVALUATE_VERBS = ("evaluate", "evaluate-multiturn")
"""The verbs an evaluate run records: single calls, conversations (``Workload.evaluate_verb``)."""


def resume_config(run_dir: Path, passed: Mapping[str, Any] | None = None) -> EvaluateConfig:
    """The configuration an evaluate run of either kind continues with: its ``run.json``'s, plus ``passed``'s run options.

    ``passed``: options the user gave with ``--resume`` (option name -> value); any that is not a
    run option must repeat the recorded value (``resuming.refuse_changes``).

    Raises:
        RunError: ``run_dir`` is not an evaluate run, or its ``run.json`` cannot be read.
        ConfigError: ``passed`` contradicts the recorded configuration (one line naming the options).
    """
    header = resume_header(run_dir, *EVALUATE_VERBS)
    return refuse_changes(EvaluateConfig.model_validate(header.config), passed or {}, where=f"--resume {run_dir}")


__all__ = ["EVALUATE_VERBS", "EvaluateConfig", "resume_config"]
