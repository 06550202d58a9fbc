"""What a dataset spec asks the verbs to run: single calls, or conversations (on an environment or with a simulated user).

The kind of a spec is decided here, once (``workload``), and carried from then on: every verb reads
``Workload.kind`` (or one of its properties) instead of asking the catalog again. A new kind of work is
a new ``WorkloadKind`` and a branch in ``workload`` and ``Workload.load``, not a question in every room.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from saag_opt.data.catalog import is_multi_turn_dataset, is_tau2_dataset, load_dataset, load_episodes
from saag_opt.data.tau2 import with_trials

if TYPE_CHECKING:
    from saag_opt.episodes import Episode
    from saag_opt.model import Example


class WorkloadKind(str, Enum):
    """How one item of a dataset is played."""

    CALLS = "calls"
    """An example: one user request, one tool call (or an abstention) to review."""
    CONVERSATIONS = "conversations"
    """An entry: turns of steps on a tool environment (BFCL multi-turn), each step reviewed."""
    SIMULATED_USER = "simulated_user"
    """An entry whose user is an LM (tau2-bench): tau2's orchestrator plays it, tau2's evaluator judges."""


@dataclass(frozen=True)
class Workload:
    """A dataset spec with its kind resolved: what to load, what one item is called, how a run is named."""

    spec: str
    kind: WorkloadKind

    @property
    def conversations(self) -> bool:
        """Items are conversations (``Episode``), not single calls (``Example``)."""
        return self.kind is not WorkloadKind.CALLS

    @property
    def simulated_user(self) -> bool:
        """A user simulator plays the user (tau2), so a ``user`` model takes part."""
        return self.kind is WorkloadKind.SIMULATED_USER

    @property
    def unit(self) -> str:
        """What one item is called in messages and tables."""
        return "entries" if self.conversations else "examples"

    @property
    def evaluate_verb(self) -> str:
        """The verb an evaluate run of this workload records in ``run.json`` (and names its directory by)."""
        return "evaluate-multiturn" if self.conversations else "evaluate"

    def load(self, *, split: str | None = None, limit: int | None = None, skip: int = 0,
             trials: int = 1) -> list[Example] | list[Episode]:
        """The items, as the verbs load them: ``load_dataset`` or ``load_episodes`` (tau2: each task ``trials`` times).

        Raises:
            ConfigError, DatasetError: as the loader does.
        """
        if not self.conversations:
            return load_dataset(self.spec, split=split, limit=limit, skip=skip)
        episodes = load_episodes(self.spec, split=split, limit=limit, skip=skip)
        if self.simulated_user:
            episodes = with_trials(episodes, trials)
        return episodes


def workload(spec: str) -> Workload:
    """The workload a dataset spec names: the one place a spec's kind is asked."""
    if is_tau2_dataset(spec):
        return Workload(spec, WorkloadKind.SIMULATED_USER)
    if is_multi_turn_dataset(spec):
        return Workload(spec, WorkloadKind.CONVERSATIONS)
    return Workload(spec, WorkloadKind.CALLS)


__all__ = ["Workload", "WorkloadKind", "workload"]
