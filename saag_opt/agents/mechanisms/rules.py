"""The runtime guard's rules that need no LM: what a stage 1-2 failure is, how a failed review rules.

``guard+r<N>`` (agents/mechanisms/guarded.py) applies them around its reviewer; ``runtime.Guard`` applies them on
its cascade-only shortcuts. They live apart from the loop so that the guard can import them at
module top without loading the reviewer (dspy): only the SAAG core and the closed sets are needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from saag_opt.choices import GuardAction, OnError
from saag_opt.model import Registry, ToolCall
from saag_opt.saag import PredictionReport, correction_for
from saag_opt.saag.injection import InjectionReport, Sources, check_injection
from saag_opt.saag.policy import DEFAULT_POLICY, Policy


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the runtime guard's rules decided (``guard+r<N>``): the guard builds its ``Decision`` from it.

    ``feedback`` is the text for the agent's model; ``reviewed``: a usable verdict was had; ``error``:
    the reviewer failure on the way; ``revision_report``: the cascade of the revised calls;
    ``cacheable`` False = the guard must not replay it (a failure decided it); ``provenance``: an
    injection block's findings.
    """

    action: GuardAction
    reason: str
    feedback: str | None = None
    reviewed: bool = False
    error: str | None = None
    revision_report: PredictionReport | None = None
    cacheable: bool = True
    provenance: dict[str, Any] | None = None
    """An injection block's ``InjectionReport.to_dict()`` (which value came from which tool text, and why)."""


def hard_failure(report: PredictionReport) -> bool:
    """Some call failed stage 1 (registry) or 2 (structure): it cannot run as proposed."""
    return any(call.stage_reached in (1, 2) for call in report.calls)


def stage_summary(report: PredictionReport, stages: Sequence[int] = (1, 2)) -> str:
    """``failed SAAG stage 1/2``: the failed ``stages`` (by default those that keep a call from running), for reasons."""
    failed = sorted({str(c.stage_reached) for c in report.calls if c.stage_reached in stages})
    return f"failed SAAG stage {'/'.join(failed)}"


def describe_error(exc: BaseException) -> str:
    """``Type: first line`` of an exception (at most 300 characters), for reasons and ``error``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def failed_review(report: PredictionReport, error: str, on_error: OnError) -> Ruling:
    """The review of the proposed calls failed: ``on_error`` decides, but a stage 1-2 failure never runs."""
    if hard_failure(report):
        return Ruling("block", f"{stage_summary(report)} and the review failed ({error})", correction_for(report),
                      error=error, cacheable=False)
    if on_error == "allow":
        return Ruling("allow", f"reviewer failed ({error}); on_error=allow: runs unreviewed", error=error,
                      cacheable=False)
    return Ruling("block", f"reviewer failed ({error}); on_error=block",
                  f"The tool call could not be reviewed ({error}); it was not run.", error=error, cacheable=False)



def injection_report(calls: Sequence[ToolCall], registry: Registry, sources: Sources,
                     policy: Policy | None = DEFAULT_POLICY) -> InjectionReport | None:
    """The injection rule's report on ``calls`` (``saag.injection``: the marker rules and the data-flow ``policy``).

    No call or no tool result in view: None without looking (the single-turn path is unchanged).
    """
    if not calls or not sources.tools:
        return None
    return check_injection(calls, registry, sources, policy=policy)


def injected(calls: Sequence[ToolCall], registry: Registry, sources: Sources,
             policy: Policy | None = DEFAULT_POLICY) -> InjectionReport | None:
    """The injection rule's report when it blocks ``calls``, else None (``injection_report``)."""
    found = injection_report(calls, registry, sources, policy)
    return found if found is not None and found.blocked else None


__all__ = ["Ruling", "describe_error", "failed_review", "hard_failure", "injected", "injection_report", "stage_summary"]
