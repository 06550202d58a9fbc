"""The ``Mechanism`` contract.

One outcome per example, inputs untouched, reviewer failure kept as data, gold never read, facts
consistent with behaviour.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from saag_opt.agents.mechanisms import Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.reviewer import Grade, Verdict
from saag_opt.errors import ConfigError
from saag_opt.model import Example, Prediction


class GoldRead(BaseException):
    """Raised when a mechanism touches the gold (a ``BaseException`` so ``except Exception`` cannot hide it)."""


class _PoisonedGold:
    """Stands in for ``Example.gold``: any use raises ``GoldRead``."""

    def _read(self, *_: Any, **__: Any) -> Any:
        raise GoldRead("the mechanism read example.gold")

    __iter__ = __len__ = __bool__ = __getitem__ = __contains__ = __eq__ = __hash__ = _read

    def __repr__(self) -> str:
        return "<poisoned gold>"


class _PoisonedExpect(str):
    """Stands in for ``Example.expect`` (derived from the gold): comparing or hashing it raises ``GoldRead``."""

    def _read(self, *_: Any) -> Any:
        raise GoldRead("the mechanism read example.expect (it comes from the gold)")

    __eq__ = __ne__ = __hash__ = _read  # type: ignore[assignment]


def poisoned(example: Example) -> Example:
    """A copy of ``example`` whose gold and expectation raise ``GoldRead`` when used."""
    out = copy.copy(example)
    object.__setattr__(out, "gold", _PoisonedGold())
    object.__setattr__(out, "expect", _PoisonedExpect(str(example.expect)))
    return out


class UnusableReviewer:
    """A reviewer whose every answer is unreadable (what a weak model often returns)."""

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        """An unusable verdict."""
        return Verdict(error=False, feedback="", failed="unreadable reviewer output (contract test)")

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        """No usable index."""
        return None, "unreadable reviewer output (contract test)"

    def grade_candidate(self, example: Example, prediction: Prediction) -> Grade:
        """An unusable grade."""
        return Grade(score=None, rationale="", failed="unreadable reviewer output (contract test)")


def _run(mechanism: Mechanism, example: Example, agent: Any, reviewer: Any) -> MechanismOutcome:
    return mechanism.run(example, agent, reviewer, ctx=MechanismContext())


def check_mechanism(mechanism: Mechanism, example: Example, agent: Any, reviewer: Any | None) -> MechanismOutcome:
    """Run ``mechanism`` through its contract on ``example``; returns the outcome of the plain run.

    ``agent`` and ``reviewer`` must be deterministic (a scripted double or a cached LM). Each run
    gets a fresh in-memory ``MechanismContext``.

    Raises:
        AssertionError: the first broken rule, named.
    """
    before = copy.deepcopy(example)
    outcome = _run(mechanism, example, agent, reviewer)
    assert isinstance(outcome, MechanismOutcome), f"run returned {type(outcome).__name__}, not one MechanismOutcome"
    assert outcome.mechanism == mechanism.spec, f"outcome names {outcome.mechanism!r}, mechanism is {mechanism.spec!r}"
    assert isinstance(outcome.final, Prediction), "outcome.final is not a Prediction"
    assert example == before, "run mutated the example"
    _check_facts(mechanism, outcome)
    try:
        blind = _run(mechanism, poisoned(example), agent, reviewer)
    except GoldRead as exc:
        raise AssertionError(f"{mechanism.spec}: {exc}; a mechanism may use only messages and registry") from None
    assert blind.final == outcome.final, "the outcome changed when the gold was hidden (or the run is not deterministic)"
    if mechanism.needs_reviewer:
        _check_reviewer_failure(mechanism, example, agent)
    return outcome


def _check_facts(mechanism: Mechanism, outcome: MechanismOutcome) -> None:
    assert mechanism.needs_reviewer == bool(mechanism.components), "needs_reviewer must equal bool(components)"
    reviews, revisions = mechanism.calls_per_example()
    assert reviews >= 0 and revisions >= 0, "calls_per_example must not be negative"
    assert mechanism.needs_reviewer or outcome.reviewer_calls == 0, "a mechanism without components called a reviewer"
    assert mechanism.gated or not outcome.gated, "outcome.gated set by a mechanism whose gated fact is False"
    assert outcome.selected is None or 0 <= outcome.selected < max(len(outcome.candidates), 1), "selected out of range"


def _check_reviewer_failure(mechanism: Mechanism, example: Example, agent: Any) -> None:
    try:
        alone = _run(mechanism, example, agent, None)
    except ConfigError:
        pass
    else:
        assert alone.reviewer_calls == 0, f"{mechanism.spec} reviewed without a reviewer (raise ConfigError)"
    try:
        failed = _run(mechanism, example, agent, UnusableReviewer())
    except Exception as exc:  # noqa: BLE001 - that is the broken rule
        raise AssertionError(f"{mechanism.spec}: unusable reviewer output raised {type(exc).__name__}: {exc}; "
                             "it must be kept as data (a reviewer_failed round or a note)") from None
    as_data = any(r.verdict == "reviewer_failed" for r in failed.rounds) or bool(failed.notes) or failed.gated
    assert as_data, f"{mechanism.spec}: unusable reviewer output left no reviewer_failed round and no note"


__all__ = ["GoldRead", "UnusableReviewer", "check_mechanism", "poisoned"]
