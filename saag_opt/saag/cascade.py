"""The strict SAAG cascade, per call and per prediction, and its stage-conditional aggregates.

A call goes through stage 1 (registry), 2 (structure) and 3 (grounding) in order and stops at the
first failing stage (SAAG paper, Figure 1); metrics of stages it never reached are None. Aggregates
therefore are *stage-conditional*: the stage-2 means are over calls that passed stage 1, the
stage-3 means over calls that passed stage 2, NCS over calls with FNEM = 0. They are diagnostics
of the calls that got that far, not population statistics, and ``CascadeStats`` carries the n
and the condition of every mean so reports can say so.

Predictions (docs/design.md §3):

* a prediction passes iff every call passes; its ``stage_reached`` is the earliest failing stage
  among its calls;
* an abstention (no call) when a call is expected (``expect`` "calls" or "any_call") is one
  report with FNEM = -1 and psi1 "no parsable call";
* when the example expects no call (irrelevance), the cascade is not applicable
  (``applicable=False``, ``passed=None``, no call reports): the truth check decides.

``diagnose_with_gold`` reads ``example.expect``, which comes from the gold. Anything an agent or reviewer
sees must use ``check_calls`` (registry and query only) instead, or it learns the gold.

Speed: reports are built in one step and their psi ``corrections`` on first read
(``saag_opt.model.DeferredCorrections``): scoring reads every metric but no correction text, and
the texts were about a fifth of the cascade's cost. The metrics themselves (NCS, PDS, QSLO, h)
are always computed, since aggregates need them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from saag_opt.model import (
    CascadeReport,
    Deferred,
    DeferredCorrections,
    Example,
    Registry,
    StageReached,
    ToolCall,
    ToolSpec,
    canonical_json,
)
from saag_opt.saag.calibration import calibrate
from saag_opt.saag.conformance import fnem, ncs, resolve_tool
from saag_opt.saag.corrections import duplicate_message, psi1_message, psi2_message, psi3_message, type_message
from saag_opt.saag.flags import duplicate_calls, type_conflicts
from saag_opt.saag.grounding import ground_arguments, query_context
from saag_opt.saag.modes import REGISTRY_RULES, GroundingMode, RuleSet, calibration_rules
from saag_opt.saag.structure import CLEAN_STRUCTURE, StructureTuple, allowed_params, analyse_structure, split_call

__all__ = [
    "CascadeStats", "MetricMean", "PredictionReport", "aggregate", "check_calls", "correction_for",
    "diagnose_with_gold", "metric_values", "run_cascade", "unanchored",
]

_STAGE_ORDER: dict[Any, int] = {1: 1, 2: 2, 3: 3, "passed": 4}
_PAPER: RuleSet = frozenset()  # the paper's stage 3: no calibration rule


def run_cascade(call: ToolCall | Mapping[str, Any], registry: Registry, query: str, *,
                corrections: bool = True, grounding: GroundingMode = "paper") -> CascadeReport:
    """Run one call through the strict cascade; never raises on JSON-like input.

    Stage 2 also fails when the arguments are not a JSON object (a list, a number, bad JSON),
    since such a call cannot execute; psi2 says so. See the module docstrings of ``registry``,
    ``structure`` and ``grounding`` for every metric's definition and edge cases.
    The psi texts are built on the first read of ``.corrections`` (the report reads as if they
    had been built eagerly); ``corrections=False`` leaves them empty, for metrics-only runs.

    The common call (registered name, every required parameter, no unknown one) skips stage 2's
    fuzzy matching: its metrics are then known without computing them (RPR 1, SPR 0, no PDS).

    ``grounding="calibrated"`` lets the rules of ``saag_opt.saag.calibration`` accept stage-3
    misses (schema defaults, reformatted dates, number words, ...): the pass decision, psi3 and the
    report's ``calibrated`` mapping change, the paper's metrics do not. ``"paper"`` is the paper.
    """
    rules = _PAPER if grounding == "paper" else calibration_rules(grounding)
    return _cascade(call, registry, query, corrections, rules)


def _cascade(call: ToolCall | Mapping[str, Any], registry: Registry, query: str, corrections: bool,
             rules: RuleSet) -> CascadeReport:
    if type(query) is not str:
        query = "" if query is None else str(query)
    name, arguments, malformed = split_call(call)
    tool = resolve_tool(name, registry)
    if tool is None:
        return _unregistered(name, registry, corrections)
    props = allowed_params(tool)
    if not malformed and _conforms(arguments, tool.required, props):
        return _grounded(name, tool, props, arguments, query, CLEAN_STRUCTURE, corrections, rules)
    structure = analyse_structure(arguments, tool)
    if malformed or structure[1] or structure[4]:  # missing or spurious parameters
        return _misstructured(name, tool, malformed, structure, corrections)
    return _grounded(name, tool, props, arguments, query, structure, corrections, rules)  # passed with drift


def _conforms(arguments: Mapping[str, Any], required: tuple[str, ...], allowed: Mapping[str, Any]) -> bool:
    """Every required parameter given and no parameter outside the schema (stage 2 passes, no drift)."""
    for param in required:
        if param not in arguments:
            return False
    for param in arguments:
        if param not in allowed:
            return False
    return True


def _unregistered(name: Any, registry: Registry, corrections: bool) -> CascadeReport:
    """Stage-1 failure: FNEM 0 (with NCS and the nearest name) or -1."""
    score = fnem(name, registry)
    ncs_value, nearest = ncs(name, registry) if score == 0 else (None, None)
    fields: dict[str, Any] = {
        "stage_reached": 1, "passed": False, "fnem": score, "ncs": ncs_value, "nearest_name": nearest,
        "rpr": None, "missing_required": (), "pds": {}, "drifted": {}, "spurious": (), "spr": None,
        "avem": None, "qslo": None, "vhr": None, "vhr_ctx": None, "h": {}, "assumptions": (), "calibrated": {}}
    return _report(fields, (_psi1_texts, (score, name, nearest, registry)) if corrections else None)


def _misstructured(name: Any, tool: ToolSpec, malformed: bool, structure: StructureTuple,
                   corrections: bool) -> CascadeReport:
    """Stage-2 failure: malformed arguments, missing or spurious parameters."""
    rpr, missing, pds, drifted, spurious, spr = structure  # empty mappings are shared proxies: not in reports
    fields = {
        "stage_reached": 2, "passed": False, "fnem": 1, "ncs": None, "nearest_name": None,
        "rpr": rpr, "missing_required": missing, "pds": pds or {}, "drifted": drifted or {}, "spurious": spurious,
        "spr": spr, "avem": None, "qslo": None, "vhr": None, "vhr_ctx": None, "h": {}, "assumptions": (),
        "calibrated": {}}
    deferred = (_psi2_texts, (name, tool, malformed, missing, drifted, spurious)) if corrections else None
    return _report(fields, deferred)


def _grounded(name: Any, tool: ToolSpec, schema: Mapping[str, Any], arguments: Mapping[str, Any], query: str,
              structure: StructureTuple, corrections: bool, rules: RuleSet) -> CascadeReport:
    """Stage 3 for a call that passed stage 2 (``structure`` carries its drift, if any).

    The metrics come from the paper's grounding; calibration (``rules``) only re-decides its misses.
    """
    rpr, _, pds, drifted, _, spr = structure  # empty mappings are shared proxies (unpicklable): not in reports
    ctx = query_context(query)
    exact_count, h, partials, assumptions, misses = ground_arguments(arguments, ctx, schema)
    calibrated: dict[str, str] = {}
    mistyped: Sequence[tuple[str, str]] = ()
    if rules:
        if misses:
            calibrated, misses = calibrate(misses, ctx, schema, rules)
        mistyped = type_conflicts(arguments, schema, ctx) if "types" in rules else ()
        if mistyped:
            missed = {m[0] for m in misses}
            misses = misses + [(param, arguments[param], None) for param, _ in mistyped if param not in missed]
            calibrated = {p: r for p, r in calibrated.items() if all(p != param for param, _ in mistyped)}
    total = sum(h.values()) if h else None
    fields = {
        "stage_reached": 3 if misses else "passed", "passed": not misses, "fnem": 1, "ncs": None,
        "nearest_name": None, "rpr": rpr, "missing_required": (), "pds": pds or {}, "drifted": drifted or {},
        "spurious": (), "spr": spr, "avem": exact_count / len(arguments) if arguments else None,
        "qslo": sum(partials) / len(partials) if partials else None,
        "vhr": total / len(h) if total is not None else None, "vhr_ctx": total, "h": h,
        "assumptions": tuple(assumptions), "calibrated": calibrated}
    needed = corrections and (misses or drifted)
    return _report(fields, (_psi3_texts, (name, tool, drifted, misses, query, schema, mistyped)) if needed else None)


def _report(fields: dict[str, Any], deferred: Deferred | None) -> CascadeReport:
    """The report; its corrections are built on first read (``deferred``), or empty without one."""
    if deferred is None:
        fields["corrections"] = ()
    return CascadeReport._from_fields(fields, deferred)


def _psi1_texts(score: int, name: Any, nearest: str | None, registry: Registry) -> tuple[str, ...]:
    return _messages(psi1_message(score, name, nearest, registry))


def _psi2_texts(name: Any, tool: ToolSpec, malformed: bool, missing: tuple[str, ...], drifted: Mapping[str, str],
                spurious: tuple[str, ...]) -> tuple[str, ...]:
    return _messages(psi2_message(name, tool, malformed, missing, drifted, spurious))


def _psi3_texts(name: Any, tool: ToolSpec, drifted: Mapping[str, str], misses: list[tuple[str, Any, float | None]],
                query: str, schema: Mapping[str, Any], mistyped: Sequence[tuple[str, str]] = ()) -> tuple[str, ...]:
    """The psi2 drift part (a call that passed stage 2 may still have drifted), psi3 and type conflicts."""
    typed = {param for param, _ in mistyped}
    return _messages(psi2_message(name, tool, False, (), drifted, ()) if drifted else None,
                     psi3_message([m for m in misses if m[0] not in typed], query, schema),
                     type_message(mistyped, {m[0]: m[1] for m in misses}))


def _messages(*texts: str | None) -> tuple[str, ...]:
    return tuple(t for t in texts if t)


@dataclass(frozen=True)
class PredictionReport(DeferredCorrections):
    """The cascade over one prediction (all its calls).

    ``passed`` is None when the cascade does not apply (the gold expects no call).
    ``corrections`` hold each call's psi messages, prefixed with the call's position and name
    when the prediction has several calls. Not slotted, so ``_of`` can build it in one step
    (see ``CascadeReport``).
    """

    applicable: bool
    passed: bool | None
    calls: tuple[CascadeReport, ...] = ()
    stage_reached: StageReached | None = None
    grounding: str = "paper"
    """The stage-3 mode that decided ``passed``: ``paper`` or ``calibrated`` (``saag.calibration``)."""
    corrections: tuple[str, ...] = ()

    @classmethod
    def _of(cls, passed: bool, calls: tuple[CascadeReport, ...], stage: StageReached,
            deferred: Deferred, grounding: str = "paper") -> PredictionReport:
        """An applicable report without the frozen ``__init__``; corrections built on first read."""
        return cls._from_fields({"applicable": True, "passed": passed, "calls": calls, "stage_reached": stage,
                                 "grounding": grounding}, deferred)

    @property
    def clean(self) -> bool:
        """Applicable, passed and nothing to correct (not even drift)."""
        return bool(self.passed) and not self.corrections

    @property
    def anchored(self) -> bool:
        """No call that reached stage 3 is ``unanchored``: each has a value from the request, or no arguments."""
        return not any(unanchored(call) for call in self.calls)

    @property
    def vouched(self) -> bool:
        """Clean and anchored: what a SAAG gate lets through unreviewed.

        Why anchored too: a call whose every value is an assumption (numbers in a request without
        digits, bools, enum choices, schema defaults) passes stage 3 with nothing from the request
        behind it; that is how a call to a function that fits nothing looks (BFCL irrelevance), and
        only a reviewer can say so.
        """
        return self.clean and self.anchored

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {"applicable": self.applicable, "passed": self.passed, "stage_reached": self.stage_reached,
                "grounding": self.grounding, "calls": [c.to_dict() for c in self.calls],
                "corrections": list(self.corrections)}


def check_calls(calls: Sequence[ToolCall] | None, registry: Registry, query: str, *,
                corrections: bool = True, grounding: GroundingMode = "paper") -> PredictionReport:
    """Gold-free cascade over a prediction that should contain a call (safe for reviewers/gates).

    No calls (abstention) gives one FNEM = -1 report with psi1 "no parsable call".
    ``corrections=False`` skips the psi texts; ``grounding`` picks the stage-3 pass decision
    (see ``run_cascade``); the report's ``grounding`` names the mode that decided ``passed``.
    """
    if grounding == "paper":  # the hot path of scoring: no rule lookups
        rules, mode = _PAPER, "paper"
    else:
        rules = calibration_rules(grounding)
        mode = _mode_name(rules)
    items = calls if type(calls) is tuple or type(calls) is list else _call_items(calls)
    if len(items) <= 1:  # the common case, without the bookkeeping below; no call = abstention
        one = _cascade(items[0] if items else ToolCall(None), registry, query, corrections, rules)
        return PredictionReport._of(one.passed, (one,), one.stage_reached, (_corrections_of, (one,)), mode)
    reports = tuple([_cascade(c, registry, query, corrections, rules) for c in items])
    if "duplicates" in rules:
        reports = _flag_duplicates(items, reports)
    stage: StageReached = "passed"
    passed = True
    for report in reports:
        if _STAGE_ORDER[report.stage_reached] < _STAGE_ORDER[stage]:
            stage = report.stage_reached
        passed = passed and report.passed
    return PredictionReport._of(passed, reports, stage, (_labelled_corrections, (items, reports)), mode)


def _flag_duplicates(items: Sequence[Any], reports: tuple[CascadeReport, ...]) -> tuple[CascadeReport, ...]:
    """Calibrated mode: a call that repeats an earlier one exactly fails at stage 3 (``saag.flags``)."""
    parts = [split_call(call) for call in items]
    names = [name for name, _, malformed in parts if not malformed and isinstance(name, str)]
    if len(set(names)) == len(names):
        return reports  # no two calls share a name, so none repeats another: skip serialising arguments
    return _mark_repeats(parts, reports)


def _mark_repeats(parts: Sequence[tuple[Any, Any, bool]],
                  reports: tuple[CascadeReport, ...]) -> tuple[CascadeReport, ...]:
    """Fail every call (split by ``split_call``) that repeats an earlier one exactly, naming the earlier one."""
    keys = [(name, canonical_json(arguments)) if not malformed and isinstance(name, str) else object()
            for name, arguments, malformed in parts]
    repeats = duplicate_calls(keys)
    if not repeats:
        return reports
    out = list(reports)
    for index, earlier in repeats.items():
        report = out[index]
        fields = {k: v for k, v in report.__dict__.items() if k not in ("_deferred", "corrections")}
        fields.update(stage_reached=3 if report.stage_reached == "passed" else report.stage_reached, passed=False,
                      corrections=(*report.corrections, duplicate_message(index + 1, earlier + 1)))
        out[index] = CascadeReport._from_fields(fields)
    return tuple(out)


def _mode_name(rules: RuleSet) -> str:
    """``paper``, ``calibrated``, or ``calibrated[rule,...]`` for a subset (the benchmark's ablation)."""
    if not rules:
        return "paper"
    return "calibrated" if rules == calibration_rules("calibrated") else f"calibrated[{','.join(sorted(rules))}]"


def _corrections_of(report: CascadeReport) -> tuple[str, ...]:
    return report.corrections


def _labelled_corrections(items: Sequence[Any], reports: tuple[CascadeReport, ...]) -> tuple[str, ...]:
    """Every call's corrections, each prefixed with the call's position and name."""
    texts: list[str] = []
    for index, (call, report) in enumerate(zip(items, reports), start=1):
        if report.corrections:
            name = split_call(call)[0]
            label = f"Call {index} (`{name[:80] if isinstance(name, str) else type(name).__name__}`): "
            texts.extend(label + text for text in report.corrections)
    return tuple(texts)


def _call_items(calls: Any) -> Sequence[Any]:
    """The calls of a Prediction, a single call, None or any iterable of calls, as a sequence."""
    raw = getattr(calls, "calls", calls)  # a Prediction is accepted too
    return (raw,) if isinstance(raw, (ToolCall, Mapping)) else tuple(raw or ())


def diagnose_with_gold(calls: Sequence[ToolCall] | None, example: Example, *, corrections: bool = True,
                       grounding: GroundingMode = "paper") -> PredictionReport:
    """Evaluation-side cascade over a prediction: not applicable when the gold expects no call.

    "any_call" (live relevance) is treated like "calls": a call is expected, so an abstention is
    FNEM = -1. Uses ``example.expect`` (gold): never show the result's applicability to an agent.
    """
    if example.expect == "no_call":
        return PredictionReport(applicable=False, passed=None, grounding=_mode_name(calibration_rules(grounding)))
    return check_calls(calls, example.registry, example.query, corrections=corrections, grounding=grounding)


def unanchored(call: CascadeReport) -> bool:
    """The call reached stage 3 with arguments and none of their values is found in the request.

    Found = an exact match, or accepted by a calibrated rule that reads the query (not one of
    ``REGISTRY_RULES``); a call without arguments has nothing to find and is not unanchored.
    Computed from the report's fields (AVEM = exact matches / arguments), so paper and calibrated
    reports answer alike.
    """
    if call.stage_reached not in (3, "passed") or call.avem != 0:
        return False
    return all(rule in REGISTRY_RULES for rule in call.calibrated.values())


def correction_for(report: PredictionReport) -> str | None:
    """The one message to feed back for a self-repair round, or None when there is nothing to say.

    It joins every call's corrections: psi of the first failing stage, plus the psi2 drift part
    when stage 2 passed with drifted parameters. A passing prediction may therefore still return
    a drift correction; the loop stops at pass (docs/design.md §3), so using it is the caller's choice.
    """
    if not report.applicable or not report.corrections:
        return None
    return "\n".join(report.corrections)


del PredictionReport.corrections  # the default lives in __init__; a missing key must reach __getattr__


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
    calls = list(_flatten(reports))
    reached = {1: 0, 2: 0, 3: 0}
    passed = {1: 0, 2: 0, 3: 0}
    fnem_counts = {-1: 0, 0: 0, 1: 0}
    for report in calls:
        stage = _STAGE_ORDER.get(report.stage_reached, 1)
        for k in (1, 2, 3):
            reached[k] += stage >= k
            passed[k] += stage > k
        fnem_counts[report.fnem] = fnem_counts.get(report.fnem, 0) + 1
    values = metric_values(calls)
    metrics = {k: MetricMean(sum(v) / len(v) if v else None, len(v), _CONDITIONS[k]) for k, v in values.items()}
    return CascadeStats(n_calls=reached[1], reached=reached, passed=passed, fnem_counts=fnem_counts,
                        metrics=metrics)


def metric_values(reports: Iterable[CascadeReport | PredictionReport]) -> dict[str, list[float]]:
    """Each metric's per-call (``pds``: per-parameter) values, stage-conditional as in ``aggregate``.

    The one definition of which calls a metric is over, so a distribution drawn from these values
    and the mean in ``aggregate`` always describe the same population.
    """
    values: dict[str, list[float]] = {k: [] for k in _CONDITIONS}
    for report in _flatten(reports):
        stage = _STAGE_ORDER.get(report.stage_reached, 1)
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
    return values
