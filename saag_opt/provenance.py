"""Where a run's numbers come from: the package versions and the git revision a run header records.

Both are memoised per process, keyed by what would change them (file stamps), because every run
header (one per tune trial) asks for them.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from saag_opt.memo import Memo, file_stamps

_PACKAGES = ("saag-opt", "dspy", "gepa", "litellm", "openai", "rapidfuzz", "pydantic", "bfcl-eval")


def package_versions() -> dict[str, str]:
    """Versions of the packages that shape results (missing ones omitted) plus python.

    Memoised per process (reading the metadata costs ~15 ms, once per trial of a tune run), keyed by
    the mtime of every ``sys.path`` entry: installing or removing a distribution adds or removes a
    ``*.dist-info`` entry in one of those folders, which changes its mtime.
    """
    key = file_stamps(tuple(sys.path))
    return dict(_PACKAGE_VERSIONS.get_or_compute(key, _read_package_versions))


def _read_package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


_PACKAGE_VERSIONS: Memo[dict[str, str]] = Memo(size=4)


def git_revision(cwd: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the working directory, or None outside a checkout.

    Memoised per process (a subprocess per run header otherwise) under ``_git_state``: a commit,
    checkout, reset or ``pack-refs`` changes a file in it, so a new revision is never missed.
    """
    key = _git_state(Path(cwd) if cwd is not None else Path.cwd())
    if key is None:
        return _rev_parse(cwd)
    found = _GIT_REVISIONS.get(key)
    if found is not None:
        return found[0]
    revision = _rev_parse(cwd)
    if revision is not None or key[0] == "outside":  # a failure inside a checkout is retried next time
        _GIT_REVISIONS.put(key, (revision,))
    return revision


def _rev_parse(cwd: Path | None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


_GIT_REVISIONS: Memo[tuple[str | None]] = Memo(size=8)
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")


def _git_state(cwd: Path) -> tuple[Any, ...] | None:
    """What ``git rev-parse HEAD`` in ``cwd`` depends on, as file stamps; None = do not memoise.

    The folders from ``cwd`` up to the checkout (or to ``/``) are stamped too: a ``.git`` created or
    removed in any of them changes its mtime. In the checkout: ``HEAD`` (per worktree), the branch
    ref it names and ``packed-refs`` (in the common dir), and reftable's table list.
    """
    if any(name in os.environ for name in _GIT_ENV):
        return None
    try:
        start = cwd.resolve()
    except OSError:
        return None
    folders: list[Path] = []
    for folder in (start, *start.parents):
        folders.append(folder)
        dotgit = folder / ".git"
        if dotgit.is_dir():
            gitdir = dotgit
        elif dotgit.is_file():
            try:
                text = dotgit.read_text(encoding="utf-8").strip()
            except OSError:
                return None
            if not text.startswith("gitdir:"):
                return None
            gitdir = (folder / text.removeprefix("gitdir:").strip()).resolve()
        else:
            continue
        stamps, head = file_stamps((*folders, dotgit)), _git_head_state(gitdir)
        return ("inside", stamps, *head) if stamps is not None and head is not None else None
    stamps = file_stamps(tuple(folders))
    return ("outside", stamps) if stamps is not None else None


def _git_head_state(gitdir: Path) -> tuple[Any, ...] | None:
    """Stamps and content of the files that name the commit HEAD points at (None: do not memoise)."""
    try:
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
        common_text = (gitdir / "commondir").read_text(encoding="utf-8").strip() if (gitdir / "commondir").is_file() \
            else ""
    except OSError:
        return None
    common = (gitdir / common_text).resolve() if common_text else gitdir
    files: list[Path] = [gitdir / "HEAD", common / "packed-refs", common / "reftable" / "tables.list"]
    if head.startswith("ref:"):
        ref = head.removeprefix("ref:").strip()
        files += [common / ref, gitdir / ref]
    stamps = file_stamps(tuple(files))
    return (head, str(common), stamps) if stamps is not None else None


__all__ = ["git_revision", "package_versions"]
