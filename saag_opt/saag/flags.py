"""Calibrated stage 3's flag checks: errors the paper's cascade cannot see at all.

The accept rules of ``saag.calibration`` remove most false alarms on BFCL but also much of the
paper's apparent recall: an invalid call built from a gold call whose other value is not verbatim
is flagged by the paper for the wrong reason. Calibrated mode therefore adds two general checks
that *flag* (each ablated in experiments/bench/grounding_calibration.py too):

* ``types``: a value whose JSON type contradicts the parameter's schema ``type`` is a miss:
  ``"5"`` for an integer, ``5.0`` for an integer, ``["x"]`` for a string, ``null`` where the
  schema neither allows null nor defaults to it (an int for a ``number`` is fine, as in BFCL).
* ``duplicates``: a prediction that repeats a call exactly (same function, same arguments) fails:
  the repeat executes the same action twice and is almost always a slip for a different call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from saag_opt.saag.calibration import as_number, same_value
from saag_opt.saag.grounding import QueryContext, ground_value

__all__ = ["duplicate_calls", "type_conflicts"]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "float": (int, float), "boolean": (bool,),
    "array": (list, tuple), "tuple": (list, tuple), "object": (dict,), "dict": (dict,),
}


def type_conflicts(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None,
                   ctx: QueryContext | None = None) -> list[tuple[str, str]]:
    """``(param, expected type)`` for each value whose JSON type contradicts its schema ``type``.

    Unknown or missing schema types (``any``, a list of types other than ``[T, "null"]``) never
    conflict; an int is a number, a bool is no number; null conflicts unless the schema allows null
    (``"null"`` in its type, ``nullable``) or defaults to it. A value the schema documents
    itself does not conflict either: its default (``default`` rule) or a literal its description
    quotes ("'True' for smoking rooms, 'dontcare' for no preference"). With the query (``ctx``),
    a non-numeric string the query states verbatim does not conflict: it names an object of the
    user's (``myItemList`` for an array, ``ResultSet.CONCUR_READ_ONLY`` for an integer).
    """
    out: list[tuple[str, str]] = []
    if schema is None:
        return out
    for param, value in arguments.items():
        sub = schema.get(param)
        if type(sub) is dict:
            declared = sub.get("type")
            if type(declared) is str and (declared, type(value)) in _TYPE_AGREES:
                continue  # the common case, decided without the general checks below
        elif not isinstance(sub, Mapping):
            continue
        declared = sub.get("type")
        nullable = bool(sub.get("nullable")) or ("default" in sub and sub["default"] is None)
        if isinstance(declared, list):
            names = [t for t in declared if isinstance(t, str)]
            nullable = nullable or "null" in names
            names = [t for t in names if t != "null"]
            declared = names[0] if len(names) == 1 else None
        if not isinstance(declared, str):
            continue
        expected = _JSON_TYPES.get(declared.casefold())
        if expected is None:
            continue
        if value is None:
            if not nullable and not _documented(value, sub):
                out.append((param, declared))
        elif not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            if (ctx is not None and _names_an_object(value, ctx)) or _documented(value, sub):
                continue
            out.append((param, declared))
    return out


_TYPE_AGREES: frozenset[tuple[str, type]] = frozenset(
    (declared, kind) for declared, expected in _JSON_TYPES.items()
    for kind in (str, int, float, bool, list, tuple, dict)
    if issubclass(kind, expected) and (kind is not bool or bool in expected))
"""``(schema type, exact Python type)`` pairs that never conflict: what ``type_conflicts`` decides for
them by its general rules, looked up in one step (types are checked on every argument)."""


def _documented(value: Any, schema: Mapping[str, Any]) -> bool:
    """The schema's own default for the value, or a literal its description quotes."""
    if "default" in schema and same_value(value, schema["default"]):
        return True
    description = schema.get("description")
    if not isinstance(description, str):
        return False
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    folded = description.casefold()
    if value is None and re.search(r"default(?:s)?(?: value)?(?: is| to|:)?\s*['\"]?(?:none|null)\b", folded):
        return True
    return any(f"{q}{text.casefold()}{q}" in folded for q in ("'", '"', "`"))


def _names_an_object(value: Any, ctx: QueryContext) -> bool:
    return isinstance(value, str) and as_number(value) is None and ground_value(value, ctx)[0]


def duplicate_calls(calls: Sequence[object]) -> dict[int, int]:
    """``{later index: earlier index}`` for calls (as ``(name, canonical arguments)``) that repeat one exactly."""
    first: dict[object, int] = {}
    out: dict[int, int] = {}
    for index, key in enumerate(calls):
        try:
            earlier = first.setdefault(key, index)
        except TypeError:  # unhashable: cannot be compared cheaply, never a duplicate
            continue
        if earlier != index:
            out[index] = earlier
    return out
