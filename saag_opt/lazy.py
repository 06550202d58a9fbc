"""Lazy package faces (PEP 562): a package re-exports its names but loads each module on first use.

Why: ``import saag_opt.lm.specs`` runs ``saag_opt/lm/__init__.py`` first, and an eager face there
would load dspy for a module that needs only the standard library. A lazy face costs nothing to
import; ``from saag_opt.lm import open_lm`` still works and loads ``saag_opt.lm.client`` then.

A face lists its names three times, each checked against the others by tests/test_faces.py: the
imports under ``TYPE_CHECKING`` (what mypy and IDEs read), ``__all__``, and the map given here::

    if TYPE_CHECKING:
        from saag_opt.lm.client import open_lm
    else:
        __getattr__, __dir__ = lazy_exports(__name__, {"client": ("open_lm",)})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

LAZY_EXPORTS = "_lazy_exports"
"""The attribute where a face keeps its ``name -> module`` map (read by tests/test_faces.py)."""


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any],
                                                                             Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``exports`` maps a submodule to the names it gives.

    A name is looked up once: its value is then set on the package, so later reads skip the hook.
    Any other name raises ``AttributeError``, which also lets ``from package import submodule`` work.
    """
    where = {name: f"{package}.{module}" for module, names in exports.items() for name in names}
    setattr(sys.modules[package], LAZY_EXPORTS, where)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__


__all__ = ["LAZY_EXPORTS", "lazy_exports"]
