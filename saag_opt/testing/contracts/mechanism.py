"""The ``Mechanism`` contract.

One outcome per example, inputs untouched, reviewer failure kept as data, gold never read, facts
consistent with behaviour (``check_mechanism``); and abstention (``check_abstention``): a mechanism
never writes a call of its own, and one with a reviewer can turn a call into no call when the
reviewer finds that no function fits.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from saag_opt.agents.base import Proposal
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.mechanisms.rules import hard_failure
from saag_opt.agents.reviewer import Grade, Verdict, blind_cascade
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


NO_FIT = "No available function fits the request; the agent should not call any function."
"""What ``NoFitReviewer`` says about every call."""

DECLINED = Prediction((), raw="None of the available functions fits the request.", status="empty")
"""The agents' abstention in ``check_abstention``: a readable reply without a call."""


class NoFitReviewer:
    """Finds that no available function fits: rejects every call, approves no call, picks and grades no call best."""

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        """Reject a call with ``NO_FIT``; approve no call."""
        return Verdict(True, NO_FIT) if prediction.calls else Verdict(False, "Right: no function fits the request.")

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        """The first candidate without a call (a "(no function call)" option included), else 0."""
        return next((i for i, c in enumerate(candidates) if not c.calls), 0), None

    def grade_candidate(self, example: Example, prediction: Prediction) -> Grade:
        """1.0 for no call, 0.0 for a call."""
        return Grade(0.0, NO_FIT) if prediction.calls else Grade(1.0, "no function fits the request")


class ContentReviewer:
    """Finds the agent's call right: approves calls, picks the first candidate with a call, grades calls best."""

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        """Approve a call; reject no call."""
        return Verdict(False, "") if prediction.calls else Verdict(True, "A function fits the request; call it.")

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        """The first candidate with a call, else 0."""
        return next((i for i, c in enumerate(candidates) if c.calls), 0), None

    def grade_candidate(self, example: Example, prediction: Prediction) -> Grade:
        """1.0 for a call, 0.0 for no call."""
        return Grade(1.0, "right") if prediction.calls else Grade(0.0, "a function fits the request")


@dataclass
class ScriptedAgent:
    """Proposes ``first`` at round 0 (every temperature) and ``revised`` after any feedback."""

    first: Prediction
    revised: Prediction
    label: str = "contract-agent"
    prompt_hash: str = "contract"
    temperature: float = 0.0

    def propose(self, example: Example, *, feedback: Sequence[Any] = (), temperature: float | None = None) -> Proposal:
        """``revised`` once there is feedback, else ``first``."""
        return Proposal(self.revised if feedback else self.first, temperature=temperature)


def check_abstention(mechanism: Mechanism, example: Example, call: Prediction) -> None:
    """Run ``mechanism`` through the abstention rules on ``example`` with scripted agents and reviewers.

    1. An agent that never calls: the final makes no call (a mechanism never writes a call of its own).
    2. Reviewer mechanisms: an agent that proposes ``call`` until it gets feedback and then makes no call,
       with ``NoFitReviewer``: the final makes no call, unless a gate passed the call unreviewed.
    3. An agent that always proposes ``call``, with ``ContentReviewer``: the final is ``call``, or no
       call under a block ruling that says why (``saag+abstain`` withholds what the cascade does not
       verify); never an abstention out of nowhere.

    ``call`` must pass SAAG stages 1-2 (a guard never runs a call that fails them) and not be
    vouched for by stage 3 (it fails grounding, or none of its values is found in the request), so
    that a mechanism that trusts the cascade still asks the reviewer.

    Raises:
        ValueError: ``call`` makes no call, fails stage 1 or 2, or passes stage 3 anchored in the request.
        AssertionError: the first broken rule, named.
    """
    report = blind_cascade(call, example)
    if not call.calls or hard_failure(report) or (report.passed and report.anchored):
        raise ValueError("check_abstention needs a call that passes SAAG stages 1-2 and that stage 3 does not "
                         "vouch for (it fails grounding, or none of its values is found in the request)")
    blind = poisoned(example)
    silent = _run(mechanism, blind, ScriptedAgent(DECLINED, DECLINED), NoFitReviewer())
    assert not silent.final.calls, f"{mechanism.spec}: the agent never called, yet the final makes a call"
    if mechanism.needs_reviewer:
        talked = _run(mechanism, blind, ScriptedAgent(call, DECLINED), NoFitReviewer())
        assert talked.gated or not talked.final.calls, (
            f"{mechanism.spec}: the reviewer found that no function fits and the agent agreed, "
            f"yet the final makes a call: {talked.final.calls}")
    kept = _run(mechanism, blind, ScriptedAgent(call, call), ContentReviewer())
    withheld = kept.ruling is not None and kept.ruling.action == "block" and bool(kept.ruling.reason)
    assert kept.final == call or (withheld and not kept.final.calls), (
        f"{mechanism.spec}: the reviewer approved the call, yet the final is {kept.final} with no block ruling "
        "saying why")


__all__ = ["ContentReviewer", "GoldRead", "NoFitReviewer", "ScriptedAgent", "UnusableReviewer", "check_abstention",
           "check_mechanism", "poisoned"]
