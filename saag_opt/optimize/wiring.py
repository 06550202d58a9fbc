"""dspy.GEPA with the project's fixed choices, and the call that runs it (docs/design.md §7)."""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy
from dspy.teleprompt.gepa import InstructionProposer
from gepa.strategies.proposal_sampling import SameParentSampling

from saag_opt.choices import AcceptName, ProposerName
from saag_opt.errors import RunError
from saag_opt.events import EventSink
from saag_opt.optimize.acceptance import ReviewerAcceptance
from saag_opt.optimize.edit_proposer import EditMemory, EditProposer
from saag_opt.optimize.sampler import FailureFirstSampler

if TYPE_CHECKING:
    from saag_opt.optimize.rollouts import Work


@dataclass
class GepaSettings:
    """The dspy.GEPA knobs run_optimize sets (kept separate so tests and the bench reuse them)."""

    max_metric_calls: int
    log_dir: Path
    reflection_lm: dspy.LM
    minibatch: int = 3
    proposals: int = 1
    """Proposals per iteration from the same parent, each on its own minibatch (1 = GEPA's default loop)."""
    max_chars: int = 4000
    workers: int = 4
    seed: int = 0
    accept: AcceptName = "strict"
    stoppers: list[Any] = field(default_factory=list)
    callbacks: list[Any] = field(default_factory=list)
    quarantine: Any = None
    """Keeps the proposals the rails refuse (``acceptance.QuarantineKeeper``; the run's ArtifactWriter)."""
    proposer: ProposerName = "add"
    memory: EditMemory | None = None
    """Edits refused per parent (the edit proposer reads it, the acceptance criterion fills it); None = in memory."""
    sink: EventSink | None = None


ADDITIONAL_INSTRUCTIONS = (
    "The assistant is a REVIEWER of another agent's tool calls, not the agent itself. Write instructions for "
    "deciding whether tentative calls contain an error and for writing feedback that lets the agent fix them. "
    "Keep the instruction general: do not copy example-specific values, function names or expected answers "
    "into it. Rejecting a correct call is as harmful as approving a wrong one."
)


def build_proposer(settings: GepaSettings, memory: EditMemory) -> Any:
    """The instruction proposer ``settings.proposer`` names: one rule edit, or dspy's whole rewrite."""
    if settings.proposer in ("edit", "add"):
        return EditProposer(settings.reflection_lm, memory, add_only=settings.proposer == "add", sink=settings.sink)
    return InstructionProposer(additional_instructions=ADDITIONAL_INSTRUCTIONS, max_chars=settings.max_chars)


def build_gepa(work: Work, settings: GepaSettings) -> dspy.GEPA:
    """dspy.GEPA with the project's fixed choices (docs/design.md §7 says why each), on ``work``'s metric.

    Minibatches come from ``FailureFirstSampler`` (known failures in every minibatch), which also
    listens to gepa's evaluations as a callback; the rails read reflected items by ``work.rail_example``.
    """
    memory = settings.memory if settings.memory is not None else EditMemory()
    sampler = FailureFirstSampler(settings.minibatch, settings.seed, per_iteration=settings.proposals)
    several = {"sampling_strategy": SameParentSampling(settings.proposals)} if settings.proposals > 1 else {}
    gepa = dspy.GEPA(
        metric=work.metric,
        max_metric_calls=settings.max_metric_calls,
        reflection_minibatch_size=settings.minibatch,
        candidate_selection_strategy="pareto",
        reflection_lm=settings.reflection_lm,
        instruction_proposer=build_proposer(settings, memory),
        use_merge=False,
        num_threads=settings.workers,
        log_dir=str(settings.log_dir),
        track_stats=True,
        warn_on_score_mismatch=False,
        seed=settings.seed,
        gepa_kwargs={"use_cloudpickle": True, "frontier_type": "hybrid", "cache_evaluation": True,
                     "acceptance_criterion": ReviewerAcceptance(settings.accept, settings.quarantine, memory,
                                                                rail_example=work.rail_example),
                     "batch_sampler": sampler,
                     "stop_callbacks": list(settings.stoppers), "callbacks": [*settings.callbacks, sampler],
                     **several},
    )
    # gepa takes a minibatch size only with its own sampler (ours carries it); dspy reads the field only to
    # tell minibatch evaluations from full ones in its logging callbacks.
    gepa.reflection_minibatch_size = None
    return gepa


STATE_FILE = "gepa_state.bin"
"""gepa's checkpoint in ``log_dir``: a resume continues from it."""


def set_aside_unreadable_state(log_dir: Path) -> Path | None:
    """Move a checkpoint gepa could not load (damaged, or from an incompatible gepa) aside; return where.

    Why: gepa would fail inside ``compile`` with an unpickling traceback and the run could never be
    resumed. Without the checkpoint GEPA starts again from the seed, and the finished rollouts and
    reflections replay from the LM cache; the old file is kept for inspection.
    """
    path = log_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as handle:
            state = pickle.load(handle)  # noqa: S301 - our own run directory's checkpoint, as gepa loads it
        if isinstance(state, dict):
            return None
    except Exception:  # noqa: BLE001, S110 - any failure to load means gepa cannot resume from it either
        pass
    aside = path.with_name(f"{STATE_FILE}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    path.replace(aside)
    return aside


def compile_gepa(gepa: dspy.GEPA, student: dspy.Module, trainset: Sequence[dspy.Example],
                 valset: Sequence[dspy.Example]) -> Any:
    """Run GEPA (train for reflection, val for selection) and return ``detailed_results``.

    Raises:
        RunError: an empty split.
    """
    if not trainset or not valset:
        raise RunError(f"GEPA needs non-empty train and val splits (got {len(trainset)} train, {len(valset)} val)")
    program = gepa.compile(student, trainset=list(trainset), valset=list(valset))
    return program.detailed_results



__all__ = ["ADDITIONAL_INSTRUCTIONS", "STATE_FILE", "GepaSettings", "build_gepa", "build_proposer", "compile_gepa",
           "set_aside_unreadable_state"]
