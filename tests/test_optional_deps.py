"""Optional dependencies: skipped on a developer machine, a failure in CI; one pin for bfcl-eval."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tests.conftest as conftest
from saag_opt.data.bfcl import BFCL_VERSION

REPO = Path(__file__).resolve().parents[1]


def test_a_missing_optional_dependency_skips_locally_but_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-such-package is not installed"):
        conftest.skip_or_fail("no-such-package is not installed")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no-such-package is not installed; CI=true installs"):
        conftest.skip_or_fail("no-such-package is not installed")


@pytest.mark.parametrize(("missing", "outcome"), [(None, None), ("x is missing", pytest.fail.Exception)])
def test_the_requires_mark_is_enforced_at_set_up(missing: str | None, outcome: type[BaseException] | None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")

    class Item:  # the part of pytest.Item the hook reads
        def iter_markers(self, name: str) -> list[pytest.Mark]:
            return [conftest.requires(missing).mark] if name == "requires_optional" else []

    if outcome is None:
        conftest.pytest_runtest_setup(Item())  # type: ignore[arg-type]
    else:
        with pytest.raises(outcome, match="x is missing"):
            conftest.pytest_runtest_setup(Item())  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["README.md", "docs/getting-started/installation.md"])
def test_set_up_installs_the_pinned_bfcl_eval_without_its_dependencies(path: str) -> None:
    """bfcl-eval is not an extra: its exact pins (filelock==3.20.0, numpy==1.26.4) clash with ours and it
    pulls torch; what we use (data files, ast_checker) needs none of them, so set-up adds it --no-deps."""
    text = (REPO / path).read_text(encoding="utf-8")
    assert set(re.findall(r"pip install --no-deps bfcl-eval==([\w.]+)", text)) == {BFCL_VERSION}
