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

A name may differ from the attribute it gives (``from saag_opt.optimize.run import run_optimize as
optimize`` is ``("optimize", "run_optimize")`` in the map), and may be the name of one of the
package's own subpackages (the root face's ``optimize`` and ``tune``): see ``lazy_exports``.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any

LAZY_EXPORTS = "_lazy_exports"
"""The attribute where a face keeps its ``name -> (module, attribute)`` map (read by tests/test_faces.py)."""

Export = str | tuple[str, str]
"""A name the face gives, or ``(name, attribute)`` when the module calls it otherwise."""


def lazy_exports(package: str, exports: Mapping[str, Sequence[Export]], *,
                 shadowing: Collection[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``exports`` maps a submodule to the names it gives.

    A name is looked up once: its value is then set on the package, so later reads skip the hook.
    Any other name raises ``AttributeError``, which also lets ``from package import submodule`` work.

    ``shadowing``: names that are also subpackages of ``package`` (``saag_opt.optimize`` the
    function and ``saag_opt.optimize`` the package). Importing a subpackage sets it on its parent,
    which would replace the name whichever came first; for these names the package's class keeps
    the name's value instead, and the subpackage stays reachable by import (``from
    saag_opt.optimize.config import ...``), not by attribute (``saag_opt.optimize.config``).
    """
    where: dict[str, tuple[str, str]] = {}
    for module, names in exports.items():
        for export in names:
            name, attribute = (export, export) if isinstance(export, str) else export
            where[name] = (f"{package}.{module}", attribute)
    face = sys.modules[package]
    setattr(face, LAZY_EXPORTS, where)

    def load(name: str) -> Any:
        module, attribute = where[name]
        return getattr(importlib.import_module(module), attribute)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = load(name)
        setattr(face, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(face)) | set(where))

    if shadowing:
        _keep_names(face, {name: functools.partial(load, name) for name in shadowing})
    return __getattr__, __dir__


def _keep_names(face: ModuleType, loaders: Mapping[str, Callable[[], Any]]) -> None:
    """Give ``face`` a class whose properties hold ``loaders``' names against the import of a same-named subpackage.

    A property of the module's class wins over the module's ``__dict__``, where the import system
    puts a subpackage it loads; the setter drops exactly that (the subpackage stays in
    ``sys.modules``) and keeps any other value (``monkeypatch.setattr`` in a test).
    """
    values: dict[str, Any] = {}

    def keep(name: str, load: Callable[[], Any]) -> property:
        def get(_: ModuleType) -> Any:
            if name not in values:
                values[name] = load()
            return values[name]

        def put(_: ModuleType, value: Any) -> None:
            if not (isinstance(value, ModuleType) and value.__name__ == f"{face.__name__}.{name}"):
                values[name] = value

        def drop(_: ModuleType) -> None:
            values.pop(name, None)

        return property(get, put, drop)

    face.__class__ = type("Face", (ModuleType,),
                          {name: keep(name, load) for name, load in loaders.items()})


__all__ = ["LAZY_EXPORTS", "Export", "lazy_exports"]
