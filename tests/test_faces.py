"""Package faces stay light: a lazy face loads a module on first use, and light modules stay light.

Why: ``import saag_opt.lm.specs`` runs ``saag_opt/lm/__init__.py`` first; an eager face would load
dspy for a value type. Each lazy face lists its names three times (TYPE_CHECKING imports, ``__all__``,
the ``lazy_exports`` map): these tests keep the three equal.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from saag_opt.lazy import LAZY_EXPORTS

PACKAGE = Path(__file__).resolve().parents[1] / "saag_opt"
HEAVY = ("dspy", "optuna", "litellm")
LAZY_FACES = ("saag_opt.lm", "saag_opt.agents", "saag_opt.optimize", "saag_opt.evaluation")
LIGHT = (
    "saag_opt.choices", "saag_opt.errors", "saag_opt.model", "saag_opt.credentials", "saag_opt.events",
    "saag_opt.memo", "saag_opt.runfiles", "saag_opt.lazy", "saag_opt.lm.specs", "saag_opt.lm.retry", "saag_opt.agents.rules",
    "saag_opt.lm.backends", "saag_opt.lm.scripted_server", "saag_opt.testing", "saag_opt.artifacts",
    "saag_opt.runtime.guard", "saag_opt.evaluation.comparison", "saag_opt.optimize.summary",  # the guard; run readers
    *LAZY_FACES,
    "saag_opt.saag", *sorted(f"saag_opt.saag.{p.stem}" for p in (PACKAGE / "saag").glob("*.py") if p.stem != "__init__"),
)


def _typed_imports(face: str) -> dict[str, str]:
    """Name -> module of the imports under ``if TYPE_CHECKING:`` in a face's ``__init__.py``."""
    path = PACKAGE.joinpath(*face.split(".")[1:], "__init__.py")
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom) and child.module, f"{path}: only from-imports here"
                found.update({alias.name: child.module for alias in child.names})
    return found


@pytest.mark.parametrize("face", LAZY_FACES)
def test_a_lazy_face_lists_the_same_names_three_times_and_each_resolves(face: str) -> None:
    module = importlib.import_module(face)
    typed = _typed_imports(face)
    assert typed, f"{face}: no TYPE_CHECKING imports"
    assert sorted(module.__all__) == sorted(typed), f"{face}: __all__ and the TYPE_CHECKING imports differ"
    assert getattr(module, LAZY_EXPORTS) == typed, f"{face}: the lazy_exports map and the TYPE_CHECKING imports differ"
    for name, where in typed.items():
        assert getattr(module, name) is getattr(importlib.import_module(where), name), f"{face}.{name}"
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", LIGHT)
def test_importing_a_light_module_loads_no_heavy_framework(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], f"import {module} loads a heavy framework"


def test_a_face_name_loads_its_module_on_first_use() -> None:
    code = ("import json, sys\nimport saag_opt.lm\nbefore = 'dspy' in sys.modules\n"
            "from saag_opt.lm import open_lm\nprint(json.dumps([before, 'dspy' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, True]
