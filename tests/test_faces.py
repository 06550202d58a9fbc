"""Package faces stay light: a lazy face loads a module on first use, and light modules stay light.

Why: ``import saag_opt.lm.specs`` runs ``saag_opt/lm/__init__.py`` first; an eager face would load
dspy for a value type. Each lazy face lists its names three times (TYPE_CHECKING imports, ``__all__``,
the ``lazy_exports`` map): these tests keep the three equal. The root face (``saag_opt.evaluate`` ...)
is the Python API of the command line: each of its verbs is the function the command calls.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from saag_opt.lazy import LAZY_EXPORTS
from tests.conftest import requires

PACKAGE = Path(__file__).resolve().parents[1] / "saag_opt"
HEAVY = ("dspy", "optuna", "litellm")
LAZY_FACES = ("saag_opt", "saag_opt.lm", "saag_opt.agents", "saag_opt.agents.mechanisms", "saag_opt.optimize",
              "saag_opt.evaluation",
              "saag_opt.evaluate", "saag_opt.score")
LIGHT = (
    "saag_opt.choices", "saag_opt.errors", "saag_opt.model", "saag_opt.credentials", "saag_opt.events",
    "saag_opt.memo", "saag_opt.atomic", "saag_opt.runfiles", "saag_opt.lazy", "saag_opt.lm.specs", "saag_opt.lm.retry",
    "saag_opt.agents.mechanisms.rules", "saag_opt.lm.backends", "saag_opt.lm.scripted_server", "saag_opt.testing",
    "saag_opt.artifacts",
    "saag_opt.runtime.guard", "saag_opt.compare.comparison", "saag_opt.optimize.summary",  # the guard; run readers
    "saag_opt.security.config",  # the security config the CLI reads for its help, without AgentDojo
    *LAZY_FACES,
    "saag_opt.saag", *sorted(f"saag_opt.saag.{p.stem}" for p in (PACKAGE / "saag").glob("*.py") if p.stem != "__init__"),
)


def _typed_imports(face: str) -> dict[str, tuple[str, str]]:
    """Name -> (module, attribute) of the imports under ``if TYPE_CHECKING:`` in a face's ``__init__.py``."""
    path = PACKAGE.joinpath(*face.split(".")[1:], "__init__.py")
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom) and child.module, f"{path}: only from-imports here"
                found.update({alias.asname or alias.name: (child.module, alias.name) for alias in child.names})
    return found


@pytest.mark.parametrize("face", LAZY_FACES)
def test_a_lazy_face_lists_the_same_names_three_times_and_each_resolves(face: str) -> None:
    module = importlib.import_module(face)
    typed = _typed_imports(face)
    assert typed, f"{face}: no TYPE_CHECKING imports"
    assert sorted(module.__all__) == sorted(typed), f"{face}: __all__ and the TYPE_CHECKING imports differ"
    assert getattr(module, LAZY_EXPORTS) == typed, f"{face}: the lazy_exports map and the TYPE_CHECKING imports differ"
    for name, (where, attribute) in typed.items():
        assert getattr(module, name) is getattr(importlib.import_module(where), attribute), f"{face}.{name}"
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


ROOT_API = ("evaluate", "compare", "optimize", "tune", "score", "read_run", "ReviewSetup", "Guard")
"""The verbs' Python API on the root face (docs/reference/api.md renders their docstrings)."""


def test_the_root_face_gives_the_verbs_without_loading_them() -> None:
    code = ("import json, sys\nimport saag_opt as s\nlisted = sorted(set(dir(s)) & set(s.__all__))\n"
            "loaded = [m for m in ('dspy', 'optuna', 'saag_opt.evaluate.calls') if m in sys.modules]\n"
            "s.evaluate, s.optimize, s.Guard\nprint(json.dumps([listed, loaded, 'dspy' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    listed, loaded, dspy_after = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(ROOT_API) <= set(listed) and loaded == [] and dspy_after


@pytest.mark.parametrize("name", ROOT_API)
def test_each_root_name_has_a_one_line_summary(name: str) -> None:
    import saag_opt  # noqa: PLC0415 - loads the verb

    doc = getattr(saag_opt, name).__doc__ or ""
    summary = doc.strip().splitlines()[0] if doc.strip() else ""
    assert summary.endswith(".") and len(summary) <= 120 and "module docstring" not in doc, (name, summary)


def test_optimize_and_tune_stay_functions_whichever_is_imported_first() -> None:
    """``saag_opt.optimize`` is also a package: importing it must not replace the function on the root face."""
    code = ("import json\nimport saag_opt.optimize.config, saag_opt.tune.space\nimport saag_opt\n"
            "from saag_opt.optimize.run import run_optimize\nfrom saag_opt.tune.run import run_tune\n"
            "first = [saag_opt.optimize is run_optimize, saag_opt.tune is run_tune]\n"
            "import saag_opt.optimize.preflight, saag_opt.tune.preflight\nfrom saag_opt import optimize, tune\n"
            "print(json.dumps(first + [optimize is run_optimize, tune is run_tune]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, True, True, True]


class _Called(Exception):
    """What a spy raises: the command reached the library function, and nothing ran."""


FIXTURES = Path(__file__).parent / "fixtures" / "predictions"
SPACE = PACKAGE.parent / "experiments" / "spaces" / "offline-bfcl.toml"


@pytest.mark.parametrize(("name", "module", "attribute", "argv"), [
    ("evaluate", "saag_opt.evaluate.run", "run_evaluation",
     ["evaluate", "--base", "fake", "--mechanism", "none", "--dataset", str(FIXTURES / "dataset.jsonl"), "--split", "all"]),
    ("compare", "saag_opt.compare.run", "run_compare",
     ["compare", "reviewer@v1", "reviewer@v2", "--base", "fake", "--reviewer", "fake"]),
    ("optimize", "saag_opt.optimize.run", "run_optimize", ["optimize", "--base", "fake", "--reviewer", "fake"]),
    ("tune", "saag_opt.tune.run", "run_tune", ["tune", "--space", str(SPACE)]),
    ("score", "saag_opt.score.calls", "score_predictions",
     ["score", str(FIXTURES / "predictions.jsonl"), "--dataset", str(FIXTURES / "dataset.jsonl")]),
])
def test_each_root_verb_is_the_function_its_command_calls(name: str, module: str, attribute: str, argv: list[str],
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import saag_opt  # noqa: PLC0415 - loads the verb
    from saag_opt.cli import app  # noqa: PLC0415 - the command line, for this test only

    source = importlib.import_module(module)
    assert getattr(saag_opt, name) is getattr(source, attribute)

    def spy(*_: object, **__: object) -> None:
        raise _Called

    monkeypatch.setattr(source, attribute, spy)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [*argv, "--runs-dir", str(tmp_path / "runs")] if name != "score" else argv)
    assert isinstance(result.exception, _Called), result.output


def test_the_root_classes_are_the_ones_the_commands_build() -> None:
    import saag_opt  # noqa: PLC0415 - loads the names
    from saag_opt.evaluate.config import EvaluateConfig  # noqa: PLC0415 - heavy; this test only
    from saag_opt.report.pages import read_run  # noqa: PLC0415 - what `saag-opt report` reads runs with
    from saag_opt.runtime.guard import Guard  # noqa: PLC0415 - what the adapters and `saag-opt security` use

    assert EvaluateConfig.model_fields["setup"].annotation is saag_opt.ReviewSetup
    assert saag_opt.read_run is read_run and saag_opt.Guard is Guard


@requires(None if importlib.util.find_spec("agentdojo") else "agentdojo is not installed (pip install 'saag-opt[agentdojo]')")
def test_the_security_run_guards_with_the_root_guard() -> None:
    import saag_opt  # noqa: PLC0415 - loads the names
    from saag_opt.security.run import Guard  # noqa: PLC0415 - needs the agentdojo extra

    assert saag_opt.Guard is Guard
