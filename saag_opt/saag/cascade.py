"""The strict SAAG cascade, per call and per prediction, and its stage-conditional aggregates.

A call goes through stage 1 (registry), 2 (structure) and 3 (grounding) in order and stops at the
first failing stage (papers.md 1.3); metrics of stages it never reached are None. Aggregates
therefore are *stage-conditional*: the stage-2 means are over calls that passed stage 1, the
stage-3 means over calls that passed stage 2, NCS over calls with FNEM = 0. They are diagnostics
of the calls that got that far, not population statistics, and ``CascadeStats`` carries the n
and the condition of every mean so reports can say so.

Predictions (DESIGN section 3):

* a prediction passes iff every call passes; its ``stage_reached`` is the earliest failing stage
  among its calls;
* an abstention (no call) when a call is expected (``expect`` "calls" or "any_call") is one
  report with FNEM = -1 and psi1 "no parsable call";
* when the example expects no call (irrelevance), the cascade is not applicable
  (``applicable=False``, ``passed=None``, no call reports): the truth check decides.

``diagnose`` reads ``example.expect``, which comes from the gold. Anything an agent or reviewer
sees must use ``check_calls`` (registry and query only) instead, or it learns the gold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from saag_opt.model import CascadeReport, Example, Registry, StageReached, ToolCall
from saag_opt.saag.corrections import psi1_message, psi2_message, psi3_message
from saag_opt.saag.grounding import ground_arguments, query_context
from saag_opt.saag.registry import fnem, ncs, resolve_tool
from saag_opt.saag.structure import analyse_structure, split_call

__all__ = [
    "CascadeStats", "MetricMean", "PredictionReport", "aggregate", "check_calls", "correction_for",
    "diagnose", "run_cascade",
]

_STAGE_ORDER: dict[Any, int] = {1: 1, 2: 2, 3: 3, "passed": 4}


def run_cascade(call: ToolCall | Mapping[str, Any], registry: Registry, query: str, *,
                corrections: bool = True) -> CascadeReport:
    """Run one call through the strict cascade; never raises on JSON-like input.

    Stage 2 also fails when the arguments are not a JSON object (a list, a number, bad JSON),
    since such a call cannot execute; psi2 says so. See the module docstrings of ``registry``,
    ``structure`` and ``grounding`` for every metric's definition and edge cases.
    ``corrections=False`` skips building the psi texts (``corrections`` stays empty): metrics
    and aggregates do not need them, and on a mostly-failing sample they are about a third of
    the cost.
    """
    if type(query) is not str:
        query = "" if query is None else str(query)
    name, arguments, malformed = split_call(call)
    tool = resolve_tool(name, registry)
    if tool is None:
        score = fnem(name, registry)
        ncs_value, nearest = ncs(name, registry) if score == 0 else (None, None)
        return CascadeReport(stage_reached=1, passed=False, fnem=score, ncs=ncs_value, nearest_name=nearest,
                             corrections=_messages(psi1_message(score, name, nearest, registry))
                             if corrections else ())
    rpr, missing, pds, drifted, spurious, spr = analyse_structure(arguments, tool)
    if malformed or missing or spurious:
        return CascadeReport(
            stage_reached=2, passed=False, fnem=1, rpr=rpr, missing_required=missing, pds=pds,
            drifted=drifted, spurious=spurious, spr=spr,
            corrections=_messages(psi2_message(name, tool, malformed, missing, drifted, spurious))
            if corrections else ())
    exact_count, h, partials, assumptions, misses = ground_arguments(arguments, query_context(query))
    total = sum(h.values()) if h else None
    texts: tuple[str, ...] = ()
    if corrections and (misses or drifted):
        texts = _messages(psi2_message(name, tool, False, (), drifted, ()) if drifted else None,
                          psi3_message(misses, query))
    return CascadeReport(  # positional: measurably cheaper than 18 keywords on the hot path
        3 if misses else "passed", not misses, 1, None, None, rpr, (), pds, drifted, (), spr,
        exact_count / len(arguments) if arguments else None,  # avem
        sum(partials) / len(partials) if partials else None,  # qslo
        total / len(h) if total is not None else None, total,  # vhr, vhr_ctx
        h, tuple(assumptions), texts,
    )


def _messages(*texts: str | None) -> tuple[str, ...]:
    return tuple(t for t in texts if t)


@dataclass(frozen=True, slots=True)
class PredictionReport:
    """The cascade over one prediction (all its calls).

    ``passed`` is None when the cascade does not apply (the gold expects no call).
    ``corrections`` hold each call's psi messages, prefixed with the call's position and name
    when the prediction has several calls.
    """

    applicable: bool
    passed: bool | None
    calls: tuple[CascadeReport, ...] = ()
    stage_reached: StageReached | None = None
    corrections: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Applicable, passed and nothing to correct: what a SAAG gate lets through unreviewed."""
        return bool(self.passed) and not self.corrections

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {"applicable": self.applicable, "passed": self.passed, "stage_reached": self.stage_reached,
                "calls": [c.to_dict() for c in self.calls], "corrections": list(self.corrections)}


def check_calls(calls: Sequence[ToolCall] | None, registry: Registry, query: str, *,
                corrections: bool = True) -> PredictionReport:
    """Gold-free cascade over a prediction that should contain a call (safe for reviewers/gates).

    No calls (abstention) gives one FNEM = -1 report with psi1 "no parsable call".
    ``corrections=False`` skips the psi texts (see ``run_cascade``).
    """
    raw = getattr(calls, "calls", calls)  # a Prediction is accepted too
    items = (raw,) if isinstance(raw, (ToolCall, Mapping)) else tuple(raw or ())
    if len(items) == 1:  # the common case, without the bookkeeping below
        one = run_cascade(items[0], registry, query, corrections=corrections)
        return PredictionReport(True, one.passed, (one,), one.stage_reached, one.corrections)
    reports = tuple(run_cascade(c, registry, query, corrections=corrections)
                    for c in (items or (ToolCall(None),)))
    stage: StageReached = min((r.stage_reached for r in reports), key=_STAGE_ORDER.__getitem__)
    texts: list[str] = []
    for index, (call, report) in enumerate(zip(items or (None,), reports), start=1):
        if not report.corrections:
            continue
        if len(reports) > 1:
            name = split_call(call)[0]
            label = f"Call {index} (`{name[:80] if isinstance(name, str) else type(name).__name__}`): "
            texts.extend(label + text for text in report.corrections)
        else:
            texts.extend(report.corrections)
    return PredictionReport(applicable=True, passed=all(r.passed for r in reports), calls=reports,
                            stage_reached=stage, corrections=tuple(texts))


def diagnose(calls: Sequence[ToolCall] | None, example: Example, *, corrections: bool = True) -> PredictionReport:
    """Evaluation-side cascade over a prediction: not applicable when the gold expects no call.

    "any_call" (live relevance) is treated like "calls": a call is expected, so an abstention is
    FNEM = -1. Uses ``example.expect`` (gold): never show the result's applicability to an agent.
    """
    if example.expect == "no_call":
        return PredictionReport(applicable=False, passed=None)
    return check_calls(calls, example.registry, example.query, corrections=corrections)


def correction_for(report: PredictionReport) -> str | None:
    """The one message to feed back for a self-repair round, or None when there is nothing to say.

    It joins every call's corrections: psi of the first failing stage, plus the psi2 drift part
    when stage 2 passed with drifted parameters. A passing prediction may therefore still return
    a drift correction; the loop stops at pass (DESIGN section 3), so using it is the caller's choice.
    """
    if not report.applicable or not report.corrections:
        return None
    return "\n".join(report.corrections)


@dataclass(frozen=True, slots=True)
class MetricMean:
    """A stage-conditional mean with the number of items it is over and the condition in words."""

    mean: float | None
    n: int
    over: str

    def to_dict(self) -> dict[str, Any]:
        """``{"mean", "n", "over"}``."""
        return {"mean": self.mean, "n": self.n, "over": self.over}


@dataclass(frozen=True, slots=True)
class CascadeStats:
    """Funnel and stage-conditional metric means over many calls.

    ``reached[k]`` / ``passed[k]`` count the calls that reached / passed stage k (k = 1, 2, 3).
    ``fnem_counts`` counts FNEM -1/0/1. The ``fnem`` mean is the share of calls with FNEM = 1 (the
    -1 of a parse failure counts as a miss, not as -1).
    """

    n_calls: int
    reached: Mapping[int, int]
    passed: Mapping[int, int]
    fnem_counts: Mapping[int, int]
    metrics: Mapping[str, MetricMean] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict; the funnel as a list of stages."""
        return {
            "n_calls": self.n_calls,
            "funnel": [{"stage": k, "reached": self.reached[k], "passed": self.passed[k]} for k in (1, 2, 3)],
            "fnem_counts": {str(k): v for k, v in self.fnem_counts.items()},
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
        }


_CONDITIONS: dict[str, str] = {
    "fnem": "all calls",
    "ncs": "calls with FNEM = 0",
    "rpr": "calls that passed stage 1",
    "pds": "out-of-schema parameters of calls that passed stage 1",
    "spr": "calls that passed stage 1",
    "avem": "calls that passed stage 2 and have arguments",
    "qslo": "calls that passed stage 2 and have a string that failed exact match",
    "vhr": "calls that passed stage 2 and have a grounded-context argument (G non-empty)",
}


def _flatten(reports: Iterable[CascadeReport | PredictionReport]) -> Iterable[CascadeReport]:
    for item in reports:
        if isinstance(item, PredictionReport):
            yield from item.calls
        else:
            yield item


def aggregate(reports: Iterable[CascadeReport | PredictionReport]) -> CascadeStats:
    """Funnel and stage-conditional means; PredictionReports contribute their call reports."""
    values: dict[str, list[float]] = {k: [] for k in _CONDITIONS}
    reached = {1: 0, 2: 0, 3: 0}
    passed = {1: 0, 2: 0, 3: 0}
    fnem_counts = {-1: 0, 0: 0, 1: 0}
    for report in _flatten(reports):
        stage = _STAGE_ORDER.get(report.stage_reached, 1)
        for k in (1, 2, 3):
            reached[k] += stage >= k
            passed[k] += stage > k
        fnem_counts[report.fnem] = fnem_counts.get(report.fnem, 0) + 1
        values["fnem"].append(1.0 if report.fnem == 1 else 0.0)
        if report.fnem == 0 and report.ncs is not None:
            values["ncs"].append(report.ncs)
        if stage >= 2:
            values["rpr"].append(report.rpr if report.rpr is not None else 0.0)
            values["spr"].append(report.spr if report.spr is not None else 0.0)
            values["pds"].extend(report.pds.values())
        if stage >= 3:
            for key in ("avem", "qslo", "vhr"):
                value = getattr(report, key)
                if value is not None:
                    values[key].append(value)
    metrics = {k: MetricMean(sum(v) / len(v) if v else None, len(v), _CONDITIONS[k]) for k, v in values.items()}
    return CascadeStats(n_calls=reached[1], reached=reached, passed=passed, fnem_counts=fnem_counts,
                        metrics=metrics)
