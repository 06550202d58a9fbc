"""The import direction of DESIGN section 1, checked on the source (STYLE practice 1).

cli -> (optimize, evaluation, artifacts, report, runtime) -> agents -> (lm, saag, data, model); nothing imports
cli; the saag core imports only the data model (and stdlib/rapidfuzz), which test_purity checks at
run time too. ``runfiles`` (atomic writes, run.json) sits beside ``errors`` at the bottom: every layer
above the pure core may write through it, it imports nothing but ``errors`` and ``memo`` (per-process
memos keyed by file stamps); ``memo``, ``events`` (the one run event type) and ``credentials`` (what counts
as a secret in a URL) import nothing from the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "saag_opt"

FORBIDDEN: dict[str, set[str]] = {
    "saag": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm", "data", "testing", "runfiles",
             "events"},
    "model": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm", "data", "saag", "runfiles",
              "events"},
    "runfiles": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm", "data", "saag", "model",
                 "testing", "paths", "events"},
    "events": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm", "data", "saag", "model",
               "testing", "paths", "runfiles", "errors"},
    "credentials": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm", "data", "saag", "model",
                    "testing", "paths", "runfiles", "errors", "events", "tune", "runtime"},
    "memo": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm", "data", "saag", "model",
             "testing", "paths", "runfiles", "errors", "events", "tune", "runtime"},
    "data": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "lm"},
    "lm": {"cli", "optimize", "evaluation", "artifacts", "report", "agents", "data", "saag"},
    "agents": {"cli", "optimize", "evaluation", "report"},
    "artifacts": {"cli", "optimize", "evaluation", "agents", "lm"},
    "evaluation": {"cli", "optimize", "report"},
    "optimize": {"cli", "report"},
    "tune": {"cli", "report", "optimize"},
    # report renders result types of evaluation/optimize (sideways, same layer); it never runs anything
    "report": {"cli", "agents", "lm"},
    # the runtime guard sits beside evaluation: it runs agents/lm/saag, and nothing but cli imports it
    "runtime": {"cli", "optimize", "evaluation", "report"},
}


def _layer(path: Path) -> str:
    part = path.relative_to(PACKAGE).parts[0]
    return part.removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """Second-level saag_opt packages a module imports (anywhere in the file, lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "saag_opt" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_the_layers(path: Path) -> None:
    layer = _layer(path)
    bad = _imports(path) & FORBIDDEN.get(layer, {"cli"} if layer != "cli" else set())
    assert not bad, f"saag_opt/{path.relative_to(PACKAGE)} ({layer}) imports {sorted(bad)}"
