"""Every section of docs/design.md that the code, README or docs cite exists, and nothing cites outside the repo.

Why: docstrings used to cite sections of a design file that was never in the project; a user reading
``docs/design.md §9`` must find a "## 9." heading there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
CITED_IN = sorted({*REPO.glob("saag_opt/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("experiments/**/*.py"),
                   *REPO.glob("docs/**/*.md"), *REPO.glob("prompts/**/*.json"), *REPO.glob("prompts/**/*.md"),
                   REPO / "README.md", REPO / "setup.py", REPO / "pyproject.toml"} - {Path(__file__).resolve()})
CITATION = re.compile(r"docs/design\.md`?((?:(?:,|,? and)? §\d+(?:\.\d+)?)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
OUTSIDE = re.compile(r"DESIGN(?:\.md| section| \d)|research/|papers\.md|anchors\.md|next\.md|local_llm\.md"
                     r"|STYLE(?:\.md| practice)|\.\./shared")
"""How the project used to cite material that lives outside it (the first design, research notes, a style guide)."""


def _sections() -> set[str]:
    heads = re.findall(r"^## (\d+)\. |^### (\d+\.\d+) ", DESIGN.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {major or minor for major, minor in heads}


def _cited(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    if path == DESIGN:  # inside the document a bare §N is a cross-reference
        return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in SECTION.finditer(text)]
    return [(text.count("\n", 0, m.start()) + 1, n) for m in CITATION.finditer(text) for n in SECTION.findall(m.group(1))]


def test_the_design_numbers_its_sections_in_order() -> None:
    majors = [int(n) for n in re.findall(r"^## (\d+)\. ", DESIGN.read_text(encoding="utf-8"), flags=re.MULTILINE)]
    assert majors == list(range(1, len(majors) + 1))


@pytest.mark.parametrize("path", CITED_IN, ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_section_exists(path: Path) -> None:
    missing = [f"{path.relative_to(REPO)}:{line}: §{n}" for line, n in _cited(path) if n not in _sections()]
    assert not missing, f"docs/design.md has no such section: {missing}"


def _hits(path: Path, pattern: re.Pattern[str]) -> list[str]:
    """``file:line: match`` for every match of ``pattern`` in ``path``."""
    text = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for m in pattern.finditer(text)]


@pytest.mark.parametrize("path", CITED_IN, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_cites_material_outside_the_repository(path: Path) -> None:
    hits = _hits(path, OUTSIDE)
    assert not hits, f"cite docs/design.md (or the public source) instead: {hits}"


def test_the_citations_are_found() -> None:
    """The pattern sees the forms the code uses (one section, a list, a trailing 'and')."""
    found = [SECTION.findall(m.group(1)) for m in CITATION.finditer(
        "a (docs/design.md §9) b (docs/design.md §5, §9, §10) c `docs/design.md` §1 and §16 d docs/design.md §1.2")]
    assert found == [["9"], ["5", "9", "10"], ["1", "16"], ["1.2"]]


HISTORY_IN = sorted(
    path for path in {REPO / "README.md", *REPO.glob("docs/**/*.md"), *REPO.glob("saag_opt/**/*.py"),
                      *REPO.glob("experiments/**/*.py"), *REPO.glob("experiments/results/**/*")}
    if path.is_file() and path.suffix != ".gz")
"""What a user reads as the project's documentation: README, docs, docstrings and comments, the experiment
code and the results pages with their meta files. The compressed run records are left out: they hold what
the models wrote, not our prose. CHANGELOG.md is where the history goes, so it is not read."""
HISTORY = re.compile(r"\b(?:sessions?|issues?)\s+#?\d+\b|\bthis session\b", flags=re.IGNORECASE)
"""How development history reads: a working session or a tracker issue by number, or "this session"."""


@pytest.mark.parametrize("path", HISTORY_IN, ids=lambda p: str(p.relative_to(REPO)))
def test_no_development_history_outside_the_changelog(path: Path) -> None:
    """A measurement names its commit, date and machine; when something changed is CHANGELOG.md's to say."""
    hits = _hits(path, HISTORY)
    assert not hits, f"name the commit and date instead (history goes to CHANGELOG.md): {hits}"


def test_the_history_pattern_sees_the_forms_it_is_for() -> None:
    text = ("measured in session 18; sessions 12 and 16; Session 3: x; (issue 22); Issue 18, item 4; issue #7; "
            "issues 3 and 4; in this session. Not: a pytest session, session_id, sessions of 2 workers, "
            "issue-free, requests.Session(), 2 issues")
    assert [m.group(0) for m in HISTORY.finditer(text)] == [
        "session 18", "sessions 12", "Session 3", "issue 22", "Issue 18", "issue #7", "issues 3", "this session"]


def test_the_changelog_exists() -> None:
    """History removed from the docs is kept there, dated."""
    changelog = REPO / "CHANGELOG.md"
    assert changelog.is_file() and changelog.read_text(encoding="utf-8").startswith("# Changelog")


def test_readme_is_a_product_page() -> None:
    """README is what a visitor reads first: the two commands, a tour, the results table, links; the rest is in docs/."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 220, f"README.md has {lines} lines; move detail into a docs page and link it"
