"""The import layers of docs/design.md §1.1, checked on the source as an allow-list.

Every top-level part of ``saag_opt`` (a subpackage or a module) names the parts it may import; any
other import fails, lazy and ``TYPE_CHECKING`` imports included, and a new part fails until it is
placed here. Bottom up:

* the foundation imports nothing of the package but these: ``errors``, ``choices`` (the closed
  sets), ``credentials``, ``memo``, ``events``, ``lazy`` (the lazy package faces), ``atomic`` (atomic
  file writes) and ``stopping`` import nothing; ``paths`` and ``resuming`` (the one resume rule) import
  ``errors``; ``provenance`` (package versions, the git revision) imports ``memo``; ``runfiles`` (the run
  directory) imports ``atomic``, ``errors``, ``memo`` and ``provenance``; ``telemetry``
  (optional OpenTelemetry spans) ``errors`` and the version;
* ``model`` (the data model) imports nothing; ``parse`` only ``model``; the ``saag`` core only
  ``model`` and ``choices`` (test_purity checks it at run time too); ``episodes`` (conversations as
  data, and the ``Environment`` plug point) only ``model`` and ``errors``;
* ``lm``, ``data`` and ``artifacts`` sit on the foundation (``data`` and ``artifacts`` on ``model``,
  ``data`` on ``episodes`` too: it loads them);
* ``agents`` runs models over the core; ``testing`` (the contract suites) sits beside it;
* ``evaluation`` (what every verb measures with: records, summaries, statistics, estimates) and
  ``runtime`` (the guard and its adapters) sit on ``agents``;
* the verbs, one package each: ``evaluate`` and ``score`` on ``evaluation``; ``compare`` runs
  evaluations; ``security`` runs the guard on AgentDojo; ``optimize`` and ``tune`` run evaluations
  and comparisons;
* ``report`` renders what the verbs wrote and never runs a model; ``cli`` is the top, and nothing
  imports ``cli`` or ``testing``;
* the root face (``saag_opt/__init__.py``: ``saag_opt.evaluate`` ...) names the verbs' functions only
  under ``TYPE_CHECKING`` and loads them on first use (``lazy``), so it is the foundation's
  ``__version__`` at run time and the top beside ``cli`` to mypy; the circle check counts its run-time
  imports only.

Inside the package no two modules import each other (directly or round a loop), except the
documented facades in ``CIRCLES``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "saag_opt"

FOUNDATION = frozenset({"__init__", "atomic", "choices", "credentials", "errors", "events", "lazy", "memo", "paths",
                        "provenance", "resuming", "runfiles", "stopping", "telemetry"})
"""What every layer from ``lm`` up may import (``__init__`` is the root package: ``__version__``)."""
_CORE = frozenset({"model", "parse", "saag", "episodes"})
_RESOURCES = _CORE | {"lm", "data", "artifacts"}

ALLOWED: dict[str, frozenset[str]] = {
    **{leaf: frozenset() for leaf in ("atomic", "choices", "credentials", "errors", "events", "lazy", "memo",
                                      "stopping", "model")},
    "__init__": frozenset({"lazy", "runfiles", "agents", "evaluate", "compare", "score", "runtime", "optimize",
                            "tune"}),
    "paths": frozenset({"errors"}),
    "resuming": frozenset({"errors"}),
    "provenance": frozenset({"memo"}),
    "runfiles": frozenset({"atomic", "errors", "memo", "provenance"}),
    "telemetry": frozenset({"__init__", "errors"}),
    "parse": frozenset({"model"}),
    "saag": frozenset({"model", "choices"}),
    "episodes": frozenset({"model", "errors"}),
    "lm": FOUNDATION,
    "data": FOUNDATION | {"model", "parse", "episodes"},
    "artifacts": FOUNDATION | {"model"},
    "agents": FOUNDATION | _RESOURCES,
    "testing": FOUNDATION | _RESOURCES | {"agents"},
    # what every verb measures with: records, summaries, help/harm statistics, estimates
    "evaluation": FOUNDATION | _RESOURCES | {"agents"},
    # the runtime guard runs agents/lm/saag for a live agent; the AgentDojo adapter (pipeline elements) is
    # part of it. Nothing but the security verb and cli imports it.
    "runtime": FOUNDATION | _RESOURCES | {"agents"},
    # the verbs: one package each
    "evaluate": FOUNDATION | _RESOURCES | {"agents", "evaluation"},
    "score": FOUNDATION | _RESOURCES | {"evaluation"},
    "compare": FOUNDATION | _RESOURCES | {"agents", "evaluation", "evaluate"},
    "security": FOUNDATION | _RESOURCES | {"agents", "evaluation", "runtime"},
    "optimize": FOUNDATION | _RESOURCES | {"agents", "evaluation", "evaluate", "compare"},
    "tune": FOUNDATION | _RESOURCES | {"agents", "evaluation", "evaluate", "compare"},
    # report renders result types of the verbs; it never runs a model (no agents, lm or runtime)
    "report": FOUNDATION | _CORE | {"data", "artifacts", "evaluation", "evaluate", "compare", "score", "security",
                                    "optimize", "tune"},
    "cli": FOUNDATION | _RESOURCES | {"agents", "evaluation", "evaluate", "compare", "score", "security", "runtime",
                                      "optimize", "tune", "report"},
}

CIRCLES: dict[str, tuple[str, str]] = {
    # hub module: (the package its circle stays inside, why it is allowed)
    "saag_opt.runtime.guard": ("saag_opt.runtime", "a facade: Guard.openai_turn, wrap_react, langchain_middleware and "
                               "openai_agents_guardrail import their adapter lazily; the adapters name Guard only under "
                               "TYPE_CHECKING (docs/design.md §1.2)"),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imported(path: Path, *, typing_only: bool = True) -> set[str]:
    """The saag_opt modules (or, for a name that is not a module, its package) a file imports, anywhere in it.

    ``typing_only=False`` leaves out the imports under a top-level ``if TYPE_CHECKING:``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if not typing_only:
        tree.body = [node for node in tree.body if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                                                        and node.test.id == "TYPE_CHECKING")]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("saag_opt"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("saag_opt"):
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                         for a in node.names)
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_what_its_layer_allows(path: Path) -> None:
    where = path.relative_to(PACKAGE)
    layer = "__init__" if where.parts == ("__init__.py",) else where.parts[0].removesuffix(".py")
    assert layer in ALLOWED, f"saag_opt/{where}: a new part of the package; place it in ALLOWED"
    bad = {_part(m) for m in _imported(path)} - ALLOWED[layer] - {layer}
    assert not bad, f"saag_opt/{where} ({layer}) imports {sorted(bad)}; it may import {sorted(ALLOWED[layer])}"


def _circles() -> list[set[str]]:
    """The strongly connected parts (more than one module) of the import graph (Tarjan)."""
    edges = {name: _imported(path, typing_only=name != "saag_opt") & MODULES.keys() - {name}
             for name, path in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while (w := stack.pop()) != v:
                component.add(w)
            component.add(v)
            if len(component) > 1:
                out.append(component)

    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    return out


def test_no_import_circle_except_the_documented_facades() -> None:
    circles = _circles()
    for circle in circles:
        hubs = [hub for hub, (inside, _) in CIRCLES.items()
                if hub in circle and all(m == inside or m.startswith(inside + ".") for m in circle)]
        assert hubs, f"import circle {sorted(circle)}: open it, or document it in CIRCLES (and docs/design.md)"
    for hub in CIRCLES:
        assert any(hub in circle for circle in circles), f"{hub} is in no circle any more: delete its CIRCLES entry"


def test_the_model_spec_is_a_value_that_asks_no_backend() -> None:
    """The circle that was: lm/specs.py asked the backend registry for a spec's own text."""
    assert not {m for m in _imported(MODULES["saag_opt.lm.specs"]) if m.startswith("saag_opt.lm")}


def test_the_mode_vocabulary_loads_no_rule() -> None:
    """saag/modes.py is what configs, the reviewer and the guard import to name a stage-3 mode."""
    assert _imported(MODULES["saag_opt.saag.modes"]) <= {"saag_opt.choices"}
