"""The GEPA student: the reviewer module plus a shared, never-copied rollout context.

Only reviewer predictors are GEPA components. The base agent, the mechanism, LM clients and the
base-output cache live in ``RolloutContext``, referenced (not owned) by the student, so:

* ``named_predictors()`` never shows the base agent (it is frozen; docs/design.md §5);
* ``DspyAdapter.build_program`` -> ``Module.deepcopy`` -> ``copy.deepcopy`` copies signatures only:
  ``ReviewerProgram.__deepcopy__`` seeds the memo with every LM and the context so each candidate
  program shares the same HTTP clients, caches and ledger instead of cloning them;
* the base agent's first answer comes from the evaluation cache, so a rollout pays only for the
  review loop.

The student also narrows ``named_predictors()`` to the predictors its mechanism calls
(``Mechanism.components``): a component that is never called has no trace, and gepa's round-robin
selector would waste an iteration on it.

An item is a saag ``Example`` (one call, ``optimize.calls``) or an ``Episode`` (a BFCL multi-turn
entry, played by ``optimize.conversations``). A conversation reviews every step, so its rollout names the traced reviewer
calls of the step its feedback is about (``trace_span``, indices into the rollout's own trace) and
``forward`` hands only those on to dspy's trace: the reviewer inputs the reflection LM is shown are
that step's.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dspy

from saag_opt.episodes import Episode
from saag_opt.errors import ConfigError, CostCapReached, ModelUnavailableError
from saag_opt.model import Example

log = logging.getLogger(__name__)

RunFn = Callable[[Any, Any], Any]
"""``(item, reviewer) -> outcome``: one rollout with a given reviewer module (a ``MechanismOutcome`` for
an ``Example``, a ``conversations.EpisodeRollout`` for an ``Episode``; ``rollouts.Work.rollout``)."""


class FailedRollout:
    """The outcome of a rollout that raised (an LM call still failing after its retries, a fault in one example).

    Why an outcome, not the exception: the adapter scores a raised rollout ``failure_score`` with no
    objectives, so gepa's help/no_harm means would be over fewer examples than its val score and the
    candidates' counts (``optimize.candidates``) would not add up. The metrics score this 0 with the
    reason as feedback and objectives that count it neither fixed nor broken.
    """

    rounds: tuple[()] = ()
    base = None
    final = None

    def __init__(self, error: str) -> None:
        self.error = error


class RolloutContext:
    """Heavy shared state for rollouts: never deep-copied, never pickled into gepa's state.

    ``run`` is called concurrently from GEPA's evaluation threads. A systemic fault (missing key,
    unreachable server) is remembered in ``fatal`` so the run stops at the next iteration boundary
    instead of scoring every later rollout 0.
    """

    def __init__(self, run: RunFn, *, label: str = "") -> None:
        self._run = run
        self.label = label
        self.fatal: BaseException | None = None
        self.rollouts = 0
        self.unusable_replies = 0
        """Reviewer replies that stayed unreadable after their retry, over every rollout."""
        self.rollouts_with_unusable = 0
        """Rollouts with at least one such reply (GEPA's feedback calls them reviewer errors)."""
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> RolloutContext:
        return self

    def __copy__(self) -> RolloutContext:
        return self

    def __reduce__(self) -> Any:
        raise TypeError("RolloutContext holds live LM clients and is not picklable; it is rebuilt on resume")

    def run(self, example: Any, reviewer: Any) -> Any:
        """One rollout with ``reviewer``.

        A systemic fault is recorded and re-raised, a refused call under the spend cap and a bad
        configuration are re-raised; any other fault of this one example is a ``FailedRollout``.
        """
        with self._lock:
            self.rollouts += 1
        try:
            outcome = self._run(example, reviewer)
        except ModelUnavailableError as exc:
            with self._lock:
                self.fatal = self.fatal or exc
            raise
        except (CostCapReached, ConfigError):
            raise
        except Exception as exc:  # noqa: BLE001 - one example's fault; logged with its traceback
            log.warning("%s: a rollout failed", self.label or "GEPA", exc_info=True)
            return FailedRollout(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        unusable = int(getattr(outcome, "reviewer_unusable", 0) or 0)
        if unusable:
            with self._lock:
                self.unusable_replies += unusable
                self.rollouts_with_unusable += 1
        return outcome

    def counts(self) -> dict[str, int]:
        """Rollouts run and the unreadable reviewer replies among them (``optimize.unusable`` persists them)."""
        with self._lock:
            return {"rollouts": self.rollouts, "reviewer_unusable": self.unusable_replies,
                    "rollouts_with_unusable": self.rollouts_with_unusable}

    def restore(self, counts: dict[str, Any]) -> None:
        """Add an earlier attempt's ``counts()`` (a resumed run reports the whole run)."""
        with self._lock:
            self.rollouts += int(counts.get("rollouts") or 0)
            self.unusable_replies += int(counts.get("reviewer_unusable") or 0)
            self.rollouts_with_unusable += int(counts.get("rollouts_with_unusable") or 0)


class ReviewerProgram(dspy.Module):
    """dspy.Module whose only parameters are the reviewer's predictors used by the mechanism.

    Call it as ``program(item=example)``; it returns ``dspy.Prediction(outcome, calls)`` where
    ``outcome`` is the mechanism's ``MechanismOutcome`` and ``calls`` the final calls as dicts.
    """

    def __init__(self, reviewer: dspy.Module, context: RolloutContext, components: tuple[str, ...]) -> None:
        super().__init__()
        self.reviewer = reviewer
        self.context = context
        self.components = tuple(components)
        if not self.components:
            raise ConfigError("the mechanism never calls the reviewer, so GEPA has no reviewer predictor to evolve")
        missing = [c for c in self.components if c not in dict(self._all_predictors())]
        if missing:
            have = ", ".join(n for n, _ in self._all_predictors())
            raise ConfigError(f"mechanism needs reviewer predictor(s) {missing}; the reviewer has: {have}")

    def _all_predictors(self) -> list[tuple[str, Any]]:
        return [(n.removeprefix("reviewer."), p) for n, p in super().named_predictors()]

    def named_predictors(self) -> list[tuple[str, Any]]:
        """Only the components the mechanism calls, keyed ``reviewer.<name>`` (GEPA's candidate keys)."""
        return [(f"reviewer.{n}", p) for n, p in self._all_predictors() if n in self.components]

    def instructions(self) -> dict[str, str]:
        """Current instruction of every reviewer predictor, keyed by bare predictor name."""
        return {n: p.signature.instructions for n, p in self._all_predictors()}

    def forward(self, item: Any) -> dspy.Prediction:
        """Run the mechanism with this program's reviewer; its traced calls join the caller's trace.

        The rollout traces into a list of its own (the caller's may be dspy's global one, shared by
        evaluation threads); a conversation's rollout then hands on only its ``trace_span``.
        """
        outer = dspy.settings.trace
        with dspy.context(trace=[]):
            outcome = self.context.run(item, self.reviewer)
            mine = list(dspy.settings.trace)
        span = getattr(outcome, "trace_span", None)
        if outer is not None:
            outer.extend(mine[span[0]:span[1]] if span is not None else mine)
        final = getattr(outcome, "final", None)
        calls = [c.to_dict() for c in getattr(final, "calls", ()) or ()]
        return dspy.Prediction(outcome=outcome, calls=calls)

    def __deepcopy__(self, memo: dict[int, Any]) -> ReviewerProgram:
        """Copy signatures and demos; share LMs and the context (see the module docstring)."""
        for shared in _shared_objects(self):
            memo[id(shared)] = shared
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        return new


def _shared_objects(program: ReviewerProgram) -> Iterator[Any]:
    """The context plus every LM client or lm/agents-layer object reachable from the reviewer."""
    yield program.context
    seen: set[int] = set()
    stack: list[Any] = [program.reviewer]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dspy.BaseLM) or _is_heavy(obj):
            yield obj
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, dspy.Module):
            stack.extend(vars(obj).values())


def _is_heavy(value: Any) -> bool:
    """Objects never cloned per candidate: our lm/agents layers, HTTP clients, locks."""
    module = type(value).__module__ or ""
    return module.startswith(("saag_opt.lm", "saag_opt.agents.base", "httpx", "openai", "litellm", "_thread",
                              "threading"))


def to_dspy_examples(examples: Sequence[Example | Episode]) -> list[dspy.Example]:
    """Wrap saag Examples (or Episodes) for dspy: the only input is ``item``; gold stays inside, read by the metric."""
    return [dspy.Example(item=ex).with_inputs("item") for ex in examples]


__all__ = ["FailedRollout", "ReviewerProgram", "RolloutContext", "to_dspy_examples"]
