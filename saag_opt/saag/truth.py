"""Ground-truth check with BFCL's semantics (docs/design.md §4).

``check_truth`` reproduces the ``valid`` flag of ``bfcl_eval``'s ``ast_checker`` (version
2026.3.23, Python rules) without importing it, so the pure core can score predictions offline and
fast. The rules, in BFCL's order, per call:

1. the function name must be the gold one (calls may use the OpenAI-safe spelling; it is resolved
   through the registry first);
2. every *schema*-required parameter must be present;
3. every given parameter must be both in the schema and in the gold, its type must match BFCL's
   original type (kept under ``x-bfcl-type``): ints are accepted for ``float``, not the reverse;
   ``tuple`` values may be lists; ``any`` means ``str``; a value of the gold's own type is accepted
   when the gold disagrees with the schema (BFCL's "variable" rule); arrays check their element
   type one level deep;
4. its value must be acceptable: strings after ``standardize_string`` (lowercase, without spaces
   and ``,./-_*^``, ``'`` read as ``"``); lists element-wise with their strings standardised;
   dicts key by key against each acceptable dict's own value lists; lists of dicts dict by dict;
   anything else by Python equality (so ``5 == 5.0`` and ``True == 1`` as in BFCL);
5. every gold parameter whose list lacks ``""`` must be present.

Categories decide the count: "parallel" in the name -> as many calls as gold calls, matched without
order by BFCL's greedy first-fit (for each gold call in order, the first unmatched call that passes);
"multiple" -> exactly one call, checked against the gold function chosen among several; otherwise
exactly one call. ``expect == "no_call"`` (irrelevance) is correct iff no call is made,
``"any_call"`` (live_relevance) iff at least one is. For those two rules an output holding a call
whose name is None (unparsable) counts as no call at all, as BFCL counts an undecodable output.

Speed: each example's gold calls are compiled once (kept by example identity; ``clear_caches``
empties them) and each gold parameter on its first use, reduced to the cheapest check that gives
BFCL's verdict (see ``_compile_param``). Strings equal to a gold string are accepted without
standardising; otherwise the gold strings are standardised once per parameter.

Deliberate deviations from BFCL, which would crash (KeyError/TypeError) on these inputs: types
outside BFCL's Python vocabulary (Java/JavaScript names, JSON Schema ``number``/``object``) map to
the nearest Python type; a missing type or a missing ``items`` type skips that type check; a gold
function absent from the registry is checked against its gold parameters only. Java and JavaScript
categories are checked with these Python rules on native JSON values (what a JSON tool-calling agent
emits), *not* with BFCL's string-encoded Java/JS semantics, so they are outside the agreement claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from saag_opt.model import BFCL_TYPE_KEY, Example, Registry, ToolCall
from saag_opt.saag.caches import register_cache
from saag_opt.saag.structure import allowed_params

__all__ = ["TruthResult", "check_truth", "standardize_string"]

_NONE_TYPE = type(None)

PY_TYPES: dict[str, type] = {
    # BFCL's PYTHON_TYPE_MAPPING, exactly.
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
    "dict": dict, "any": str,
    # Extensions for types BFCL's Python checker does not know (it would raise KeyError).
    "number": float, "double": float, "object": dict, "String": str, "char": str, "Any": str,
    "Boolean": bool, "bool": bool, "long": int, "byte": int, "short": int, "Bigint": int,
    "list": list, "ArrayList": list, "Array": list, "Queue": list, "Stack": list,
    "HashMap": dict, "Hashtable": dict, "null": _NONE_TYPE,
}
"""BFCL type name -> the Python type a value must have."""

_FLOAT_TYPES = frozenset({"float", "number", "double"})
_NESTED_TYPES = frozenset({"array", "tuple", "list", "ArrayList", "Array", "Queue", "Stack"})


@dataclass(frozen=True, slots=True)
class TruthResult:
    """Whether a prediction is correct by BFCL's rules, and a short machine-readable reason.

    ``reason`` is ``"ok"`` when correct, else one of ``no_call``, ``unexpected_call``,
    ``wrong_count``, ``unparsable_call``, ``wrong_func_name``, ``bad_arguments``,
    ``missing_required:<p>``, ``unexpected_param:<p>``, ``type:<p>``, ``value:<p>``,
    ``missing_param:<p>`` (a gold parameter that may not be omitted), ``no_match:<func>:<reason>``
    (parallel: no call matches that gold call), ``no_gold``.
    """

    correct: bool
    reason: str


_OK = TruthResult(True, "ok")


def standardize_string(text: str) -> str:
    """BFCL's ``standardize_string``: drop spaces and ``,./-_*^``, lowercase, ``'`` -> ``"``.

    Chained ``replace`` calls: two to four times faster than ``str.translate`` with a deletion table
    (a ``replace`` that finds nothing returns its input), and the order of deletions is irrelevant.
    """
    return (text.replace(" ", "").replace(",", "").replace(".", "").replace("/", "").replace("-", "")
            .replace("_", "").replace("*", "").replace("^", "").lower().replace("'", '"'))


def _std(value: Any) -> Any:
    return standardize_string(value) if type(value) is str else value


def _std_seq(seq: Any) -> list[Any] | None:
    """Standardise a sequence the way BFCL indexes it (a str yields its characters); None = BFCL crash."""
    if type(seq) is list or type(seq) is str:
        return [_std(x) for x in seq]
    return None


@dataclass(frozen=True, slots=True)
class _DictGold:
    """One acceptable dict: key -> standardised acceptable values (None: BFCL could not read it)."""

    raw: Mapping[str, Any]
    std: Mapping[str, list[Any] | None]


def _dict_gold(item: Any) -> _DictGold | None:
    if type(item) is not dict:
        return None
    return _DictGold(item, {k: _std_seq(v) for k, v in item.items()})


def _dict_ok(value: Any, gold: _DictGold | None) -> bool:
    """BFCL ``dict_checker`` against one acceptable dict."""
    if gold is None or type(value) is not dict:
        return False
    for key, val in value.items():
        if key not in gold.raw:
            return False
        allowed = gold.std[key]
        if allowed is None or _std(val) not in allowed:
            return False
    for key, allowed_raw in gold.raw.items():
        if key not in value:
            try:
                if "" not in allowed_raw:
                    return False
            except TypeError:
                return False
    return True


class _Param:
    """One parameter of one gold call.

    Cheap to build; the standardised gold is computed on first use, so a gold call checked once
    costs about what BFCL spends, and one checked again costs less.
    """

    __slots__ = ("name", "btype", "pytype", "nested", "values", "gold_type", "_strings", "_lists", "_dicts",
                 "_list_dicts")

    def __init__(self, name: str, values: list[Any], schema: Any) -> None:
        btype = _bfcl_type(schema)
        self.name, self.btype, self.values = name, btype, values
        self.pytype: type | None = PY_TYPES.get(btype) if btype is not None else None
        self.nested: type | None = None
        if btype in _NESTED_TYPES:
            item_type = _bfcl_type(schema.get("items"))
            self.nested = PY_TYPES.get(item_type) if item_type is not None else None
        self.gold_type = _first_type(values)
        self._strings: frozenset[str] | None = None
        self._lists: list[list[Any]] | None = None
        self._dicts: list[_DictGold | None] | None = None
        self._list_dicts: list[tuple[_DictGold | None, ...] | None] | None = None

    @property
    def std_strings(self) -> frozenset[str]:
        """Standardised acceptable strings (BFCL ``string_checker``)."""
        if self._strings is None:
            self._strings = frozenset(standardize_string(v) for v in self.values if type(v) is str)
        return self._strings

    @property
    def std_lists(self) -> list[list[Any]]:
        """Acceptable lists with their strings standardised (BFCL ``list_checker``)."""
        if self._lists is None:
            self._lists = [s for s in (_std_seq(v) for v in self.values) if s is not None]
        return self._lists

    @property
    def dicts(self) -> list[_DictGold | None]:
        """Acceptable dicts (BFCL ``dict_checker`` skips the ``""`` marker)."""
        if self._dicts is None:
            self._dicts = [_dict_gold(v) for v in self.values if v != ""]
        return self._dicts

    @property
    def list_dicts(self) -> list[tuple[_DictGold | None, ...] | None]:
        """Acceptable lists of dicts (BFCL ``list_dict_checker``; ``""`` is an empty list)."""
        if self._list_dicts is None:
            self._list_dicts = [tuple(_dict_gold(d) for d in v) if type(v) in (list, str) else None
                                for v in self.values]
        return self._list_dicts


def _first_type(values: Any) -> type | None:
    for item in values:
        if item != "":
            return type(item)
    return None


def _bfcl_type(schema: Any) -> str | None:
    if type(schema) is not dict and not isinstance(schema, Mapping):
        return None
    btype = schema.get(BFCL_TYPE_KEY) or schema.get("type")
    return btype if type(btype) is str or isinstance(btype, str) else None


def _nested_ok(value: Any, param: _Param) -> bool:
    """BFCL's one-level element type check: some acceptable value must admit every element."""
    for item in param.values:
        if type(item) is not list:
            return True
        item_type = _first_type(item)
        if all(type(x) is param.nested or (item_type is not None and type(x) is item_type) for x in value):
            return True
    return False


def _type_ok(value: Any, param: _Param) -> tuple[bool, bool]:
    """BFCL ``type_checker``: (valid, is_variable)."""
    is_variable = param.gold_type is not None and param.gold_type is not param.pytype
    if type(value) is param.pytype:
        if param.nested is None:
            return True, is_variable
        return _nested_ok(value, param), is_variable
    if param.gold_type is not None and type(value) is param.gold_type:
        return True, True
    return False, is_variable


def _value_ok(value: Any, param: _Param) -> bool:
    """BFCL's value rules for a value that passed the type check as a non-variable."""
    pytype = param.pytype
    if pytype is dict:
        return any(_dict_ok(value, d) for d in param.dicts)
    if pytype is list and param.nested is dict:
        return any(_list_dict_ok(value, gold) for gold in param.list_dicts)
    if pytype is str:
        return standardize_string(value) in param.std_strings
    if pytype is list:
        return [_std(x) for x in value] in param.std_lists
    return value in param.values


def _list_dict_ok(value: list[Any], gold: tuple[_DictGold | None, ...] | None) -> bool:
    if gold is None or len(value) != len(gold):
        return False
    return all(_dict_ok(v, g) for v, g in zip(value, gold))


def _check_param(value: Any, param: _Param) -> str | None:
    """Reason the value is wrong, or None."""
    btype = param.btype
    if btype == "tuple" and type(value) is tuple:
        value = list(value)
    elif btype in _FLOAT_TYPES and type(value) is int:
        value = float(value)
    if param.pytype is None:  # unknown type: no type check, compare like BFCL would compare values
        if type(value) is str:
            return None if standardize_string(value) in param.std_strings else f"value:{param.name}"
        return None if value in param.values else f"value:{param.name}"
    valid, is_variable = _type_ok(value, param)
    if not valid:
        return f"type:{param.name}"
    if not is_variable:
        return None if _value_ok(value, param) else f"value:{param.name}"
    return None if value in param.values else f"value:{param.name}"


_STR, _EQ, _GENERIC = 0, 1, 2
"""Kinds of compiled parameter: a string compared after standardisation, a number or bool compared
with ``==``, anything else through the full ``_Param`` rules."""

CompiledParam = list[Any]
"""``[kind, payload, pytype, standardised]``: ``_STR`` -> the acceptable values, and their standardised
strings once a value needed them; ``_EQ`` -> the acceptable values (the type must be ``pytype``);
``_GENERIC`` -> a ``_Param``."""


def _compile_param(name: str, vals: Any, schema: Any) -> CompiledParam:
    """One gold parameter, reduced to the cheapest check that gives BFCL's verdict.

    Most BFCL parameters are strings or numbers whose gold values have the schema's type; for those
    the type and value rules of ``_check_param`` collapse to one type test and one membership test
    (a float parameter takes an int as a float first, so its int gold values compare equal).
    Everything else (lists, dicts, tuples, unknown types, gold of another type) keeps the full rules.
    """
    values = vals if type(vals) is list else (list(vals) if isinstance(vals, tuple) else [vals])
    if type(schema) is dict:  # the usual case, without _bfcl_type's generality
        btype = schema.get(BFCL_TYPE_KEY) or schema.get("type")
        pytype = PY_TYPES.get(btype) if isinstance(btype, str) else None
    else:
        btype = _bfcl_type(schema)
        pytype = PY_TYPES.get(btype) if btype is not None else None
    gold_type = type(values[0]) if values and values[0] != "" else _first_type(values)
    if pytype is str and (gold_type is None or gold_type is str):
        return [_STR, values, str, None]
    if (pytype is int or pytype is bool or pytype is float) and (
            gold_type is None or gold_type is pytype or (pytype is float and gold_type is int)):
        return [_EQ, values, pytype, None]
    return [_GENERIC, _Param(name, values, schema), pytype, None]


def _standardised_in(value: str, param: CompiledParam) -> bool:
    """BFCL ``string_checker`` for a value that equals no gold string as it is.

    Equal strings standardise equally, so the caller accepts those first; the gold is
    standardised once.
    """
    standardised = param[3]
    if standardised is None:
        standardised = param[3] = frozenset(standardize_string(v) for v in param[1] if type(v) is str)
    return standardize_string(value) in standardised


class _GoldCall:
    """One gold call, ready to check calls against; its parameters are compiled on first use.

    Compiling lazily matters when scoring new predictions: a call with the wrong name, or one that
    fails on its first parameter, never pays for the other parameters.
    """

    __slots__ = ("name", "required", "props", "spec", "compiled")

    def __init__(self, name: str, required: tuple[str, ...], props: Mapping[str, Any] | None,
                 spec: Mapping[str, Any]) -> None:
        self.name, self.required, self.props, self.spec = name, required, props, spec
        self.compiled: dict[str, CompiledParam] = {}

    def param(self, pname: Any) -> CompiledParam | None:
        """The compiled parameter, or None when it is not both in the schema and in the gold."""
        props = self.props
        if not isinstance(pname, str) or pname not in self.spec or (props is not None and pname not in props):
            return None
        compiled = _compile_param(pname, self.spec[pname], props[pname] if props is not None else None)
        self.compiled[pname] = compiled
        return compiled


def _make_gold_call(gold: Any, registry: Registry) -> _GoldCall | None:
    if not gold or (type(gold) is not dict and not isinstance(gold, Mapping)):
        return None
    name = next(iter(gold))
    spec = gold[name]
    if type(spec) is not dict and not isinstance(spec, Mapping):
        spec = {}
    tool = registry.get(name)
    if tool is None:  # a gold function outside the registry: its gold parameters are the schema
        return _GoldCall(str(name), (), None, spec)
    return _GoldCall(name, tool.required, allowed_params(tool), spec)


def _omittable(vals: Any) -> bool:
    """BFCL lets a gold parameter be left out iff ``""`` is among its values."""
    return isinstance(vals, (list, tuple, str)) and "" in vals


def _check_call(name: str, args: Any, gold: _GoldCall) -> str | None:
    """BFCL ``simple_function_checker``: the reason the call fails, or None."""
    if name != gold.name:
        return "wrong_func_name"
    if type(args) is not dict and not isinstance(args, Mapping):
        return "bad_arguments"
    for pname in gold.required:
        if pname not in args:
            return f"missing_required:{pname}"
    compiled = gold.compiled
    for pname, value in args.items():
        param = compiled.get(pname) or gold.param(pname)
        if param is None:
            return f"unexpected_param:{pname}"
        kind, payload, pytype, _ = param
        if kind == _STR:  # the two common cases inline; see _compile_param
            if type(value) is not str:
                return f"type:{pname}"
            if value not in payload and not _standardised_in(value, param):
                return f"value:{pname}"
        elif kind == _EQ:
            if pytype is float and type(value) is int:
                value = float(value)
            if type(value) is not pytype:
                return f"type:{pname}"
            if value not in payload:
                return f"value:{pname}"
        else:
            reason = _check_param(value, payload)
            if reason is not None:
                return reason
    if len(args) < len(gold.spec):
        for pname, vals in gold.spec.items():
            if pname not in args and not _omittable(vals):
                return f"missing_param:{pname}"
    return None


_PLANS: dict[int, tuple[Example, tuple[_GoldCall | None, ...]]] = {}
_PLAN_CACHE_MAX = 20_000
register_cache(_PLANS.clear)


def _plan(example: Example) -> tuple[_GoldCall | None, ...]:
    """Gold calls of an example, kept by identity (with the example, so the id stays valid)."""
    hit = _PLANS.get(id(example))
    if hit is not None and hit[0] is example:
        return hit[1]
    registry = example.registry
    plan = tuple([_make_gold_call(g, registry) for g in example.gold]) if example.gold else ()
    if len(_PLANS) >= _PLAN_CACHE_MAX:
        _PLANS.clear()
    _PLANS[id(example)] = (example, plan)
    return plan


def _check_parallel(names: list[str], calls: Sequence[ToolCall], plan: Sequence[_GoldCall | None]) -> TruthResult:
    """BFCL's greedy, order-free matching: each gold call takes the first unmatched call that passes."""
    matched: set[int] = set()
    for gold in plan:
        if gold is None:
            return TruthResult(False, "no_gold")
        first_reason = None
        for index, call in enumerate(calls):
            if index in matched:
                continue
            reason = _check_call(names[index], call.arguments, gold)
            if reason is None:
                matched.add(index)
                break
            if first_reason is None and reason != "wrong_func_name":
                first_reason = reason
        else:
            return TruthResult(False, f"no_match:{gold.name}:{first_reason or 'wrong_func_name'}")
    return _OK


def _check_calls(calls: Sequence[ToolCall], names: list[str], example: Example) -> TruthResult:
    plan = _plan(example)
    if not plan:
        return TruthResult(False, "no_gold")
    category = example.category
    parallel = "parallel" in category
    expected = len(plan) if (parallel or "multiple" in category) else 1
    if len(calls) != expected:
        return TruthResult(False, "wrong_count")
    if parallel:
        return _check_parallel(names, calls, plan)
    gold = plan[0]
    if gold is None:
        return TruthResult(False, "no_gold")
    reason = _check_call(names[0], calls[0].arguments, gold)
    return _OK if reason is None else TruthResult(False, reason)


def check_truth(calls: Sequence[ToolCall], example: Example) -> TruthResult:
    """Is this prediction correct by BFCL's rules? Never raises on arbitrary JSON-like calls.

    ``calls`` empty means the agent abstained. See the module docstring for the rules.
    """
    try:
        names = _call_names(calls, example.registry)
        # One unparsable call makes the whole output undecodable, which BFCL counts as no call.
        made = len(calls) if names is not None else 0
        if example.expect == "no_call":
            return _OK if made == 0 else TruthResult(False, "unexpected_call")
        if example.expect == "any_call":
            return _OK if made > 0 else TruthResult(False, "no_call")
        if not calls:
            return TruthResult(False, "no_call")
        if names is None:
            return TruthResult(False, "unparsable_call")
        return _check_calls(calls, names, example)
    except Exception as exc:  # noqa: BLE001 - a value whose == or hashing raises is a wrong call, not a crash
        return TruthResult(False, f"uncheckable:{type(exc).__name__}")


def _call_names(calls: Sequence[ToolCall], registry: Registry) -> list[str] | None:
    """Each call's name resolved through the registry (OpenAI-safe spellings), None if one is unparsable."""
    names = []
    for call in calls:
        name = call.name
        if not isinstance(name, str):
            return None
        names.append(registry.resolve(name) or name)
    return names
