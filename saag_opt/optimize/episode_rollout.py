"""One GEPA rollout on a conversation: a BFCL multi-turn entry played with a candidate reviewer, judged by BFCL.

A single-call rollout is ``Condition.run`` on one example. Here it is the reviewed conversation loop
``evaluate`` runs (``evaluation.episode_runner.run_condition`` on ``play_episode``): every step
proposed by the base agent, reviewed by the set-up's mechanism with the candidate's reviewer,
executed on a fresh environment, and the transcript judged by the environment's ``check`` (BFCL's
own checkers). The base run (every step through ``none``) does not depend on the candidate, so it
is played once per entry and process and kept (its proposals come from the base-prediction cache
anyway, so a resumed process replays it for free). Both runs are ``EpisodeRecord``s, the rows
evaluate writes: what the metric scores (valid = 1) and what the feedback describes.

Which reviewer call the reflection LM reads: dspy's GEPA adapter shows the inputs of one traced
call of the predictor, picked at random among the rollout's, and a conversation reviews every step.
The rollout traces into a list of its own (``ReviewerProgram.forward``); ``StepTracer`` notes which
entries each step's review added, ``focus_step`` names the step the feedback is about, and
``forward`` hands on only that step's entries, so the inputs the reflection LM is shown and the
feedback it reads are about the same step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import dspy

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.conversation import step_position
from saag_opt.agents.episode import MAXIMUM_STEP_LIMIT
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.mechanisms.no_review import NoReview
from saag_opt.agents.reviewer import Reviewer
from saag_opt.agents.setup import Condition
from saag_opt.episodes import Environment, Episode, open_environment
from saag_opt.evaluate.conversation_loop import BASE, RunParts, play_episode, run_condition
from saag_opt.evaluation.conversation_records import EpisodeRecord, StepRecord
from saag_opt.model import Example

Span = tuple[int, int, int, int]
"""(turn, step, first trace entry, end): the dspy trace entries one step's review added."""


@dataclass(frozen=True)
class EpisodeRollout:
    """Both runs of one entry (base, and reviewed with the candidate) and where each step's review is traced.

    Picklable: gepa's evaluation cache keeps rollouts in its checkpoint.
    """

    base: EpisodeRecord
    reviewed: EpisodeRecord
    spans: tuple[Span, ...] = ()

    @property
    def error(self) -> str | None:
        """Why the rollout cannot be scored (an LM call failed after its retries, the environment failed)."""
        if self.base.error:
            return f"the base run failed: {self.base.error}"
        return f"the reviewed run failed: {self.reviewed.error}" if self.reviewed.error else None

    @property
    def reviewer_unusable(self) -> int:
        """Reviewer replies of the reviewed run that stayed unreadable (``RolloutContext`` counts them)."""
        return self.reviewed.reviewer_unusable

    @property
    def focus(self) -> tuple[int, int] | None:
        """(turn, step) the feedback is about (``focus_step``)."""
        return focus_step(self.reviewed)

    @property
    def trace_span(self) -> tuple[int, int] | None:
        """The dspy trace entries of the focus step's review (None: not traced, or no review there)."""
        focus = self.focus
        for turn, step, start, end in self.spans:
            if (turn, step) == focus and end > start:
                return start, end
        return None


def step_objected(step: StepRecord) -> bool:
    """Did the review object at this step (``feedback.view_outcome``'s rule, per step of a conversation)?

    A rejection (or a SAAG failure, or an unreadable reply the policy turned into a revision), a
    candidate chosen over the proposal (s/g), or a guard that revised or withheld the calls.
    """
    if any(r.verdict in ("reject", "saag_fail") or (r.verdict == "reviewer_failed" and r.revised is not None)
           for r in step.rounds):
        return True
    if step.candidates:
        return step.final.calls != step.proposed.calls
    return step.withheld or (step.ruling is not None and not step.ruling.startswith("allow"))


def objected(record: EpisodeRecord) -> bool:
    """The review objected at some step of the run."""
    return any(step_objected(s) for t in record.turns for s in t.steps)


def focus_step(record: EpisodeRecord) -> tuple[int, int] | None:
    """The reviewed step the feedback is about; None when the reviewer saw no step.

    In the failing turn (else anywhere): the first step the review objected to, else the first that
    proposed calls, else the first reviewed one.
    """
    reviewed = [s for t in record.turns for s in t.steps if s.reviewer_calls > 0]
    failed = record.judgement.failed_turn if record.judgement is not None and not record.correct else None
    pools = ([s for s in reviewed if s.turn == failed], reviewed) if failed is not None else (reviewed,)
    for pool in pools:
        for pick in ([s for s in pool if step_objected(s)], [s for s in pool if s.proposed.calls], pool):
            if pick:
                return pick[0].turn, pick[0].index
    return None


class StepTracer:
    """The set-up's mechanism, noting the dspy trace entries each step's review adds (module docstring)."""

    def __init__(self, mechanism: Mechanism) -> None:
        self.mechanism = mechanism
        self.spans: list[Span] = []

    @property
    def spec(self) -> str:
        """The wrapped mechanism's spec (records name the condition by it)."""
        return self.mechanism.spec

    @property
    def components(self) -> tuple[str, ...]:
        """The wrapped mechanism's reviewer predictors."""
        return self.mechanism.components

    @property
    def needs_reviewer(self) -> bool:
        """As the wrapped mechanism."""
        return self.mechanism.needs_reviewer

    @property
    def experimental(self) -> bool:
        """As the wrapped mechanism."""
        return self.mechanism.experimental

    @property
    def gated(self) -> bool:
        """As the wrapped mechanism."""
        return self.mechanism.gated

    @property
    def candidates(self) -> int:
        """As the wrapped mechanism."""
        return self.mechanism.candidates

    def calls_per_example(self, reject_rate: float = 0.5) -> tuple[float, float]:
        """As the wrapped mechanism."""
        return self.mechanism.calls_per_example(reject_rate)

    def run(self, example: Example, agent: BaseAgent, reviewer: Reviewer | None, *,
            ctx: MechanismContext) -> MechanismOutcome:
        """The wrapped mechanism on one step; its trace entries noted by the step's (turn, step)."""
        trace = dspy.settings.trace
        start = len(trace) if trace is not None else 0
        try:
            return self.mechanism.run(example, agent, reviewer, ctx=ctx)
        finally:
            if trace is not None:
                _, turn, step = step_position(example.id)
                self.spans.append((turn, step, start, len(trace)))


class EpisodeRollouts:
    """The ``RunFn`` of conversations: ``(episode, reviewer) -> EpisodeRollout`` (module docstring).

    Called from GEPA's evaluation threads: each rollout plays on its own environments, and the base
    runs are kept under a lock (two threads racing on one entry play the same cached run).
    """

    def __init__(self, condition: Condition, *, environment: Callable[[str], Environment] = open_environment,
                 max_steps: int = MAXIMUM_STEP_LIMIT) -> None:
        self._parts = RunParts(condition.agent, condition.reviewer, condition.mechanism, condition.ctx,
                               condition.reviewer_lm, "gepa", max_steps, environment, play_episode)
        self._none = NoReview()
        self._base: dict[str, EpisodeRecord] = {}
        self._lock = threading.Lock()

    def __call__(self, episode: Any, reviewer: Any) -> EpisodeRollout:
        """Play ``episode`` reviewed by ``reviewer`` (and, once, without review).

        Raises:
            TypeError: ``episode`` is not an ``Episode``.
            CostCapReached, ModelUnavailableError, ConfigError: systemic (``run_condition``).
        """
        if not isinstance(episode, Episode):
            raise TypeError(f"a conversation rollout needs an Episode, got {type(episode).__name__}")
        base = self.base(episode)
        tracer = StepTracer(self._parts.mechanism)
        reviewed = run_condition(replace(self._parts, reviewer=reviewer), episode, tracer, tracer.spec)
        return EpisodeRollout(base, reviewed, tuple(tracer.spans))

    def base(self, episode: Episode) -> EpisodeRecord:
        """The entry's run without review, played once (a failed one is played again next time)."""
        with self._lock:
            kept = self._base.get(episode.id)
        if kept is not None:
            return kept
        record = run_condition(self._parts, episode, self._none, BASE)
        if record.error is None:
            with self._lock:
                record = self._base.setdefault(episode.id, record)
        return record


__all__ = ["EpisodeRollout", "EpisodeRollouts", "StepTracer", "focus_step", "objected", "step_objected"]
