"""dspy 3.4's client made lighter with the same results, once per process by ``open_lm``.

Two per-call costs are removed, and the first call's one-time work is done before the workers start.

Why: experiments/bench/concurrency.py (16 workers, scripted server) measures our client's CPU per LM
call; under the GIL that CPU is what keeps evaluate from filling its workers. Two costs in dspy's
path depend on nothing that changes between calls of a run, yet are paid on every call:

* ``model_metadata.model_info`` is called twice per call and, for a model name not in dspy's bundled
  map (every compatible, local or fake server), scans the whole map (~4.5 ms).
* lm15's transport asks ``urllib.request.getproxies()`` on every request, which on Linux decodes every
  environment variable, name and value, twice (~20% of the client's CPU per call in a profile).

Both stay exact: the price lookup is memoised (the bundled map is static; callers get a deep copy as
before), and the proxies are still read from the environment on every request (a proxy set mid-run is
honoured), but only the ``*_proxy`` variables are decoded.

The one-time work: dspy's first call imports its execution modules and loads the price map (a gzip of
JSON: ~22 ms alone, 19 of them parsing under the GIL; ~70 ms amid the first wave). Done there, it ran
while 16 workers' first requests queued behind it (the bench's first wave of examples paid ~0.2 s
more than later ones); done here, it runs once, alone.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import sys
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any

import dspy.clients.capabilities as capabilities
import dspy.clients.costs as costs
import dspy.clients.model_metadata as metadata
from dspy._vendor.lm15.transports import _proxy as lm15_proxy


@functools.cache
def lighten_dspy_call_path() -> None:
    """Install both replacements (once per process; later calls do nothing)."""
    _memoize_model_info()
    if getattr(lm15_proxy, "getproxies", None) is urllib.request.getproxies:
        lm15_proxy.getproxies = environment_proxies
    do_first_call_work()


FIRST_CALL_MODULES = ("dspy.clients.execution", "dspy._vendor.lm15.cloud.hosts", "dspy.clients.disk_serialization")
"""What dspy 3.4 imports on its first LM call (and what those import): found by comparing ``sys.modules``."""


def do_first_call_work() -> None:
    """Import what dspy's first call imports and load its price map (``source_info`` loads it once)."""
    for name in FIRST_CALL_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # another dspy version: its first call imports what it needs
            continue
    metadata.source_info()


def _memoize_model_info() -> None:
    """Make dspy's price/capability lookup O(1) after the first call per model.

    A miss is looked up once: 16 workers' first calls used to scan the map side by side.
    """
    original = metadata.model_info
    found: dict[tuple[str, str, tuple[str, ...] | None], dict[str, Any]] = {}
    lock = threading.Lock()

    def lookup(provider: str, model: str, namespaces: tuple[str, ...] | None) -> dict[str, Any]:
        key = (provider, model, namespaces)
        if key not in found:
            with lock:
                if key not in found:
                    found[key] = original(provider, model, namespaces=namespaces)
        return found[key]

    def model_info(provider: str, model: str, *, namespaces: Any = None) -> dict[str, Any]:
        return copy.deepcopy(lookup(provider, model, None if namespaces is None else tuple(namespaces)))

    for module in (metadata, costs, capabilities):
        if getattr(module, "model_info", None) is original:
            module.model_info = model_info  # type: ignore[attr-defined]


def environment_proxies() -> dict[str, str]:
    """``urllib.request.getproxies()``'s answer on Linux, decoding only the variables named ``*_proxy``.

    Elsewhere (macOS and Windows also read system settings) or when ``os.environ`` is not the
    bytes-backed mapping CPython keeps on POSIX, it is urllib's own function.
    """
    raw = getattr(os.environ, "_data", None)
    if not sys.platform.startswith("linux") or not isinstance(raw, dict):
        return urllib.request.getproxies()
    suffix = b"_proxy"
    chosen = {os.fsdecode(name): os.fsdecode(raw[name]) for name in raw
              if isinstance(name, bytes) and name[-6:].lower() == suffix}
    return proxies_from(chosen, cgi=b"REQUEST_METHOD" in raw)


def proxies_from(variables: Mapping[str, str], *, cgi: bool) -> dict[str, str]:
    """The proxies that ``*_proxy`` variables (in environment order) give, by urllib's rule.

    A lowercase name wins over other spellings, an empty lowercase one removes the scheme, and a CGI
    script (``REQUEST_METHOD`` set) ignores a non-lowercase ``HTTP_PROXY`` (CVE-2016-1000110).
    """
    proxies: dict[str, str] = {}
    for name, value in variables.items():
        if value:
            proxies[name.lower()[:-6]] = value
    if cgi:
        proxies.pop("http", None)
    for name, value in variables.items():
        if name[-6:] == "_proxy":
            if value:
                proxies[name.lower()[:-6]] = value
            else:
                proxies.pop(name.lower()[:-6], None)
    return proxies


__all__ = ["FIRST_CALL_MODULES", "do_first_call_work", "environment_proxies", "lighten_dspy_call_path", "proxies_from"]
