"""Model backends: each parses its own spec form and turns it into an OpenAI-compatible endpoint.

One tiny registry per plug point (docs/design.md §15): ``register_backend``, ``get_backend``,
``backend_names``. ``parse_model_spec`` asks the backends, the most recently registered first; the
first whose ``parse`` claims the text wins and fills the spec's derived fields (its canonical text,
``native_tools``, ``serial``), so a new backend is one class plus one ``register_backend`` call.
Every backend ends in the same place, ``dspy.LM("openai/<model>", api_base=..., api_key=...)``, so
the local model, test servers and OpenAI share one code path, one cache and one cost path.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from rapidfuzz import process

from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.lm.embedded.model_file import get_local_model
from saag_opt.lm.embedded.server import local_base_url
from saag_opt.lm.scripted_server import ScriptedOpenAIServer
from saag_opt.lm.specs import DEFAULT_LOCAL_MODEL, LOCAL_MODEL_NAMES, ModelSpec, parse_server_url

if TYPE_CHECKING:
    from saag_opt.lm.scripted_server import ScriptedOpenAIServer

MISSING_KEY_MESSAGE = "OPENAI_API_KEY is not set: export it, or run offline with --base local --reviewer local"


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send requests for one spec.

    Attributes:
        model: the dspy model string, always ``openai/<id>``.
        api_base: server URL, or None for api.openai.com.
        api_key: the key to send (never logged or stored in run files).
        cache_namespace: separates dspy cache entries of different servers that serve the same
            model id (dspy's cache key ignores api_base); None for OpenAI and the local models.
    """

    model: str
    api_base: str | None
    api_key: str | None
    cache_namespace: int | None = None


class ModelBackend(Protocol):
    """Parses its spec form and resolves a spec to an endpoint.

    Contract: ``parse`` returns None for text that is not its form (another backend may claim it),
    a ``ModelSpec`` whose ``kind`` is the name it is registered under, or raises ``ConfigError``
    for its own form with a bad part; ``parse(spec_text(spec)) == spec``. ``parse_model_spec`` fills
    the spec's derived fields from ``spec_text``, ``native_tools`` and ``serial``. ``endpoint`` does no
    inference; it may start a local server (idempotent, one per model per process). It raises
    ``ModelUnavailableError`` with one actionable line for a missing key, runtime, weights or an
    unreachable server, and never returns a half-ready endpoint.
    """

    @property
    def form(self) -> str | None:
        """The spec form for error messages (None: not advertised, e.g. test servers)."""
        ...

    @property
    def native_tools(self) -> bool:
        """``tool_choice="auto"`` returns real ``tool_calls``."""
        ...

    @property
    def serial(self) -> bool:
        """The server answers one request at a time (default workers drop to 1)."""
        ...

    def parse(self, text: str) -> ModelSpec | None:
        """The spec if ``text`` is this backend's form, else None."""
        ...

    def spec_text(self, spec: ModelSpec) -> str:
        """The canonical text of ``spec``."""
        ...

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        """Return a ready endpoint for ``spec``."""
        ...


class BackendFacts:
    """Defaults for a backend of a remote OpenAI-style server (override what differs)."""

    form: str | None = None
    native_tools = True
    serial = False


def _namespace(url: str) -> int:
    return int(hashlib.sha256(url.encode()).hexdigest()[:12], 16)


_OPENAI_NAME = re.compile(r"^(?:gpt-|chatgpt-|o\d|ft:|davinci|babbage|text-|computer-use)", re.IGNORECASE)


class OpenAIBackend(BackendFacts):
    """api.openai.com; the key must be in ``OPENAI_API_KEY`` (checked before any network)."""

    form = "an OpenAI model (gpt-4o, gpt-5-mini)"

    def parse(self, text: str) -> ModelSpec | None:
        """``gpt-4o``, ``o4-mini``, ``openai/<model>`` (no ``@URL``: that is a compatible server)."""
        if "@" in text:
            return None
        model = text.split("/", 1)[1] if text.lower().startswith("openai/") else text
        if text.lower().startswith("openai/") or _OPENAI_NAME.match(model):
            return ModelSpec("openai", model) if model else None
        return None

    def spec_text(self, spec: ModelSpec) -> str:
        """The bare model name."""
        return spec.model

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        """api.openai.com with the key from ``OPENAI_API_KEY``."""
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        if not key:
            raise ModelUnavailableError(MISSING_KEY_MESSAGE)
        return Endpoint(f"openai/{spec.model}", None, key)


class CompatibleBackend(BackendFacts):
    """Any OpenAI-compatible server at ``spec.base_url`` (vLLM, llama.cpp, LM Studio, a proxy)."""

    form = "openai/<model>@http://host:port/v1 for a compatible server"

    def parse(self, text: str) -> ModelSpec | None:
        """``[openai/]<model>@<url>``."""
        model, at, url = text.partition("@")
        if not at:
            return None
        model = model.split("/", 1)[1] if model.lower().startswith("openai/") else model
        if not model:
            raise ConfigError(f"model spec {text!r} has no model name before '@'")
        return ModelSpec("compatible", model, parse_server_url(url, text))

    def spec_text(self, spec: ModelSpec) -> str:
        """``openai/<model>@<url>``."""
        return f"openai/{spec.model}@{spec.base_url}"

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        """The server at ``spec.base_url`` (key from ``OPENAI_API_KEY`` if set)."""
        if not spec.base_url:
            raise ConfigError(f"model spec {spec.text!r} needs a server URL: openai/<model>@http://host:port/v1")
        key = os.environ.get("OPENAI_API_KEY", "").strip() or "none"
        return Endpoint(f"openai/{spec.model}", spec.base_url, key, _namespace(spec.base_url))


class LocalBackend(BackendFacts):
    """The embedded llama.cpp model (started on first use) or ``$SAAG_OPT_LOCAL_URL``."""

    form = "local / local:<name>"
    native_tools = False  # llama.cpp's default chat template does not return tool_calls
    serial = True  # one request at a time: more workers only queue and break its prompt cache

    def parse(self, text: str) -> ModelSpec | None:
        """``local`` or ``local:<name>`` (a known embedded model)."""
        lowered = text.lower()
        if lowered != "local" and not lowered.startswith("local:"):
            return None
        name = text.split(":", 1)[1].strip().lower() if ":" in text else DEFAULT_LOCAL_MODEL
        if name not in LOCAL_MODEL_NAMES:
            near = process.extractOne(name, LOCAL_MODEL_NAMES)
            hint = f" (did you mean local:{near[0]}?)" if near and near[1] >= 60 else ""
            choices = ", ".join(f"local:{n}" for n in LOCAL_MODEL_NAMES)
            raise ConfigError(f"unknown local model {name!r}{hint}; choices: {choices}")
        return ModelSpec("local", name)

    def spec_text(self, spec: ModelSpec) -> str:
        """``local:<name>``."""
        return f"local:{spec.model}"

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        """The embedded server (started on first use) or ``$SAAG_OPT_LOCAL_URL``."""
        model = get_local_model(spec.model)
        url = local_base_url(spec.model)
        # Another server at $SAAG_OPT_LOCAL_URL may serve other weights under the same alias; a parent's
        # own embedded server ($SAAG_OPT_LOCAL_SHARED, tune --processes) serves the same ones: same cache.
        external = os.environ.get("SAAG_OPT_LOCAL_URL") and not os.environ.get("SAAG_OPT_LOCAL_SHARED")
        namespace = _namespace(url) if external else None
        return Endpoint(f"openai/{model.alias}", url, "local", namespace)


class FakeBackend(BackendFacts):
    """A scripted server: ``fake@URL`` uses that server, bare ``fake`` an in-process echo server."""

    def parse(self, text: str) -> ModelSpec | None:
        """``fake`` or ``fake@<url>``."""
        lowered = text.lower()
        if lowered != "fake" and not lowered.startswith("fake@"):
            return None
        return ModelSpec("fake", "fake", parse_server_url(text.split("@", 1)[1], text) if "@" in text else None)

    def spec_text(self, spec: ModelSpec) -> str:
        """``fake`` or ``fake@<url>``."""
        return "fake" if spec.base_url is None else f"fake@{spec.base_url}"

    def __init__(self) -> None:
        self._server: ScriptedOpenAIServer | None = None
        self._lock = threading.Lock()

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        """The scripted server at ``spec.base_url``, or an in-process echo server."""
        url = spec.base_url or self._default_server_url()
        return Endpoint(f"openai/{spec.model}", url, "fake", _namespace(url))

    def _default_server_url(self) -> str:
        with self._lock:
            if self._server is None:
                self._server = ScriptedOpenAIServer(model="fake").start()
            return self._server.url


_BACKENDS: dict[str, ModelBackend] = {}


def register_backend(kind: str, backend: ModelBackend) -> None:
    """Add or replace the backend for a spec kind (a new kind is asked before the ones registered earlier)."""
    _BACKENDS.pop(kind, None)
    _BACKENDS[kind] = backend


def claim_spec(text: str) -> ModelSpec | None:
    """The spec of the most recently registered backend that claims ``text``, filled by it (None if none does)."""
    for backend in reversed(_BACKENDS.values()):
        spec = backend.parse(text)
        if spec is not None:
            return replace(spec, text=backend.spec_text(spec), native_tools=backend.native_tools,
                           serial=backend.serial)
    return None


def parse_model_spec(text: str | ModelSpec) -> ModelSpec:
    """Parse a model reference: the most recently registered backend that claims the text parses it.

    Raises:
        ConfigError: empty text, a bad URL, an unknown local model, or a form no backend claims.
    """
    if isinstance(text, ModelSpec):
        return text
    raw = (text or "").strip()
    if not raw:
        raise ConfigError("model spec is empty: use e.g. gpt-4o, local, or openai/<model>@http://host:port/v1")
    spec = claim_spec(raw)
    if spec is None:
        forms = backend_forms()
        raise ConfigError(f"unknown model {raw!r}: use {', '.join(forms[:-1])}, or {forms[-1]}")
    return spec


def default_workers(*specs: ModelSpec | str | None) -> int:
    """Concurrency when the user gave none: 1 with an embedded model, else 4.

    Why: the llama.cpp server answers one request at a time, so extra workers only queue, inflate
    every measured latency and break its prompt-prefix (KV) cache between alternating prompts.
    """
    for spec in specs:
        if spec is None:
            continue
        try:
            if parse_model_spec(spec).serial:
                return 1
        except ConfigError:
            continue  # a bad spec is reported where it is opened, with its flag name
    return 4


def backend_forms() -> list[str]:
    """The advertised spec forms, for error messages."""
    return [b.form for b in _BACKENDS.values() if b.form]


def get_backend(kind: str) -> ModelBackend:
    """Registry lookup; a miss names the choices."""
    try:
        return _BACKENDS[kind]
    except KeyError:
        raise ConfigError(f"Unknown model backend {kind!r}. Available: {backend_names()}") from None


def backend_names() -> list[str]:
    """Registered backend kinds."""
    return sorted(_BACKENDS)


register_backend("openai", OpenAIBackend())
register_backend("compatible", CompatibleBackend())  # asked before openai: it claims <model>@<url>
register_backend("local", LocalBackend())
register_backend("fake", FakeBackend())  # asked before compatible: it claims fake@<url>

if TYPE_CHECKING:
    _openai: ModelBackend = OpenAIBackend()
    _compatible: ModelBackend = CompatibleBackend()
    _local: ModelBackend = LocalBackend()
    _fake: ModelBackend = FakeBackend()

__all__ = [
    "MISSING_KEY_MESSAGE",
    "BackendFacts",
    "CompatibleBackend",
    "Endpoint",
    "FakeBackend",
    "LocalBackend",
    "ModelBackend",
    "OpenAIBackend",
    "backend_forms",
    "backend_names",
    "claim_spec",
    "default_workers",
    "get_backend",
    "parse_model_spec",
    "register_backend",
]
