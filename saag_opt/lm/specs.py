"""Model specs: the strings users type after --base/--reviewer/--reflection (DESIGN section 9).

Accepted forms:

* ``gpt-4o``, ``gpt-5-mini``, ``o4-mini``, ``openai/<model>``: OpenAI (key from ``OPENAI_API_KEY``).
* ``openai/<model>@http://host:port/v1`` (or ``<model>@http://...``): any OpenAI-compatible server.
* ``local`` (= ``local:qwen2.5-coder-1.5b``) or ``local:<name>``: the embedded llama.cpp model.
* ``fake`` or ``fake@http://host:port/v1``: a scripted server (tests, demos); ``fake`` alone starts
  an in-process echo server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from rapidfuzz import process

from saag_opt.errors import ConfigError

ModelKind = Literal["openai", "compatible", "local", "fake"]

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
# Names only; the registry with packages and hashes lives in embedded.py (kept import-light here).
LOCAL_MODEL_NAMES = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")

_OPENAI_NAME = re.compile(r"^(?:gpt-|chatgpt-|o\d|ft:|davinci|babbage|text-|computer-use)", re.IGNORECASE)
_REASONING = re.compile(
    r"^(?:o[1-9](?:-[a-z0-9-]+)?|gpt-5(?:\.\d+)*(?:-(?!chat)[a-z0-9.-]+)?)$",
    re.IGNORECASE,
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model reference; rebuildable from ``.text``.

    Attributes:
        kind: "openai" | "compatible" | "local" | "fake".
        model: the model id sent to the server (local: the registry name, e.g. qwen2.5-coder-0.5b).
        base_url: the server's ``/v1`` URL for compatible/fake servers, else None.
    """

    kind: ModelKind
    model: str
    base_url: str | None = None

    @property
    def label(self) -> str:
        """Short, filename-safe name for run dirs and artifacts (``gpt-4o``, ``local-qwen2.5-coder-1.5b``)."""
        if self.kind == "local":
            return f"local-{self.model}"
        if self.kind == "openai" or self.base_url is None:
            return _UNSAFE.sub("-", self.model)
        netloc = urlparse(self.base_url).netloc
        return _UNSAFE.sub("-", f"{self.model}-at-{netloc}").strip("-")

    @property
    def text(self) -> str:
        """The canonical spec string; ``parse_model_spec(spec.text) == spec``."""
        if self.kind == "local":
            return f"local:{self.model}"
        if self.kind == "fake":
            return "fake" if self.base_url is None else f"fake@{self.base_url}"
        if self.kind == "compatible":
            return f"openai/{self.model}@{self.base_url}"
        return self.model

    @property
    def native_tools(self) -> bool:
        """Whether ``tool_choice="auto"`` returns real ``tool_calls`` (llama.cpp's default template does not)."""
        return self.kind != "local"

    def __str__(self) -> str:
        return self.text


def parse_model_spec(text: str | ModelSpec) -> ModelSpec:
    """Parse a model reference (see the module docstring).

    Raises:
        ConfigError: empty text, a bad URL, an unknown local model, or an unrecognised name.
    """
    if isinstance(text, ModelSpec):
        return text
    raw = (text or "").strip()
    if not raw:
        raise ConfigError("model spec is empty: use e.g. gpt-4o, local, or openai/<model>@http://host:port/v1")
    lowered = raw.lower()
    if lowered == "local" or lowered.startswith("local:"):
        return _parse_local(raw)
    if lowered == "fake" or lowered.startswith("fake@"):
        return ModelSpec("fake", "fake", _parse_url(raw.split("@", 1)[1], raw) if "@" in raw else None)
    model, at, url_text = raw.partition("@")
    url = url_text if at else None
    if model.lower().startswith("openai/"):
        model = model.split("/", 1)[1]
    if not model:
        raise ConfigError(f"model spec {raw!r} has no model name before '@'")
    if url is not None:
        return ModelSpec("compatible", model, _parse_url(url, raw))
    if raw.lower().startswith("openai/") or _OPENAI_NAME.match(model):
        return ModelSpec("openai", model)
    raise ConfigError(
        f"unknown model {raw!r}: use an OpenAI model (gpt-4o, gpt-5-mini), "
        "openai/<model>@http://host:port/v1 for a compatible server, or local / local:<name>"
    )


def _parse_local(raw: str) -> ModelSpec:
    name = raw.split(":", 1)[1].strip().lower() if ":" in raw else DEFAULT_LOCAL_MODEL
    if name not in LOCAL_MODEL_NAMES:
        near = process.extractOne(name, LOCAL_MODEL_NAMES)
        hint = f" (did you mean local:{near[0]}?)" if near and near[1] >= 60 else ""
        choices = ", ".join(f"local:{n}" for n in LOCAL_MODEL_NAMES)
        raise ConfigError(f"unknown local model {name!r}{hint}; choices: {choices}")
    return ModelSpec("local", name)


def _parse_url(url: str, raw: str) -> str:
    parsed = urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"model spec {raw!r}: server URL must look like http://host:port/v1, got {url!r}")
    return url.strip().rstrip("/")


def is_reasoning_model(spec: ModelSpec | str) -> bool:
    """OpenAI reasoning families (gpt-5* except *-chat*, o1/o3/o4...) need temperature 1 and >=16k tokens."""
    model = spec.model if isinstance(spec, ModelSpec) else str(spec)
    if isinstance(spec, ModelSpec) and spec.kind == "local":
        return False
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
            if parse_model_spec(spec).kind == "local":
                return 1
        except ConfigError:
            continue  # a bad spec is reported where it is opened, with its flag name
    return 4


__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "default_workers",
    "LOCAL_MODEL_NAMES",
    "ModelKind",
    "ModelSpec",
    "is_reasoning_model",
    "parse_model_spec",
]
