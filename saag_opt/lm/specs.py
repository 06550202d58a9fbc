"""Model specs: the value the strings users type after --base/--reviewer/--reflection parse to.

A value type only: ``parse_model_spec`` (in ``lm.backends``, the registry) asks each backend to claim
the text, and that backend fills the spec, so this module imports no backend (docs/design.md §9).
Accepted forms (a new backend brings its own form):

* ``gpt-4o``, ``gpt-5-mini``, ``o4-mini``, ``openai/<model>``: OpenAI (key from ``OPENAI_API_KEY``).
* ``openai/<model>@http://host:port/v1`` (or ``<model>@http://...``): any OpenAI-compatible server.
* ``local`` (= ``local:qwen2.5-coder-1.5b``) or ``local:<name>``: the embedded llama.cpp model.
* ``fake`` or ``fake@http://host:port/v1``: a scripted server (tests, demos); ``fake`` alone starts
  an in-process echo server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlparse

from saag_opt.credentials import mask_url_secrets, url_secrets
from saag_opt.errors import ConfigError

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
# Names only; the registry with packages and hashes lives in embedded.py (kept import-light here).
LOCAL_MODEL_NAMES = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model reference, self-contained: rebuildable from ``.text``.

    Get one from ``parse_model_spec`` (``saag_opt.lm.backends``): the backend that claims the text
    fills the derived fields (``text``, ``native_tools``, ``serial``), so a spec answers for itself
    without asking the registry. Equality and hashing see only ``kind``, ``model`` and ``base_url``.

    Attributes:
        kind: the name of the backend that parsed it (``openai``, ``compatible``, ``local``, ``fake``, ...).
        model: the model id sent to the server (local: the registry name, e.g. qwen2.5-coder-0.5b).
        base_url: the server's ``/v1`` URL for compatible/fake servers, else None.
        text: the canonical spec string, written by its backend: ``parse_model_spec(spec.text) == spec``.
            A spec built by hand without it reads as its model id (``<model>@<url>`` with a server).
        native_tools: ``tool_choice="auto"`` returns real ``tool_calls`` (llama.cpp's default template does not).
        serial: the server answers one request at a time (an embedded model), so extra workers only queue.
    """

    kind: str
    model: str
    base_url: str | None = None
    text: str = field(default="", compare=False)
    native_tools: bool = field(default=True, compare=False)
    serial: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if not self.text:
            text = self.model if self.base_url is None else f"{self.model}@{self.base_url}"
            object.__setattr__(self, "text", text)

    @property
    def label(self) -> str:
        """Short, filename-safe name for run dirs and artifacts (``gpt-4o``, ``local-qwen2.5-coder-1.5b``)."""
        if self.base_url is None:
            return _UNSAFE.sub("-", self.text)
        netloc = urlparse(self.base_url).netloc
        return _UNSAFE.sub("-", f"{self.model}-at-{netloc}").strip("-")

    def __str__(self) -> str:
        return self.text


def parse_server_url(url: str, raw: str) -> str:
    """``http(s)://host[:port]/...`` without a trailing slash, for specs that name a server.

    Raises:
        ConfigError: not an http(s) URL with a host.
    """
    if url_secrets(url):  # the spec is written to run.json, cache namespaces and messages; a secret must not be
        raise ConfigError(f"model spec {mask_url_secrets(raw, url)!r}: the server URL carries credentials (a "
                          "password or a key in its query); they would be written into run files: drop them and "
                          "export OPENAI_API_KEY instead")
    parsed = urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"model spec {raw!r}: server URL must look like http://host:port/v1, got {url!r}")
    return url.strip().rstrip("/")


__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MODEL_NAMES",
    "ModelSpec",
    "parse_server_url",
]
