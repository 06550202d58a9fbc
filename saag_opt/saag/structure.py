"""SAAG stage 2, structural completeness: RPR, PDS, SPR and drift (SAAG paper §2.2; docs/design.md §3).

* ``RPR = |required & P| / |required|`` (Eq. 3); 1.0 when the tool requires nothing.
* For each predicted parameter p outside the schema, ``PDS(p) = max_a WRatio(p, a) / 100`` over the
  allowed names (Eq. 4); 0 when the schema allows no parameters.
* p is *drifted* iff PDS >= 0.8 and its nearest allowed name was not itself predicted; otherwise
  it is *spurious*. When several drifted parameters point at the same allowed name, only the one
  with the highest PDS (earliest on ties) keeps the claim; the others are spurious, because a
  single rename can fix only one of them.
* ``SPR = |spurious| / |P|`` (0 when P is empty). This deliberately differs from the paper's
  Eq. 5, which counts only PDS < 0.8: under the paper's own classification rule a near-miss whose
  nearest name is already present is spurious too, and we count it.
* Stage 2 passes iff RPR = 1 and SPR = 0. Drifted parameters do not fail the stage but always
  get a psi2 correction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rapidfuzz import fuzz, process

from saag_opt.model import ToolCall, ToolSpec
from saag_opt.saag.caches import register_cache

__all__ = [
    "CLEAN_STRUCTURE", "DRIFT_THRESHOLD", "StructureResult", "allowed_params", "analyse_structure",
    "check_structure", "parameter_drift", "required_recall", "split_call",
]

DRIFT_THRESHOLD = 0.8
"""PDS at or above which an unknown parameter counts as a misspelling (paper constant)."""


@dataclass(frozen=True, slots=True)
class StructureResult:
    """Stage-2 metrics for one call against one tool."""

    rpr: float
    missing_required: tuple[str, ...]
    pds: Mapping[str, float] = field(default_factory=dict)
    drifted: Mapping[str, str] = field(default_factory=dict)
    spurious: tuple[str, ...] = ()
    spr: float = 0.0

    @property
    def passed(self) -> bool:
        """RPR = 1 and SPR = 0."""
        return not self.missing_required and not self.spurious


def split_call(call: Any) -> tuple[Any, dict[str, Any], bool]:
    """``(name, arguments, malformed)`` of a call as it arrives from the wild.

    Accepts a ``ToolCall`` or a plain mapping. Arguments that are a JSON string are decoded;
    keys become strings. Anything that is not an object (a list, a number, bad JSON) gives empty
    arguments and ``malformed=True``, so stage 2 reports the missing parameters instead of raising.
    The arguments are returned without a copy when they already are a dict with string keys.
    """
    raw: Any
    kind = type(call)
    if kind is ToolCall:
        name, raw = call.name, call.arguments
    elif kind is dict or isinstance(call, Mapping):  # a plain dict skips the (slow) ABC check
        name, raw = call.get("name"), call.get("arguments")
    else:
        name, raw = getattr(call, "name", None), getattr(call, "arguments", None)
    if type(raw) is not dict:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):
                return name, {}, True
        if raw is None:
            return name, {}, False
        if not isinstance(raw, Mapping):
            return name, {}, True
    for key in raw:
        if type(key) is not str:
            return name, {str(k): v for k, v in raw.items()}, False
    return name, raw if type(raw) is dict else dict(raw), False


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_shapes: dict[int, tuple[ToolSpec, tuple[str, ...], Mapping[str, Any]]] = {}
register_cache(_shapes.clear)


def _shape(tool: ToolSpec) -> tuple[tuple[str, ...], Mapping[str, Any]]:
    """Required names (deduplicated) and allowed properties of a tool, cached by identity."""
    entry = _shapes.get(id(tool))
    if entry is None or entry[0] is not tool:
        if len(_shapes) > 4096:
            _shapes.clear()
        entry = (tool, tuple(dict.fromkeys(tool.required)), tool.properties)
        _shapes[id(tool)] = entry
    return entry[1], entry[2]


def allowed_params(tool: ToolSpec) -> Mapping[str, Any]:
    """``tool.properties``, fast.

    Skips its ``isinstance(..., Mapping)`` (an ABC check, slow on the hot path) when the schema
    holds a plain dict, as every loaded schema does.
    """
    props = tool.parameters.get("properties")
    return props if type(props) is dict else tool.properties


def required_recall(predicted: Mapping[str, Any], tool: ToolSpec) -> tuple[float, tuple[str, ...]]:
    """RPR and the required parameters that are missing (in schema order, duplicates dropped)."""
    required = _shape(tool)[0]
    if not required:
        return 1.0, ()
    missing = tuple(r for r in required if r not in predicted)
    return (len(required) - len(missing)) / len(required), missing


def parameter_drift(unknown: list[str], allowed: list[str]) -> dict[str, tuple[float, str | None]]:
    """For each unknown parameter: its PDS and the nearest allowed name (None if none allowed)."""
    out: dict[str, tuple[float, str | None]] = {}
    for name in unknown:
        best = process.extractOne(name, allowed, scorer=fuzz.WRatio) if allowed else None
        out[name] = (best[1] / 100.0, best[0]) if best is not None else (0.0, None)
    return out


StructureTuple = tuple[float, tuple[str, ...], Mapping[str, float], Mapping[str, str], tuple[str, ...], float]
CLEAN_STRUCTURE: StructureTuple = (1.0, (), _EMPTY, _EMPTY, (), 0.0)
"""Stage 2 of a call with every required parameter and no unknown one."""


def analyse_structure(predicted: Mapping[str, Any], tool: ToolSpec) -> StructureTuple:
    """Stage 2 as a plain tuple ``(rpr, missing, pds, drifted, spurious, spr)`` (the hot path)."""
    required, allowed = _shape(tool)
    missing: tuple[str, ...] = ()
    for name in required:
        if name not in predicted:
            missing = tuple(r for r in required if r not in predicted)
            break
    rpr = (len(required) - len(missing)) / len(required) if required else 1.0
    unknown = [p for p in predicted if p not in allowed]
    if not unknown:
        return CLEAN_STRUCTURE if not missing else (rpr, missing, _EMPTY, _EMPTY, (), 0.0)
    drift = parameter_drift(unknown, list(allowed))
    claims: dict[str, str] = {}  # nearest allowed name -> the drifted parameter that claims it
    for name in sorted(unknown, key=lambda p: -drift[p][0]):  # stable: earliest wins ties
        score, nearest = drift[name]
        if score >= DRIFT_THRESHOLD and nearest is not None and nearest not in predicted \
                and nearest not in claims:
            claims[nearest] = name
    claimed = set(claims.values())
    drifted = {p: drift[p][1] for p in unknown if p in claimed}
    spurious = tuple(p for p in unknown if p not in claimed)
    return (rpr, missing, {p: drift[p][0] for p in unknown}, drifted,  # type: ignore[return-value]
            spurious, len(spurious) / len(predicted))


def check_structure(predicted: Mapping[str, Any], tool: ToolSpec) -> StructureResult:
    """Run stage 2 on a call's arguments (keys already strings) for a registered tool."""
    rpr, missing, pds, drifted, spurious, spr = analyse_structure(predicted, tool)
    return StructureResult(rpr=rpr, missing_required=missing, pds=pds, drifted=drifted,
                           spurious=spurious, spr=spr)
