"""gepa's acceptance criterion for the reviewer: the rails first, then ``--accept`` strict/equal.

gepa 0.1.4 evaluates each proposal on its parent's minibatch and then asks
``acceptance_criterion.should_accept(proposal, state)``; a refused proposal never reaches val, the
pool or ``best``. ``ReviewerAcceptance``:

(a) refuses a quarantined text (``rails.quarantine_reason`` against the parent's text and the
    training examples the reflection read, i.e. the parent's minibatch) and hands it to
    its keeper so it stays in the lineage (``ArtifactWriter.quarantine``); the same text proposed
    again, after a resume too, is refused without a second copy;
(b) on a minibatch tie (``--accept equal``) refuses a candidate whose verdicts collapsed or that broke
    more right calls than its parent (``rails.minibatch_collapse``), read from the outcome class the
    feedback metric gives every rollout;
(c) otherwise accepts as gepa's ``strict_improvement`` / ``improvement_or_equal`` would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from saag_opt.choices import AcceptName
from saag_opt.model import Example
from saag_opt.optimize import rails
from saag_opt.optimize.calls import CALLS


class QuarantineKeeper(Protocol):
    """Where quarantined proposals are kept (``callbacks.ArtifactWriter``)."""

    def quarantine(self, candidate: Mapping[str, str], parent_idx: int | None, reason: str, iteration: int) -> None:
        """Keep a refused proposal in the lineage."""

    def quarantined_reason(self, candidate: Mapping[str, str]) -> str | None:
        """Why this exact text was quarantined before in the run (a resumed run included), or None."""


class RefusalMemory(Protocol):
    """Where refused proposals are remembered per parent text (``edit_proposer.EditMemory``)."""

    def refuse(self, component: str, parent: str, child: str, reason: str) -> None:
        """Remember that ``child``, proposed from ``parent``, was refused."""


class ReviewerAcceptance:
    """A gepa ``AcceptanceCriterion`` (``should_accept`` + ``reject_reason``); see the module docstring."""

    def __init__(self, accept: AcceptName = "strict", keeper: QuarantineKeeper | None = None,
                 memory: RefusalMemory | None = None, *,
                 rail_example: Callable[[Any], Example] = CALLS.rail_example) -> None:
        self.accept = accept
        self.keeper = keeper
        self.memory = memory
        self.rail_example = rail_example
        """How the rails read a reflected item: the run's ``rollouts.Work.rail_example``."""
        self._reasons: dict[int, str] = {}
        self._quarantined: dict[tuple[tuple[str, str], ...], str] = {}

    def should_accept(self, proposal: Any, state: Any) -> bool:
        """True when the proposal may enter GEPA's pool (gepa asks once per proposal)."""
        reason = self._refusal(proposal, state)
        if reason is None:
            return True
        self._reasons[id(proposal)] = reason
        if self.memory is not None:  # the edit proposer will not propose it again from this parent
            parent = _parent_text(state, (proposal.parent_program_ids or [None])[0])
            for component, text in dict(proposal.candidate).items():
                if component in parent and text != parent[component]:
                    self.memory.refuse(component, parent[component], text, reason)
        return False

    def reject_reason(self, proposal: Any, state: Any) -> str:
        """The line gepa logs (and passes to ``on_candidate_rejected``) for a refused proposal."""
        return self._reasons.pop(id(proposal), None) or _score_reason(proposal)

    def _refusal(self, proposal: Any, state: Any) -> str | None:
        candidate = dict(proposal.candidate)
        key = tuple(sorted(candidate.items()))
        earlier = self._quarantined.get(key) or (self.keeper.quarantined_reason(candidate) if self.keeper else None)
        if earlier is not None:
            return f"quarantined earlier in this run: {earlier}"
        if candidate in (getattr(state, "program_candidates", None) or []):
            return "already in the pool (the same text was proposed and accepted before)"
        parent_idx = (proposal.parent_program_ids or [None])[0]
        parent = _parent_text(state, parent_idx)
        examples = _reflected_examples(proposal.eval_before, self.rail_example)
        reason = rails.quarantine_reason(candidate, parent, examples)
        if reason is not None:
            self._quarantined[key] = reason
            if self.keeper is not None:
                self.keeper.quarantine(candidate, parent_idx, reason, int(getattr(state, "i", -1)) + 1)
            return f"quarantined: {reason}"
        before = sum(proposal.subsample_scores_before or [])
        after = sum(proposal.subsample_scores_after or [])
        if after > before:
            return None
        if after < before or self.accept == "strict":
            return _score_reason(proposal)
        collapse = rails.minibatch_collapse(outcome_classes(proposal.eval_before),
                                            outcome_classes(proposal.eval_after))
        if collapse is not None:
            return f"ties its parent on the minibatch ({after:g}) but {collapse}"
        return None


def _score_reason(proposal: Any) -> str:
    before = sum(proposal.subsample_scores_before or [])
    after = sum(proposal.subsample_scores_after or [])
    return f"New subsample score {after} not better than old score {before}"


def _parent_text(state: Any, parent_idx: int | None) -> dict[str, str]:
    candidates = getattr(state, "program_candidates", None) or []
    if parent_idx is None or not 0 <= parent_idx < len(candidates):
        return {}
    return dict(candidates[parent_idx])


def _reflected_examples(evaluation: Any, rail_example: Callable[[Any], Example]) -> list[Example]:
    """The items of the minibatch the reflection read (the parent's traced evaluation), as the rails read them.

    ``rail_example`` is the work's: an example as it is, a conversation's entry as one example
    (``conversations.rail_example``: its user turns, its tools, its gold calls), so the rails check a
    proposal against what the reflection LM read.
    """
    found = []
    for trajectory in getattr(evaluation, "trajectories", None) or ():
        wrapped: Any = trajectory.get("example") if isinstance(trajectory, dict) else None
        item = wrapped.get("item") if wrapped is not None and hasattr(wrapped, "get") else None
        if item is not None:
            found.append(rail_example(item))
    return found


def outcome_classes(evaluation: Any) -> list[str | None]:
    """Per minibatch example, the outcome class the feedback metric gave (None = unknown or failed).

    Read from the traced rollouts (``trajectories[i]["score"]`` is the work's metric's prediction);
    without traces only harm is known, from the ``no_harm`` objective.
    """
    if evaluation is None:
        return []
    n = len(getattr(evaluation, "scores", None) or ())
    classes: list[str | None] = [None] * n
    trajectories: Sequence[Any] = getattr(evaluation, "trajectories", None) or ()
    if trajectories:
        for position, trajectory in enumerate(trajectories):
            if not isinstance(trajectory, dict):
                continue
            index = trajectory.get("example_ind", position)
            score: Any = trajectory.get("score")
            cls = score.get("outcome_class") if score is not None and hasattr(score, "get") else None
            if isinstance(index, int) and 0 <= index < n and isinstance(cls, str) and cls != "error":
                classes[index] = cls
        return classes
    for index, objectives in enumerate(getattr(evaluation, "objective_scores", None) or ()):
        if index < n and isinstance(objectives, dict) and objectives.get("no_harm") == 0.0:
            classes[index] = "broken"
    return classes


__all__ = ["QuarantineKeeper", "RefusalMemory", "ReviewerAcceptance", "outcome_classes"]
