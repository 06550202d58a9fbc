"""What GEPA needs from a kind of work, and the one place a workload's kind picks it.

GEPA's loop (the student, the budget, acceptance, the sampler, artifacts, resume) is the same on
every dataset; a kind of work differs in five things only, and ``Work`` names them: how one item is
played under a candidate reviewer (``rollout``), how a rollout is scored and explained to the
reflection LM (``metric``, dspy's GEPA metric), how the rails read a reflected item
(``rail_example``), which rows the seed-vs-best compare writes (``record``), and what one rollout
asks, for the estimate (``rollout_size``). The sampler needs
only an item's ``id``, which every kind has.

The kinds live in modules named by the work they run: ``optimize.calls`` (an ``Example``, one
reviewed call) and ``optimize.conversations`` (an ``Episode``, one reviewed BFCL multi-turn
conversation); ``optimize.feedback`` holds what their feedback shares. ``work_for`` is the only
place that chooses between them, from ``data.workload.Workload.kind`` (asked of the catalog once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from saag_opt.data.workload import Workload, WorkloadKind
from saag_opt.errors import ConfigError
from saag_opt.optimize.calls import CALLS
from saag_opt.optimize.conversations import CONVERSATIONS

if TYPE_CHECKING:
    import dspy

    from saag_opt.agents.setup import Condition
    from saag_opt.evaluation.conversation_records import EpisodeRecord
    from saag_opt.evaluation.results import ExampleRecord
    from saag_opt.model import Example
    from saag_opt.optimize.budget import RolloutSize
    from saag_opt.optimize.program import RunFn


class Work(Protocol):
    """One kind of work as GEPA meets it (module docstring)."""

    @property
    def record(self) -> type[ExampleRecord] | type[EpisodeRecord]:
        """The rows the test phase's compare writes for this kind (``holdout`` copies them)."""
        ...

    def rollout(self, condition: Condition) -> RunFn:
        """``(item, reviewer) -> outcome`` on the opened set-up: one rollout with a candidate's reviewer."""
        ...

    def metric(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> dspy.Prediction:
        """The GEPA feedback metric (dspy's signature).

        Returns ``dspy.Prediction(score, feedback, objective_scores={help, no_harm}, outcome_class)``.
        """
        ...

    def rail_example(self, item: Any) -> Example:
        """A reflected item as the rails read it (``rails.quarantine_reason``'s examples)."""
        ...

    def rollout_size(self, items: Sequence[Any], reviews: float, revisions: float) -> RolloutSize:
        """What one rollout asks on average, given the mechanism's reviews and revisions per reviewed call."""
        ...


WORK: dict[WorkloadKind, Work] = {WorkloadKind.CALLS: CALLS, WorkloadKind.CONVERSATIONS: CONVERSATIONS}
"""The work each kind runs; a simulated user (tau2) has none (``OptimizeConfig`` refuses it first)."""


def work_for(workload: Workload) -> Work:
    """The work a workload's items are played, scored and read by.

    Raises:
        ConfigError: GEPA has no rollout for this kind (a simulated user).
    """
    work = WORK.get(workload.kind)
    if work is None:
        raise ConfigError(f"optimize cannot run {workload.spec!r}: GEPA has no rollout for {workload.kind.value} "
                          f"(supported: {', '.join(kind.value for kind in WORK)})")
    return work


__all__ = ["WORK", "Work", "work_for"]
