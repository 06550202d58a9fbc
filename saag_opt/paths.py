"""Where saag-opt keeps what outlives a run: one cache root shared by every layer.

Layout under the root: ``models/`` (assembled GGUF files), ``logs/`` (embedded server logs),
``bfcl/`` (the fetched bfcl-eval wheel), ``dspy/`` (LM response cache), ``base-predictions/``
(the base agent's first answers, shared by evaluate, optimize and compare).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SAAG_OPT_CACHE"
"""Environment variable that moves the cache root."""
MODELS_ENV = "SAAG_OPT_MODELS"
"""Environment variable that moves only the (large, shareable) assembled model files."""


def cache_dir() -> Path:
    """``$SAAG_OPT_CACHE``, else ``$XDG_CACHE_HOME/saag-opt``, else ``~/.cache/saag-opt``."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "saag-opt"


def models_dir() -> Path:
    """Assembled GGUF files: ``$SAAG_OPT_MODELS``, else ``<cache root>/models``.

    Separate so that tests and experiments can isolate every other cache while sharing one copy
    of a 0.5-1.1 GB model file.
    """
    if env := os.environ.get(MODELS_ENV):
        return Path(env).expanduser()
    return cache_dir() / "models"


def base_predictions_dir() -> Path:
    """The base agent's cached first answers (keyed by model, prompt and example, never gold)."""
    return cache_dir() / "base-predictions"


def configure_lm_cache() -> Path:
    """Point dspy's disk cache at ``<cache root>/dspy`` (unless ``DSPY_CACHEDIR`` says otherwise).

    Why: re-runs, resumes and ``compare`` must find earlier LM replies, so every command uses the
    same persistent cache rather than dspy's default or a temp dir.
    """
    import dspy

    where = Path(os.environ.get("DSPY_CACHEDIR") or cache_dir() / "dspy")
    where.mkdir(parents=True, exist_ok=True)
    dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(where))
    return where
