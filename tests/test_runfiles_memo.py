"""Run-header provenance (git revision, package versions) is memoised per process, never served stale."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from saag_opt import memo, provenance


@pytest.fixture(autouse=True)
def _fresh_memos(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(provenance, "_GIT_REVISIONS", memo.Memo(size=8))
    monkeypatch.setattr(provenance, "_PACKAGE_VERSIONS", memo.Memo(size=4))
    for name in provenance._GIT_ENV:
        monkeypatch.delenv(name, raising=False)


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _count_rev_parses(monkeypatch: pytest.MonkeyPatch) -> list[Path | None]:
    calls: list[Path | None] = []
    real = provenance._rev_parse

    def rev_parse(cwd: Path | None) -> str | None:
        calls.append(cwd)
        return real(cwd)

    monkeypatch.setattr(provenance, "_rev_parse", rev_parse)
    return calls


def test_git_revision_follows_commits_checkouts_and_worktrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_rev_parses(monkeypatch)
    repo = tmp_path / "repo"
    repo.mkdir()
    assert provenance.git_revision(repo) is None  # not a checkout yet (and remembered as such)
    assert provenance.git_revision(repo) is None and len(calls) == 1

    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    one = _git(repo, "rev-parse", "HEAD")
    assert provenance.git_revision(repo) == one  # a .git appeared: asked again
    assert provenance.git_revision(repo) == one and len(calls) == 2

    _git(repo, "commit", "-q", "--allow-empty", "-m", "two")
    two = _git(repo, "rev-parse", "HEAD")
    assert provenance.git_revision(repo) == two
    _git(repo, "pack-refs", "--all")
    assert provenance.git_revision(repo) == two
    _git(repo, "checkout", "-q", "--detach", one)
    assert provenance.git_revision(repo) == one

    tree = tmp_path / "tree"
    _git(repo, "worktree", "add", "-q", "-b", "side", str(tree), "main")
    assert provenance.git_revision(tree) == two
    _git(tree, "commit", "-q", "--allow-empty", "-m", "three")
    assert provenance.git_revision(tree) == _git(tree, "rev-parse", "HEAD") != two
    before = len(calls)
    assert provenance.git_revision(tree) == _git(tree, "rev-parse", "HEAD") and len(calls) == before


def test_package_versions_are_read_again_when_a_sys_path_folder_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = provenance._read_package_versions

    def read() -> dict[str, str]:
        reads.append(1)
        return real()

    monkeypatch.setattr(provenance, "_read_package_versions", read)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr("sys.path", [*__import__("sys").path, str(site)])
    first = provenance.package_versions()
    first["optuna"] = "changed by a caller"
    assert "optuna" not in provenance.package_versions() and len(reads) == 1  # memoised, and each caller's copy
    (site / "newpkg-1.0.dist-info").mkdir()  # pip installing a distribution there
    assert provenance.package_versions()["pydantic"] and len(reads) == 2
