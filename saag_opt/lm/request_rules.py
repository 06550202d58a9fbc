"""What each OpenAI model family takes in a chat completion request: sent, renamed, dropped or refused.

Why one table: OpenAI refuses, per model, parameters another model takes (``reasoning_effort`` on
gpt-4o-mini, ``max_tokens`` or ``temperature=0`` on gpt-5-mini, ``json_schema`` on chatgpt-4o-latest),
and a refusal in the middle of a paid run wastes what was spent before it. ``SaagLM`` shapes every
request (LM defaults and each call) with ``shape_request``; the set-ups check what they will ask of
a model with ``check_model`` when they are validated, before any call.

The family is read from the model id, whatever server serves it (a proxy that serves ``gpt-5-mini``
needs the same request). A name no OpenAI family claims (the embedded model, a vLLM or Ollama
model) is ``other``: its request goes as given, since nothing is known of what it refuses.

Sources: OpenAI's API reference (``max_tokens`` "is not compatible with o-series models"; the
reasoning guide's efforts per model) and the ``openai`` SDK's ``CompletionCreateParams``; the
tests check every request body the project builds against both. Pure: no I/O.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from saag_opt.errors import ConfigError
from saag_opt.lm.specs import ModelSpec

FamilyName = Literal["reasoning", "chat", "legacy", "no-system", "other"]
Action = Literal["send", "rename", "drop", "refuse"]

REASONING_MIN_TOKENS = 16000
"""The least output room a reasoning model gets: its hidden reasoning counts against it (dspy refuses less)."""

PARAMETERS = ("temperature", "max_tokens", "max_completion_tokens", "reasoning_effort", "response_format", "n",
              "logprobs", "parallel_tool_calls", "seed")
"""The request parameters the rules decide; any other goes as given."""


@dataclass(frozen=True)
class Family:
    """One model family: which model ids it holds and what each of ``PARAMETERS`` becomes."""

    name: FamilyName
    pattern: re.Pattern[str] | None
    """Matches the bare model id (``gpt-5-mini``; a ``<provider>/`` prefix is removed first); None = the rest."""
    rules: Mapping[str, Action]
    efforts: frozenset[str] = frozenset()
    """``reasoning_effort`` values it takes (empty: none)."""
    json_schema: bool = True
    """It takes a ``json_schema`` response format (structured outputs)."""
    why: str = ""


_SEND_ALL: dict[str, Action] = dict.fromkeys(PARAMETERS, "send")

# Most specific first: the first family whose pattern matches the model id is its family.
FAMILIES: tuple[Family, ...] = (
    Family("no-system", re.compile(r"^o1-(?:mini|preview)(?:-\d{4}-\d{2}-\d{2})?$", re.I),
           dict.fromkeys(PARAMETERS, "refuse"),
           why="it takes no system message and no tools, and every saag-opt role sends both; use o3-mini or o4-mini"),
    Family("reasoning", re.compile(r"^(?:o[1-9](?:-[a-z0-9-]+)?|gpt-5(?:\.\d+)*(?:-(?!chat)[a-z0-9.-]+)?)$", re.I),
           {**_SEND_ALL, "temperature": "drop", "max_tokens": "rename", "logprobs": "refuse"},
           efforts=frozenset({"low", "medium", "high"}),
           why="it is a reasoning model (only its default temperature, max_completion_tokens, no logprobs)"),
    Family("chat", re.compile(r"^(?:gpt-4o|gpt-4\.1|gpt-5(?:\.\d+)*-chat|chatgpt-4o)(?:[-.][a-z0-9.-]+)?$", re.I),
           {**_SEND_ALL, "reasoning_effort": "refuse"},
           why="it is a chat model, not a reasoning model (reasoning_effort is for gpt-5*, o1, o3, o4-mini)"),
    Family("legacy", re.compile(r"^(?:gpt-4|gpt-4-turbo|gpt-3\.5-turbo)(?:-[a-z0-9.-]+)?$", re.I),
           {**_SEND_ALL, "reasoning_effort": "refuse"}, json_schema=False,
           why="it is an older chat model (no reasoning_effort, no json_schema response format)"),
    Family("other", None, _SEND_ALL, efforts=frozenset({"minimal", "low", "medium", "high"}),
           why="not an OpenAI model id: sent as given"),
)

_GPT5_ORIGINAL = re.compile(r"^gpt-5(?:-(?!chat)[a-z0-9-]+)?$", re.I)
"""gpt-5, gpt-5-mini, gpt-5-nano: the reasoning models that also take ``minimal`` (the o-series and gpt-5.N do not)."""
_NO_JSON_SCHEMA = re.compile(r"^(?:chatgpt-4o.*|gpt-4o-2024-05-13)$", re.I)
"""Chat models that take a json_object but not a json_schema response format."""

_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _model_id(spec: ModelSpec | str) -> str:
    """The bare model id: no ``<provider>/`` prefix, no ``@URL``; a fine-tune (``ft:gpt-4o-mini:org::id``) is its base's."""
    model = spec.model if isinstance(spec, ModelSpec) else str(spec)
    model = model.split("@", 1)[0].rsplit("/", 1)[-1]
    return model.split(":")[1] if model.startswith("ft:") and model.count(":") >= 1 else model


def family_of(spec: ModelSpec | str) -> Family:
    """The family of a model spec or id (``other`` for a name no OpenAI family claims)."""
    model = _model_id(spec)
    return next(f for f in FAMILIES if f.pattern is None or f.pattern.match(model))


def efforts_of(spec: ModelSpec | str) -> frozenset[str]:
    """The ``reasoning_effort`` values the model takes (empty: it takes none)."""
    family = family_of(spec)
    if family.name == "reasoning" and _GPT5_ORIGINAL.match(_model_id(spec)):
        return family.efforts | {"minimal"}
    return family.efforts if family.rules["reasoning_effort"] == "send" else frozenset()


def takes_json_schema(spec: ModelSpec | str) -> bool:
    """The model takes ``response_format={"type": "json_schema", ...}``."""
    family = family_of(spec)
    return family.json_schema and family.rules["response_format"] != "refuse" \
        and not _NO_JSON_SCHEMA.match(_model_id(spec))


def is_reasoning_model(spec: ModelSpec | str) -> bool:
    """OpenAI reasoning families (gpt-5* except *-chat*, o-series): default temperature, >=16k tokens."""
    return family_of(spec).name in ("reasoning", "no-system")


def shape_request(spec: ModelSpec | str, options: Mapping[str, Any], *, warn: bool = True) -> dict[str, Any]:
    """``options`` as the model takes them: renamed, dropped (warned once per model and value) or refused.

    Raises:
        ConfigError: one line naming the model, the parameter and what to do instead.
    """
    family = family_of(spec)
    model = _model_id(spec)
    out = dict(options)
    for name in PARAMETERS:
        if name not in out or out[name] is None:
            continue
        action = family.rules[name]
        value = out[name]
        if action == "refuse":
            raise ConfigError(f"{model} does not take {name}={value!r}: {family.why}")
        if name == "reasoning_effort" and family.name != "other" and value not in efforts_of(spec):
            takes = ", ".join(sorted(efforts_of(spec))) or "none"
            raise ConfigError(f"{model} does not take reasoning_effort={value!r} (it takes: {takes})")
        if name == "response_format" and _schema(value) and not takes_json_schema(spec):
            raise ConfigError(f"{model} does not take a json_schema response format (structured outputs); "
                              "use a model that does (gpt-4o, gpt-4o-mini, gpt-4.1, gpt-5-mini, o3-mini)")
        if action == "drop":
            del out[name]
            if warn and value != 1.0:
                warn_once(f"{model} is a reasoning model: {name}={value} is ignored (it only takes the default)",
                          stacklevel=3)
    if family.rules["max_tokens"] == "rename" and out.get("max_tokens") is not None:
        out["max_completion_tokens"] = out.pop("max_tokens")
    if family.name == "reasoning" and out.get("max_completion_tokens") is not None:
        out["max_completion_tokens"] = max(int(out["max_completion_tokens"]), REASONING_MIN_TOKENS)
    return out


def check_model(spec: ModelSpec | str, role: str, *, reasoning_effort: str | None = None,
                json_schema: bool = False) -> None:
    """Refuse, before any call, a model that cannot take what ``role`` will ask of it.

    Raises:
        ConfigError: e.g. ``--reviewer gpt-4o-mini: gpt-4o-mini does not take reasoning_effort='low': ...``.
    """
    family = family_of(spec)
    asked: dict[str, Any] = {"reasoning_effort": reasoning_effort}
    if json_schema:
        asked["response_format"] = {"type": "json_schema", "json_schema": {"name": "check", "schema": {}}}
    try:
        if family.name == "no-system":
            raise ConfigError(f"{_model_id(spec)} cannot be the {role}: {family.why}")
        shape_request(spec, asked, warn=False)
    except ConfigError as exc:
        raise ConfigError(f"--{role} {spec}: {exc}") from None


def _schema(response_format: Any) -> bool:
    return isinstance(response_format, Mapping) and response_format.get("type") == "json_schema"


def warn_once(message: str, *, stacklevel: int = 2) -> None:
    """Warn with ``message`` once per process, whatever the warning filters (pytest shows every repeat)."""
    with _WARNED_LOCK:
        first = message not in _WARNED
        _WARNED.add(message)
    if first:
        warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)


__all__ = ["FAMILIES", "PARAMETERS", "REASONING_MIN_TOKENS", "Family", "check_model", "efforts_of", "family_of",
           "is_reasoning_model", "shape_request", "takes_json_schema", "warn_once"]
