"""Model specs: the strings users type after --base/--reviewer/--reflection (DESIGN section 9).

Accepted forms (each parsed by its backend in ``lm.backends``; a new backend brings its own form):

* ``gpt-4o``, ``gpt-5-mini``, ``o4-mini``, ``openai/<model>``: OpenAI (key from ``OPENAI_API_KEY``).
* ``openai/<model>@http://host:port/v1`` (or ``<model>@http://...``): any OpenAI-compatible server.
* ``local`` (= ``local:qwen2.5-coder-1.5b``) or ``local:<name>``: the embedded llama.cpp model.
* ``fake`` or ``fake@http://host:port/v1``: a scripted server (tests, demos); ``fake`` alone starts
  an in-process echo server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlparse

from saag_opt.credentials import mask_url_secrets, url_secrets
from saag_opt.errors import ConfigError

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
# Names only; the registry with packages and hashes lives in embedded.py (kept import-light here).
LOCAL_MODEL_NAMES = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")

_REASONING = re.compile(
    r"^(?:o[1-9](?:-[a-z0-9-]+)?|gpt-5(?:\.\d+)*(?:-(?!chat)[a-z0-9.-]+)?)$",
    re.IGNORECASE,
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model reference; rebuildable from ``.text``.

    Attributes:
        kind: the name of the backend that parsed it (``openai``, ``compatible``, ``local``, ``fake``, ...).
        model: the model id sent to the server (local: the registry name, e.g. qwen2.5-coder-0.5b).
        base_url: the server's ``/v1`` URL for compatible/fake servers, else None.
    """

    kind: str
    model: str
    base_url: str | None = None

    @property
    def label(self) -> str:
        """Short, filename-safe name for run dirs and artifacts (``gpt-4o``, ``local-qwen2.5-coder-1.5b``)."""
        if self.base_url is None:
            return _UNSAFE.sub("-", self.text)
        netloc = urlparse(self.base_url).netloc
        return _UNSAFE.sub("-", f"{self.model}-at-{netloc}").strip("-")

    @property
    def text(self) -> str:
        """The canonical spec string (its backend writes it); ``parse_model_spec(spec.text) == spec``."""
        from saag_opt.lm.backends import get_backend

        return get_backend(self.kind).spec_text(self)

    @property
    def native_tools(self) -> bool:
        """Whether ``tool_choice="auto"`` returns real ``tool_calls`` (llama.cpp's default template does not)."""
        from saag_opt.lm.backends import get_backend

        return get_backend(self.kind).native_tools

    @property
    def serial(self) -> bool:
        """The server answers one request at a time (an embedded model), so extra workers only queue."""
        from saag_opt.lm.backends import get_backend

        return get_backend(self.kind).serial

    def __str__(self) -> str:
        return self.text


def parse_model_spec(text: str | ModelSpec) -> ModelSpec:
    """Parse a model reference: the first registered backend that claims the text parses it.

    Raises:
        ConfigError: empty text, a bad URL, an unknown local model, or a form no backend claims.
    """
    from saag_opt.lm.backends import backend_forms, claim_spec

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


def is_reasoning_model(spec: ModelSpec | str) -> bool:
    """OpenAI reasoning families (gpt-5* except *-chat*, o1/o3/o4...) need temperature 1 and >=16k tokens."""
    model = spec.model if isinstance(spec, ModelSpec) else str(spec)
    return _REASONING.match(model.rsplit("/", 1)[-1]) is not None


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


__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "default_workers",
    "LOCAL_MODEL_NAMES",
    "ModelSpec",
    "is_reasoning_model",
    "parse_model_spec",
    "parse_server_url",
]
