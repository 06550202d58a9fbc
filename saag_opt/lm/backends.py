"""Model backends: how each kind of ``ModelSpec`` turns into an OpenAI-compatible endpoint.

One tiny registry per plug point (STYLE section 5): ``register``, ``get_backend``, ``backend_names``.
Every backend ends in the same place, ``dspy.LM("openai/<model>", api_base=..., api_key=...)``, so
the local model, test servers and OpenAI share one code path, one cache and one cost path.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.lm.specs import ModelKind, ModelSpec

if TYPE_CHECKING:
    from saag_opt.testing.scripted_server import ScriptedOpenAIServer

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
    """Resolves a spec to an endpoint.

    Contract: ``endpoint`` does no inference; it may start a local server (idempotent, one per
    model per process). It raises ``ModelUnavailableError`` with one actionable line for a missing
    key, runtime, weights or an unreachable server, and never returns a half-ready endpoint.
    """

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        """Return a ready endpoint for ``spec``."""
        ...


def _namespace(url: str) -> int:
    return int(hashlib.sha256(url.encode()).hexdigest()[:12], 16)


class OpenAIBackend:
    """api.openai.com; the key must be in ``OPENAI_API_KEY`` (checked before any network)."""

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        if not key:
            raise ModelUnavailableError(MISSING_KEY_MESSAGE)
        return Endpoint(f"openai/{spec.model}", None, key)


class CompatibleBackend:
    """Any OpenAI-compatible server at ``spec.base_url`` (vLLM, llama.cpp, LM Studio, a proxy)."""

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        if not spec.base_url:
            raise ConfigError(f"model spec {spec.text!r} needs a server URL: openai/<model>@http://host:port/v1")
        key = os.environ.get("OPENAI_API_KEY", "").strip() or "none"
        return Endpoint(f"openai/{spec.model}", spec.base_url, key, _namespace(spec.base_url))


class LocalBackend:
    """The embedded llama.cpp model (started on first use) or ``$SAAG_OPT_LOCAL_URL``."""

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        from saag_opt.lm.embedded import get_local_model, local_base_url

        model = get_local_model(spec.model)
        url = local_base_url(spec.model)
        namespace = _namespace(url) if os.environ.get("SAAG_OPT_LOCAL_URL") else None
        return Endpoint(f"openai/{model.alias}", url, "local", namespace)


class FakeBackend:
    """A scripted server: ``fake@URL`` uses that server, bare ``fake`` an in-process echo server."""

    def __init__(self) -> None:
        self._server: ScriptedOpenAIServer | None = None
        self._lock = threading.Lock()

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        url = spec.base_url or self._default_server_url()
        return Endpoint(f"openai/{spec.model}", url, "fake", _namespace(url))

    def _default_server_url(self) -> str:
        from saag_opt.testing.scripted_server import ScriptedOpenAIServer

        with self._lock:
            if self._server is None:
                self._server = ScriptedOpenAIServer(model="fake").start()
            return self._server.url


_BACKENDS: dict[str, ModelBackend] = {}


def register_backend(kind: str, backend: ModelBackend) -> None:
    """Add or replace the backend for a spec kind."""
    _BACKENDS[kind] = backend


def get_backend(kind: ModelKind | str) -> ModelBackend:
    """Registry lookup; a miss names the choices."""
    try:
        return _BACKENDS[kind]
    except KeyError:
        raise ConfigError(f"Unknown model backend {kind!r}. Available: {backend_names()}") from None


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


register_backend("openai", OpenAIBackend())
register_backend("compatible", CompatibleBackend())
register_backend("local", LocalBackend())
register_backend("fake", FakeBackend())

if TYPE_CHECKING:
    _openai: ModelBackend = OpenAIBackend()
    _compatible: ModelBackend = CompatibleBackend()
    _local: ModelBackend = LocalBackend()
    _fake: ModelBackend = FakeBackend()

__all__ = [
    "MISSING_KEY_MESSAGE",
    "CompatibleBackend",
    "Endpoint",
    "FakeBackend",
    "LocalBackend",
    "ModelBackend",
    "OpenAIBackend",
    "backend_names",
    "get_backend",
    "register_backend",
]
