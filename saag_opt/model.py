"""The data model every layer speaks: tools, registries, calls, examples.

Values are frozen, slotted dataclasses: cheap to build on the hot path (the cascade runs on
every call) and safe to share between threads. Files on disk are validated with pydantic where
they are read (``saag_opt.data``), not here.

BFCL writes parameter types in its own vocabulary (``dict``, ``float``, ``tuple``, ``any``).
``normalise_schema`` maps them to JSON Schema once, on load, and keeps the original under
``x-bfcl-type`` where it differs, because the ground-truth check needs it (BFCL accepts an int
for a ``float`` but not for a ``number``-typed ``integer``, and ``any`` accepts anything).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

BFCL_TO_JSON_SCHEMA: dict[str, str] = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "double": "number",
    "string": "string",
    "char": "string",
    "String": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "ArrayList": "array",
    "Array": "array",
    "Queue": "array",
    "Stack": "array",
    "dict": "object",
    "object": "object",
    "HashMap": "object",
    "Hashtable": "object",
    "any": "string",
    "Any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "Bigint": "integer",
}
"""BFCL / Gorilla type names -> JSON Schema types (same table as ``bfcl_eval`` GORILLA_TO_OPENAPI)."""

BFCL_TYPE_KEY = "x-bfcl-type"
"""Schema key that keeps BFCL's original type where normalisation changed it."""


_NESTED_SCHEMA_KEYS = frozenset(("items", "additionalProperties", "anyOf", "oneOf", "allOf"))


def normalise_schema(schema: Any) -> Any:
    """Return a JSON Schema copy of a BFCL-style schema (recursively); unknown types pass through.

    Plain dicts and lists take a fast path (exact type checks; ABC ``isinstance`` checks were most
    of the cost when the runtime guard converts a live agent's tools on every decision).
    """
    kind = type(schema)
    if kind is list:
        return [normalise_schema(s) for s in schema]
    if kind is not dict and not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and type(value) is str:
            mapped = BFCL_TO_JSON_SCHEMA.get(value, value)
            out["type"] = mapped
            if mapped != value:
                out[BFCL_TYPE_KEY] = value
        elif key == "properties" and (type(value) is dict or isinstance(value, Mapping)):
            out[key] = {name: normalise_schema(sub) for name, sub in value.items()}
        elif key in _NESTED_SCHEMA_KEYS:
            out[key] = normalise_schema(value)
        else:
            out[key] = value
    return out


_SCHEMA_LEAF_KEYS = frozenset(("type", "description", "default", "enum", "format", "title", "examples"))
"""Keys of a parameter schema that hold no nested schema (``_already_json_schema`` checks only its type)."""


def _already_json_schema(schema: Any) -> bool:
    """True when ``normalise_schema`` would change nothing but make a copy (no BFCL type to map).

    A scan allocates nothing, so an OpenAI tool (JSON Schema already) is read without a deep copy.
    """
    kind = type(schema)
    if kind is list:
        return all(_already_json_schema(s) for s in schema)
    if kind is not dict:
        return not isinstance(schema, Mapping)  # another mapping type: the slow path copies it
    for key, value in schema.items():
        if key == "type":
            if type(value) is str and BFCL_TO_JSON_SCHEMA.get(value, value) != value:
                return False
        elif key == "properties":
            if type(value) is not dict:
                return False
            for sub in value.values():
                if type(sub) is dict and _SCHEMA_LEAF_KEYS.issuperset(sub):  # a plain parameter: no recursion
                    declared = sub.get("type")
                    if type(declared) is str and BFCL_TO_JSON_SCHEMA.get(declared, declared) != declared:
                        return False
                elif not _already_json_schema(sub):
                    return False
        elif key in _NESTED_SCHEMA_KEYS and not _already_json_schema(value):
            return False
    return True


_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]*")


def openai_safe_name(name: str) -> str:
    """OpenAI tool names allow ``[a-zA-Z0-9_-]``; BFCL names may contain dots (``math.factorial``)."""
    if _SAFE_NAME.fullmatch(name):
        return name
    return "".join(ch if (ch.isalnum() and ch.isascii()) or ch in "_-" else "_" for ch in name)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One registered function: name, description and a JSON Schema ``object`` for its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    required: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ToolSpec:
        """Build from a BFCL/OpenAI function dict (``{"name","description","parameters"}``).

        Accepts the OpenAI wrapper ``{"type": "function", "function": {...}}`` too.
        """
        if "function" in raw and isinstance(raw["function"], Mapping):
            raw = raw["function"]
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"function has no name: {json.dumps(raw)[:120]}")
        given = raw.get("parameters") or {"type": "object", "properties": {}}
        # JSON Schema already (every OpenAI tool): a shallow copy is the normalised schema.
        params = dict(given) if type(given) is dict and _already_json_schema(given) else normalise_schema(given)
        if not isinstance(params, dict):
            raise ValueError(f"function {name!r}: parameters must be an object")
        params.setdefault("type", "object")
        props = params.setdefault("properties", {})
        if type(props) is not dict and not isinstance(props, Mapping):
            raise ValueError(f"function {name!r}: 'properties' must be an object of parameter schemas, "
                             f"got {type(props).__name__}")
        for key, sub in props.items():
            if type(sub) is not dict and not isinstance(sub, Mapping):
                raise ValueError(f"function {name!r}: parameter {key!r} must be a schema object "
                                 f"(e.g. {{\"type\": \"string\"}}), got {json.dumps(sub)[:60]}")
        required = params.get("required") or []
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError(f"function {name!r}: 'required' must be a list of names")
        undeclared = [r for r in required if r not in props]
        if undeclared:  # every call would fail SAAG stage 2 whether it passes the parameter or not
            raise ValueError(f"function {name!r}: required parameter(s) {', '.join(map(repr, undeclared))} "
                             "not declared in 'properties'")
        return cls(name=name, description=str(raw.get("description") or ""), parameters=params,
                   required=tuple(required))

    @property
    def properties(self) -> Mapping[str, Any]:
        """Allowed parameters: name -> sub-schema."""
        props = self.parameters.get("properties")
        return props if isinstance(props, Mapping) else {}

    @property
    def safe_name(self) -> str:
        """The OpenAI-safe spelling of ``name``."""
        return openai_safe_name(self.name)

    def to_dict(self) -> dict[str, Any]:
        """Plain function dict (JSON Schema parameters, original name)."""
        return {"name": self.name, "description": self.description, "parameters": _plain(self.parameters)}

    def to_openai_tool(self) -> dict[str, Any]:
        """OpenAI ``tools`` entry with the safe name and without our private schema keys."""
        return {"type": "function", "function": {"name": self.safe_name, "description": self.description,
                                                 "parameters": _strip_private(self.parameters)}}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _strip_private(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_private(v) for k, v in value.items() if not str(k).startswith("x-")}
    if isinstance(value, (list, tuple)):
        return [_strip_private(v) for v in value]
    return value


class Registry(Sequence[ToolSpec]):
    """Ordered tools with lookup by name; safe (dot-free) names resolve back to the original."""

    __slots__ = ("_tools", "_by_name", "_by_safe")

    def __init__(self, tools: Sequence[ToolSpec] = ()) -> None:
        self._tools: tuple[ToolSpec, ...] = tuple(tools)
        self._by_name: dict[str, ToolSpec] = {}
        self._by_safe: dict[str, ToolSpec] = {}
        for tool in self._tools:
            if tool.name in self._by_name:
                raise ValueError(f"duplicate tool name in registry: {tool.name!r}")
            self._by_name[tool.name] = tool
            self._by_safe.setdefault(tool.safe_name, tool)

    @classmethod
    def from_dicts(cls, functions: Sequence[Mapping[str, Any]]) -> Registry:
        """Build from a list of BFCL/OpenAI function dicts."""
        return cls([ToolSpec.from_dict(f) for f in functions])

    def __getitem__(self, index: Any) -> Any:
        return self._tools[index]

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Registry) and self._tools == other._tools

    def __hash__(self) -> int:
        return hash(tuple(t.name for t in self._tools))

    def __repr__(self) -> str:
        return f"Registry({[t.name for t in self._tools]})"

    @property
    def names(self) -> tuple[str, ...]:
        """Registered names in order."""
        return tuple(t.name for t in self._tools)

    def get(self, name: str | None) -> ToolSpec | None:
        """The tool called exactly ``name``, or None."""
        return self._by_name.get(name) if isinstance(name, str) else None

    def resolve(self, name: str | None) -> str | None:
        """Map a name as a model may write it (original or OpenAI-safe) to the registered name."""
        if not isinstance(name, str):
            return None
        if name in self._by_name:
            return name
        tool = self._by_safe.get(name)
        return tool.name if tool is not None else None

    def to_dicts(self) -> list[dict[str, Any]]:
        """Plain function dicts, in order."""
        return [t.to_dict() for t in self._tools]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One predicted call. ``name`` None means nothing parsable was found for this call."""

    name: str | None
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.name, canonical_json(self.arguments)))

    def to_dict(self) -> dict[str, Any]:
        """``{"name", "arguments"}``."""
        return {"name": self.name, "arguments": _plain(self.arguments)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ToolCall:
        """Inverse of ``to_dict``; ``arguments`` may be a JSON string (OpenAI wire format)."""
        args = raw.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        if not isinstance(args, Mapping):
            raise ValueError("arguments must be an object")
        name = raw.get("name")
        return cls(name=name if isinstance(name, str) else None, arguments=dict(args))


ParseStatus = Literal["ok", "empty", "unparsable"]
"""``ok``: calls were found; ``empty``: the output holds no call (abstention); ``unparsable``: it
looked like a call but could not be read."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """What an agent answered: its calls (empty tuple = abstain), raw text and parse status."""

    calls: tuple[ToolCall, ...] = ()
    raw: str | None = None
    status: ParseStatus = "ok"

    @property
    def abstained(self) -> bool:
        """True when no call at all was made."""
        return not self.calls

    @property
    def declined(self) -> bool:
        """No call, and the reply was read: the agent chose not to call (an unreadable reply is no choice)."""
        return not self.calls and self.status != "unparsable"


Expectation = Literal["calls", "no_call", "any_call"]
"""What counts as correct: the gold calls; no call at all (irrelevance); any call (live_relevance)."""

GoldCall = Mapping[str, Mapping[str, Sequence[Any]]]
"""BFCL form of one expected call: ``{function_name: {param: [acceptable values]}}``;
``""`` among the values means the parameter may be omitted."""


@dataclass(frozen=True, slots=True)
class Example:
    """One evaluation item. ``gold`` is never shown to an agent; only ``messages`` and ``registry`` are."""

    id: str
    category: str
    messages: tuple[Mapping[str, Any], ...]
    registry: Registry
    gold: tuple[GoldCall, ...] | None = None
    expect: Expectation = "calls"
    split: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.expect == "calls" and not self.gold:
            raise ValueError(f"example {self.id!r}: expect='calls' needs gold calls")

    @property
    def query(self) -> str:
        """The user query Q that arguments are grounded in: every user message, joined by newlines."""
        return "\n".join(str(m.get("content") or "") for m in self.messages if m.get("role") == "user")

    def with_split(self, split: str) -> Example:
        """A copy tagged with its split."""
        return Example(self.id, self.category, self.messages, self.registry, self.gold, self.expect,
                       split, self.source)

    def with_registry(self, registry: Registry, *, id: str | None = None, category: str | None = None) -> Example:
        """A copy with another registry (registry-size benchmark)."""
        return Example(id or self.id, category or self.category, self.messages, registry, self.gold,
                       self.expect, self.split, self.source)


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr,
                              allow_nan=True)
"""``json.dumps`` with these options builds this encoder on every call; one instance is reused."""


def canonical_json(value: Any) -> str:
    """Stable JSON for hashing and cache keys (sorted keys, NaN spelled out, never raises)."""
    return _CANONICAL.encode(value)


def is_number(value: Any) -> bool:
    """True for ints and finite or infinite floats, False for bools (a JSON ``true`` is not 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A number that is not NaN or infinite."""
    return is_number(value) and (isinstance(value, int) or math.isfinite(value))


StageReached = Literal[1, 2, 3, "passed"]
"""The first SAAG stage a call failed, or ``"passed"`` when it cleared all three."""


Deferred = tuple[Callable[..., tuple[str, ...]], tuple[Any, ...]]
"""``(function, args)`` that builds a report's correction texts when they are first read."""


_Report = TypeVar("_Report", bound="DeferredCorrections")


class DeferredCorrections:
    """Mixin for frozen, unslotted report dataclasses whose ``corrections`` may be built lazily.

    Scoring reads the metrics of every call but the psi texts of none, and building them is about
    a fifth of the cascade's cost. ``_from_fields(fields, deferred)`` makes a report without the
    ``corrections`` key; the first read calls ``deferred`` once and stores the texts, so a report
    reads exactly as if they had been built eagerly (equality, ``repr``, ``to_dict``, pickling and
    copies included). For a missing key to reach ``__getattr__``, the subclass must delete its
    class attribute ``corrections`` (the dataclass default) after decoration.
    """

    __slots__ = ()

    @classmethod
    def _from_fields(cls: type[_Report], fields: dict[str, Any], deferred: Deferred | None = None) -> _Report:
        """A report from a dict of its fields, without ``__init__`` (the cascade's hot path).

        ``fields`` holds every field, or every one but ``corrections`` when ``deferred`` builds
        them. The dict becomes the instance's ``__dict__`` (not copied): pass a fresh one. This is
        several times cheaper than the frozen dataclass ``__init__``, which sets each field with
        its own ``object.__setattr__`` call.
        """
        report = object.__new__(cls)
        if deferred is not None:
            fields["_deferred"] = deferred
        object.__setattr__(report, "__dict__", fields)
        return report

    def __getattr__(self, name: str) -> Any:
        """Build deferred corrections on first access (only called when normal lookup fails)."""
        if name == "corrections":
            state = self.__dict__
            deferred = state.get("_deferred")
            if deferred is not None:
                texts = deferred[0](*deferred[1])
                state["corrections"] = texts  # stored before the deferral is dropped: thread-safe
                state.pop("_deferred", None)
                return texts
            if "corrections" in state:  # another thread finished meanwhile
                return state["corrections"]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy the built corrections, never the deferral."""
        self.corrections  # noqa: B018 - builds them
        return self.__dict__


@dataclass(frozen=True)
class CascadeReport(DeferredCorrections):
    """What the SAAG cascade found for one call (``saag_opt.saag.run_cascade`` builds it).

    The cascade is strict: metrics of stages the call never reached are None, so any mean over
    them is stage-conditional. ``corrections`` are the psi messages for this call; they are built
    from the call, the registry and the query only, never from gold. A call can pass and still
    carry a drift correction (paper section 2.2); ``clean`` is False then.

    Unlike the other values here it is not slotted: the cascade builds one per call and fills its
    ``__dict__`` in one step, and may defer building ``corrections`` until they are read (see
    ``DeferredCorrections``).
    """

    stage_reached: StageReached
    passed: bool
    fnem: Literal[-1, 0, 1]
    ncs: float | None = None
    nearest_name: str | None = None
    rpr: float | None = None
    missing_required: tuple[str, ...] = ()
    pds: Mapping[str, float] = field(default_factory=dict)
    drifted: Mapping[str, str] = field(default_factory=dict)
    spurious: tuple[str, ...] = ()
    spr: float | None = None
    avem: float | None = None
    qslo: float | None = None
    vhr: float | None = None
    vhr_ctx: float | None = None
    h: Mapping[str, float] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    calibrated: Mapping[str, str] = field(default_factory=dict)
    """Calibrated grounding only: parameters the paper's stage 3 missed but a rule accepted (param ->
    rule, ``saag_opt.saag.calibration``); empty in paper mode."""
    corrections: tuple[str, ...] = ()

    def __hash__(self) -> int:
        return hash(canonical_json(self.to_dict()))

    @property
    def clean(self) -> bool:
        """Passed with nothing to correct (no drift either); a gate wants more (``PredictionReport.vouched``)."""
        return self.passed and not self.corrections

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (mappings copied, tuples as lists)."""
        return {
            "stage_reached": self.stage_reached, "passed": self.passed, "fnem": self.fnem,
            "ncs": self.ncs, "nearest_name": self.nearest_name, "rpr": self.rpr,
            "missing_required": list(self.missing_required), "pds": dict(self.pds),
            "drifted": dict(self.drifted), "spurious": list(self.spurious), "spr": self.spr,
            "avem": self.avem, "qslo": self.qslo, "vhr": self.vhr, "vhr_ctx": self.vhr_ctx,
            "h": dict(self.h), "assumptions": list(self.assumptions), "calibrated": dict(self.calibrated),
            "corrections": list(self.corrections),
        }


del CascadeReport.corrections  # the default lives in __init__; a missing key must reach __getattr__
