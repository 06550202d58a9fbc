"""Deterministic perturbed calls around the gold: the error taxonomy of tool-calling agents.

Each kind imitates one mistake an agent makes (wrong or typo'd name, missing or spurious parameter,
wrong type, changed value, dropped parallel call, a call where none was wanted) or a harmless
variation BFCL accepts (case, punctuation, an alternative acceptable value, reordered parallel calls,
an omitted optional parameter). The ground-truth agreement test and the speed benchmark score these
with both ``check_truth`` and BFCL's ``ast_checker``; reviewer training data can reuse them.
All randomness comes from the ``random.Random`` passed in, so a seed fixes the output.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

from saag_opt.model import Example, ToolCall, is_number, openai_safe_name

__all__ = ["gold_calls", "perturbed_calls", "PERTURBATION_KINDS"]

Calls = list[ToolCall]
_Mutator = Callable[[Example, Calls, random.Random], "Calls | None"]

_MISSING = object()


def _first_value(values: Any) -> Any:
    """The first acceptable value that is not the "may be omitted" marker ``""``."""
    if not isinstance(values, list):
        return values
    for value in values:
        if value != "":
            return value
    return _MISSING


def _concrete(value: Any) -> Any:
    """A value as a call would carry it: BFCL writes dict entries as lists of acceptable values too."""
    if type(value) is dict:
        return {k: _concrete(v) for k, vals in value.items() if (v := _first_value(vals)) is not _MISSING}
    if type(value) is list and value and all(type(v) is dict for v in value):
        return [_concrete(v) for v in value]
    return value


def gold_calls(example: Example) -> Calls:
    """The gold as calls: first acceptable non-``""`` value per parameter (omittable-only params left out).

    Empty for examples without gold (irrelevance).
    """
    out: Calls = []
    for gold in example.gold or ():
        for name, params in gold.items():
            args = {p: _concrete(v) for p, vals in params.items() if (v := _first_value(vals)) is not _MISSING}
            out.append(ToolCall(name, args))
    return out


def _typo(text: str, rng: random.Random) -> str:
    """A one-edit misspelling of ``text`` that differs from it."""
    for _ in range(8):
        chars = list(text)
        op = rng.choice(("swap", "drop", "insert", "replace")) if len(chars) > 1 else "insert"
        i = rng.randrange(len(chars)) if chars else 0
        if op == "swap" and i + 1 < len(chars):
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        elif op == "drop":
            del chars[i]
        elif op == "insert":
            chars.insert(i, rng.choice(string.ascii_lowercase))
        else:
            chars[i] = rng.choice(string.ascii_lowercase)
        out = "".join(chars)
        if out != text:
            return out
    return text + "x"


def _pick(calls: Calls, rng: random.Random, pred: Callable[[Any], bool]) -> tuple[int, str] | None:
    """A random (call index, parameter) whose value satisfies ``pred``."""
    spots = [(i, p) for i, c in enumerate(calls) for p, v in c.arguments.items() if pred(v)]
    return rng.choice(spots) if spots else None


def _set_arg(calls: Calls, i: int, param: str, value: Any) -> Calls:
    args = dict(calls[i].arguments)
    args[param] = value
    return [*calls[:i], ToolCall(calls[i].name, args), *calls[i + 1:]]


def _drop_arg(calls: Calls, i: int, param: str) -> Calls:
    args = {k: v for k, v in calls[i].arguments.items() if k != param}
    return [*calls[:i], ToolCall(calls[i].name, args), *calls[i + 1:]]


def _rename_call(calls: Calls, i: int, name: str) -> Calls:
    return [*calls[:i], ToolCall(name, calls[i].arguments), *calls[i + 1:]]


def _value_mutator(pred: Callable[[Any], bool], change: Callable[[Any, random.Random], Any]) -> _Mutator:
    """A mutator that replaces one value satisfying ``pred`` by ``change(value)``."""
    def mutate(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
        spot = _pick(calls, rng, pred)
        if spot is None:
            return None
        i, param = spot
        return _set_arg(calls, i, param, change(calls[i].arguments[param], rng))
    return mutate


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_str(v: Any) -> bool:
    return type(v) is str and v.strip() != ""


def _change_string(v: str, rng: random.Random) -> str:
    return rng.choice((_typo(v, rng), v + " " + rng.choice(("today", "now", "please")), v[: max(1, len(v) // 2)]))


def _change_number(v: Any, rng: random.Random) -> Any:
    return rng.choice((v + 1, v * 2 if v not in (0, 0.0) else 3, -v if v else 7))


def _punctuate(v: str, rng: random.Random) -> str:
    return v.replace(" ", rng.choice(("-", "_", ", "))) if " " in v else v + "."


def _change_list(v: list[Any], rng: random.Random) -> list[Any]:
    if len(v) > 1 and rng.random() < 0.5:
        return v[:-1] if rng.random() < 0.5 else list(reversed(v))
    return [*v, v[0] if v else "extra"]


def _list_elems_to_str(v: list[Any], rng: random.Random) -> list[Any]:
    return [str(x) if is_number(x) else x for x in v]


def _list_elems_to_float(v: list[Any], rng: random.Random) -> list[Any]:
    return [float(x) if type(x) is int else x for x in v]


def _change_dict(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    out = dict(v)
    keys = sorted(out)
    if keys and rng.random() < 0.6:
        key = rng.choice(keys)
        val = out[key]
        if rng.random() < 0.4:
            del out[key]
        elif type(val) is str:
            out[key] = _change_string(val, rng)
        elif is_number(val):
            out[key] = _change_number(val, rng)
        else:
            out[key] = str(val)
    else:
        out[_typo("extra", rng)] = "value"
    return out


def _name_typo(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i = rng.randrange(len(calls))
    return _rename_call(calls, i, _typo(calls[i].name or "f", rng))


def _name_case(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i = rng.randrange(len(calls))
    name = calls[i].name or ""
    other = name.upper() if name != name.upper() else name.lower()
    return _rename_call(calls, i, other) if other != name else None


def _fabricated_name(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i = rng.randrange(len(calls))
    name = rng.choice(("get_" + (calls[i].name or "data").split(".")[-1], "search_web", "run_query"))
    return None if name in example.registry else _rename_call(calls, i, name)


def _safe_name(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    dotted = [i for i, c in enumerate(calls) if c.name and "." in c.name]
    if not dotted:
        return None
    i = rng.choice(dotted)
    return _rename_call(calls, i, openai_safe_name(calls[i].name or ""))


def _wrong_function(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i = rng.randrange(len(calls))
    others = [n for n in example.registry.names if n != calls[i].name]
    return _rename_call(calls, i, rng.choice(others)) if others else None


def _missing_required(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    spots = [(i, p) for i, c in enumerate(calls) for p in c.arguments
             if (t := example.registry.get(c.name)) is not None and p in t.required]
    if not spots:
        return None
    return _drop_arg(calls, *rng.choice(spots))


def _drop_param(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    spot = _pick(calls, rng, lambda v: True)
    return _drop_arg(calls, *spot) if spot else None


def _omit_optional(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    """Drop a parameter the gold marks as omittable (``""``): BFCL accepts this."""
    spots = [(i, p) for i, (c, g) in enumerate(zip(calls, example.gold or ()))
             for p in c.arguments if "" in (next(iter(g.values())).get(p) or [])]
    return _drop_arg(calls, *rng.choice(spots)) if spots else None


def _alt_value(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    spots = []
    for i, (call, gold) in enumerate(zip(calls, example.gold or ())):
        for p, vals in next(iter(gold.values())).items():
            current = call.arguments.get(p, _MISSING)
            alts = [c for v in vals if v != "" and (c := _concrete(v)) != current] if isinstance(vals, list) else []
            spots += [(i, p, v) for v in alts]
    if not spots:
        return None
    i, p, v = rng.choice(spots)
    return _set_arg(calls, i, p, v)


def _spurious_param(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i = rng.randrange(len(calls))
    tool = example.registry.get(calls[i].name)
    unused = [p for p in (tool.properties if tool else {}) if p not in calls[i].arguments]
    if unused and rng.random() < 0.5:  # allowed by the schema but not in the gold
        return _set_arg(calls, i, rng.choice(unused), rng.choice(("auto", 1, True)))
    return _set_arg(calls, i, rng.choice(("verbose", "extra_info", "callback")), rng.choice(("yes", 0, False)))


def _misspelt_param(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    spot = _pick(calls, rng, lambda v: True)
    if spot is None:
        return None
    i, p = spot
    args = {(_typo(k, rng) if k == p else k): v for k, v in calls[i].arguments.items()}
    return [*calls[:i], ToolCall(calls[i].name, args), *calls[i + 1:]]


def _parallel_only(mutate: _Mutator) -> _Mutator:
    def wrapped(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
        return mutate(example, calls, rng) if len(calls) > 1 else None
    return wrapped


def _reorder_calls(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    out = list(calls)
    while out == calls:
        rng.shuffle(out)
    return out


def _drop_call(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i = rng.randrange(len(calls))
    return calls[:i] + calls[i + 1:]


def _duplicate_call(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    i, j = rng.sample(range(len(calls)), 2)
    return [*calls[:j], calls[i], *calls[j + 1:]]


def _extra_call(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    return [*calls, rng.choice(calls)]


def _abstain(example: Example, calls: Calls, rng: random.Random) -> Calls | None:
    return []


_CALL_KINDS: dict[str, _Mutator] = {
    "abstain": _abstain,
    "extra_call": _extra_call,
    "name_typo": _name_typo,
    "name_case": _name_case,
    "fabricated_name": _fabricated_name,
    "safe_name": _safe_name,
    "wrong_function": _wrong_function,
    "missing_required": _missing_required,
    "drop_param": _drop_param,
    "omit_optional": _omit_optional,
    "alt_value": _alt_value,
    "spurious_param": _spurious_param,
    "misspelt_param": _misspelt_param,
    "string_change": _value_mutator(_is_str, _change_string),
    "case_change": _value_mutator(_is_str, lambda v, r: v.upper() if v != v.upper() else v.lower()),
    "punct_change": _value_mutator(_is_str, _punctuate),
    "number_change": _value_mutator(is_number, _change_number),
    "int_to_str": _value_mutator(_is_int, lambda v, r: str(v)),
    "int_to_float": _value_mutator(_is_int, lambda v, r: float(v)),
    "float_to_int": _value_mutator(lambda v: type(v) is float, lambda v, r: int(v)),
    "number_to_str": _value_mutator(lambda v: type(v) is float, lambda v, r: str(v)),
    "str_to_list": _value_mutator(_is_str, lambda v, r: [v]),
    "bool_flip": _value_mutator(lambda v: type(v) is bool, lambda v, r: not v),
    "bool_to_str": _value_mutator(lambda v: type(v) is bool, lambda v, r: str(v).lower()),
    "list_change": _value_mutator(lambda v: type(v) is list, _change_list),
    "list_to_str": _value_mutator(lambda v: type(v) is list, lambda v, r: ", ".join(map(str, v))),
    "list_elems_to_str": _value_mutator(lambda v: type(v) is list and any(map(is_number, v)), _list_elems_to_str),
    "list_elems_to_float": _value_mutator(lambda v: type(v) is list and any(map(_is_int, v)), _list_elems_to_float),
    "tuple_value": _value_mutator(lambda v: type(v) is list, lambda v, r: tuple(v)),
    "dict_change": _value_mutator(lambda v: type(v) is dict, _change_dict),
    "null_value": _value_mutator(lambda v: v is not None, lambda v, r: None),
    "reorder_calls": _parallel_only(_reorder_calls),
    "drop_call": _parallel_only(_drop_call),
    "duplicate_call": _parallel_only(_duplicate_call),
}


def _spurious_call(example: Example, rng: random.Random) -> Calls:
    """A call to a registered function with type-plausible values for its required parameters."""
    tool = rng.choice(list(example.registry))
    samples = {"integer": 3, "number": 2.5, "boolean": True, "array": ["a"], "object": {"k": "v"}}
    args = {p: samples.get(str((tool.properties.get(p) or {}).get("type")), "value") for p in tool.required}
    return [ToolCall(tool.name, args)]


PERTURBATION_KINDS: tuple[str, ...] = ("gold", *_CALL_KINDS, "spurious_call", "call_and_garbage", "fabricated_call",
                                       "unparsable")
"""Every kind ``perturbed_calls`` may return."""


def perturbed_calls(example: Example, rng: random.Random) -> list[tuple[str, Calls]]:
    """``(kind, calls)`` for every kind that applies to ``example``; deterministic given ``rng``.

    Gold-bearing examples get the gold and its mutations; no-call examples (irrelevance) get an
    abstention, an unparsable output and spurious calls.
    """
    if not example.gold:
        out: list[tuple[str, Calls]] = [("abstain", []), ("unparsable", [ToolCall(None, {})])]
        if len(example.registry):
            spurious = _spurious_call(example, rng)
            out += [("spurious_call", spurious), ("call_and_garbage", [*spurious, ToolCall(None, {})])]
        out.append(("fabricated_call", [ToolCall("lookup_answer", {"query": example.query[:40]})]))
        return out
    gold = gold_calls(example)
    out = [("gold", gold)]
    for kind, mutate in _CALL_KINDS.items():
        calls = mutate(example, gold, rng)
        if calls is not None:
            out.append((kind, calls))
    return out
