"""Where saag-opt keeps what outlives a run: the shipped data, the user's prompt store, the caches.

* Shipped, read-only: ``shipped("datasets")`` and ``shipped("prompts")`` (the seed reviewer
  prompts). The repository keeps them in its top-level ``datasets/`` and ``prompts/``; the build
  (setup.py) copies both into the wheel as ``saag_opt/_shipped/``, read through ``importlib.resources``.
* The user's prompt store (versions optimize creates, aliases): ``$SAAG_OPT_PROMPTS``, else
  ``$XDG_DATA_HOME/saag-opt/prompts``, else ``~/.local/share/saag-opt/prompts``: never inside
  site-packages, never inside a checkout (README's commands leave ``git status`` clean).
* The cache root, shared by every layer: ``models/`` (assembled GGUF files), ``logs/`` (embedded
  server logs), ``bfcl/`` (the fetched bfcl-eval wheel), ``dspy/`` (LM response cache),
  ``base-predictions/`` (the base agent's first answers, shared by evaluate, optimize and compare).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

SHIPPED_PACKAGE_DIR = "_shipped"
"""Folder inside the installed ``saag_opt`` package that carries ``datasets/`` and ``prompts/``."""
PROMPTS_ENV = "SAAG_OPT_PROMPTS"
"""Environment variable that moves the user's prompt store."""

CACHE_ENV = "SAAG_OPT_CACHE"
"""Environment variable that moves the cache root."""
MODELS_ENV = "SAAG_OPT_MODELS"
"""Environment variable that moves only the (large, shareable) assembled model files."""


def shipped(kind: Literal["datasets", "prompts"]) -> Path:
    """The shipped ``datasets/`` or seed ``prompts/`` folder (read-only).

    An installed wheel carries them as package data (``saag_opt/_shipped/<kind>``); a source
    checkout (editable install, ``PYTHONPATH``) reads the repository's top-level folder, which is
    what the build copies. Wheels are installed unpacked, so the resource is a real directory.
    """
    packaged = resources.files("saag_opt") / SHIPPED_PACKAGE_DIR / kind
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / kind


def user_data_dir() -> Path:
    """``$XDG_DATA_HOME/saag-opt``, else ``~/.local/share/saag-opt``: what the user makes and keeps."""
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "saag-opt"


def prompts_dir() -> Path:
    """The user's prompt store: ``$SAAG_OPT_PROMPTS``, else ``<user data dir>/prompts``.

    Why not ``./prompts``: a wheel install has no such folder, and in a checkout new versions would
    dirty the repository's seed folder.
    """
    if env := os.environ.get(PROMPTS_ENV):
        return Path(env).expanduser()
    return user_data_dir() / "prompts"


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
