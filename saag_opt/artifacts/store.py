"""The prompt store: immutable, content-hashed prompt versions on disk (docs/design.md §8).

Layout under the store root (``$SAAG_OPT_PROMPTS``, else the user's data dir, see ``saag_opt.paths``)::

    <root>/aliases.json                 {"reviewer": {"production": "v2", "best": "v3-gepa"}}
    <root>/<program>/<version>.json     one PromptVersion (the source of truth)
    <root>/<program>/<version>.md       rendered from the JSON, for humans and code review
    <root>/.lock                        filelock guarding every write

Decisions:

* A version's file model, hash and name rules are in ``artifacts.version``; its markdown page and
  diffs in ``artifacts.render``.
* A version is immutable. Saving an existing name with other content raises ``ArtifactError``; with
  the same content it is a no-op that returns the stored version (the file on disk wins, its metadata
  is never rewritten).
* The same content under a new name is allowed with ``save`` (explicit intent) and findable with
  ``find_by_sha``; ``save_new`` returns the existing version instead of minting a duplicate unless
  told otherwise, so a GEPA run whose best candidate is its seed does not create a copy.
* Every write is atomic (tmp file + ``os.replace``) and made under one ``filelock`` per store, so
  concurrent processes never corrupt the store, never lose an alias update, and ``save_new``
  allocates unique names. Readers take no lock: they only ever see whole files.
* The seeds (``reviewer@v1``, ``reviewer@v2`` and the ``production`` alias) ship with the package
  (``paths.shipped("prompts")``) and every store sees them, read-only, below its own files: new
  versions and aliases are always written to the store root, numbered after the seeds
  (``v3-gepa``), with the seeds as parents. A store's own file of the same name wins (a private
  test world, or a store made before the seeds were built in); the seeds folder is never written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import filelock
from pydantic import ValidationError
from rapidfuzz import fuzz, process

from saag_opt.artifacts.render import render_markdown
from saag_opt.artifacts.version import PromptVersion, content_hash, is_safe_name, load_version_file, validate_name
from saag_opt.atomic import atomic_write_text
from saag_opt.errors import ArtifactError, validation_message
from saag_opt.paths import PROMPTS_ENV, prompts_dir, shipped

ALIASES_FILE = "aliases.json"
LOCK_FILE = ".lock"
LOCK_TIMEOUT_S = 60.0

_NUMBERED_RE = re.compile(r"^v(\d+)(?:$|[-._])")


def default_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The store root: the argument, else ``$SAAG_OPT_PROMPTS``, else ``<user data dir>/prompts``."""
    if root is not None:
        return Path(root).expanduser()
    return prompts_dir()


def version_sort_key(name: str) -> tuple[int, str]:
    """Natural order: ``v2`` < ``v3-gepa`` < ``v10``; unnumbered names last, alphabetically."""
    match = _NUMBERED_RE.match(name)
    return (int(match.group(1)), name) if match else (1 << 30, name)


def nearest(name: str, choices: list[str], limit: int = 3) -> list[str]:
    """The closest names by rapidfuzz WRatio (used in not-found messages)."""
    hits = process.extract(name, choices, scorer=fuzz.WRatio, limit=limit, score_cutoff=40)
    return [hit[0] for hit in hits]


def _not_found(ref: str, what: str, name: str, choices: list[str], where: Path | str) -> ArtifactError:
    near = nearest(name, choices)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    have = f" Available: {', '.join(choices)}." if choices else " The store is empty."
    return ArtifactError(f"prompt reference {ref!r} not found: no {what} {name!r} in {where}.{hint}{have}")


_Versions = list[PromptVersion]
_Names = list[str]
_Aliases = dict[str, dict[str, str]]


def _read_aliases(path: Path) -> _Aliases:
    """One ``aliases.json`` (``{}`` when absent).

    Raises:
        ArtifactError: unreadable or of the wrong shape (names the file).
    """
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable aliases file ({exc})") from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ArtifactError(f"{path}: expected {{program: {{alias: version}}}}")
    return {prog: dict(table) for prog, table in data.items()}


class PromptStore:
    """A directory of immutable prompt versions with aliases (see the module docstring).

    Contract:
        * ``get``/``resolve``/``list``/``lineage`` never write; ``save``, ``save_new`` and ``alias``
          write atomically under the store lock and are safe across processes.
        * A saved version never changes: same name + other content -> ``ArtifactError``.
        * Parents must already exist in the same program, so lineage is acyclic and complete.
        * All failures a user can cause raise ``ArtifactError`` with the offending name or path.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *,
                 seeds: str | os.PathLike[str] | None | Literal["shipped"] = "shipped") -> None:
        self.root = default_root(root)
        """Where this store's own versions and aliases live (and every write goes)."""
        where = shipped("prompts") if seeds == "shipped" else (Path(seeds) if seeds is not None else None)
        same = where is not None and where.resolve() == self.root.resolve()
        self.seeds: Path | None = None if same else where
        """The read-only seed versions every store sees (None: a store of its own files only)."""

    def __repr__(self) -> str:
        return f"PromptStore({str(self.root)!r}, seeds={str(self.seeds) if self.seeds else None!r})"

    @property
    def location(self) -> str:
        """For messages and titles: the root, plus the seeds folder when there is one."""
        return f"{self.root} (+ built-in seeds)" if self.seeds is not None else str(self.root)

    def _layers(self) -> list[Path]:
        """Folders read in order: the store's own root first, then the seeds."""
        return [self.root] + ([self.seeds] if self.seeds is not None else [])

    def _file(self, program: str, version: str) -> Path | None:
        """The JSON file of ``program@version`` in the first layer that has it."""
        relative = Path(validate_name(program, "program")) / f"{validate_name(version)}.json"
        return next((layer / relative for layer in self._layers() if (layer / relative).is_file()), None)

    def path_of(self, program: str, version: str) -> Path:
        """The JSON file ``program@version`` is read from (the store's own, else the seed's).

        Raises:
            ArtifactError: unknown version.
        """
        found = self._file(program, version)
        if found is None:
            raise _not_found(f"{program}@{version}", "version", version, self.version_names(program),
                             f"{self.location} for {program}")
        return found

    def is_seed(self, program: str, version: str) -> bool:
        """True if ``program@version`` is read from the built-in seeds (not from this store's root)."""
        found = self._file(program, version)
        return found is not None and self.seeds is not None and found.parent.parent == self.seeds

    # -- paths and locking --------------------------------------------------------------------

    def _path(self, program: str, version: str, suffix: str = ".json") -> Path:
        return self.root / validate_name(program, "program") / f"{validate_name(version)}{suffix}"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the store lock for a write; a store that cannot be written is an ArtifactError naming it."""
        lock = filelock.FileLock(str(self.root / LOCK_FILE), timeout=LOCK_TIMEOUT_S)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with lock:
                yield
        except filelock.Timeout as exc:
            raise ArtifactError(
                f"{self.root / LOCK_FILE}: store is locked by another process for over {LOCK_TIMEOUT_S:.0f}s; "
                "if no saag-opt process is running, delete the lock file"
            ) from exc
        except OSError as exc:  # a file where the folder should be, a read-only disk, no permission
            raise ArtifactError(f"prompt store {self.root}: cannot write there ({exc.strerror or exc}); "
                                "choose another folder with --store or $SAAG_OPT_PROMPTS") from exc

    # -- reading --------------------------------------------------------------------------------

    def programs(self) -> _Names:
        """Program names that have a directory in the store or among the seeds."""
        return sorted({p.name for layer in self._layers() if layer.is_dir()
                       for p in layer.iterdir() if p.is_dir() and is_safe_name(p.name)})

    def version_names(self, program: str) -> _Names:
        """Version names of a program (own and seeds) in natural order (tmp files and non-names skipped)."""
        validate_name(program, "program")
        names = {p.stem for layer in self._layers() for p in (layer / program).glob("*.json")
                 if is_safe_name(p.stem)}
        return sorted(names, key=version_sort_key)

    def exists(self, program: str, version: str) -> bool:
        """True if ``program@version`` is in the store or among the seeds."""
        return self._file(program, version) is not None

    def get(self, program: str, version: str) -> PromptVersion:
        """Load one version by exact name.

        Raises:
            ArtifactError: unknown version (with the nearest names), or an invalid file.
        """
        path = self.path_of(program, version)
        loaded = load_version_file(path)
        if (loaded.program, loaded.version) != (program, version):
            raise ArtifactError(f"{path}: file says {loaded.ref}, expected {program}@{version}")
        return loaded

    def find_by_sha(self, sha: str, program: str | None = None) -> _Versions:
        """Versions whose content hash starts with ``sha`` (a full hash or a prefix of >= 6 hex digits)."""
        if not re.fullmatch(r"[0-9a-fA-F]{6,64}", sha):
            raise ArtifactError(f"bad sha256 {sha!r}: give at least 6 hex digits")
        programs = [program] if program else self.programs()
        found: _Versions = []
        for prog in programs:
            for name in self.version_names(prog):
                version = self.get(prog, name)
                if version.sha256.startswith(sha.lower()):
                    found.append(version)
        return found

    def aliases(self, program: str | None = None) -> _Aliases:
        """All aliases (``{program: {alias: version}}``), or only ``program``'s.

        The store's own aliases win over the seeds' (e.g. a moved ``production``).
        """
        merged: _Aliases = {}
        for layer in reversed(self._layers()):
            for prog, table in _read_aliases(layer / ALIASES_FILE).items():
                merged.setdefault(prog, {}).update(table)
        if program is not None:
            return {program: dict(merged.get(program, {}))}
        return merged

    def resolve(self, ref: str) -> PromptVersion:
        """Resolve ``program@version``, ``program@alias`` or a path to a version JSON.

        A version name wins over an alias of the same name (``alias`` refuses to create that clash).

        Raises:
            ArtifactError: malformed or unknown reference, naming it and the nearest existing names.
        """
        candidate = Path(ref)
        if ref.endswith(".json") or os.sep in ref or (os.altsep and os.altsep in ref):
            if candidate.is_file():
                return load_version_file(candidate)
            if "@" not in ref:
                raise ArtifactError(f"prompt reference {ref!r} not found: no such file")
        program, sep, name = ref.partition("@")
        if not sep or not program or not name:
            raise ArtifactError(
                f"bad prompt reference {ref!r}: expected PROGRAM@VERSION, PROGRAM@ALIAS "
                "(e.g. reviewer@v2, reviewer@production) or a path to a version .json file"
            )
        validate_name(program, "program")
        validate_name(name, "version or alias")
        if program not in self.programs():
            raise _not_found(ref, "program", program, self.programs(), self.location)
        if self.exists(program, name):
            return self.get(program, name)
        table = self.aliases(program).get(program, {})
        if name in table:
            return self.get(program, table[name])
        choices = self.version_names(program) + sorted(table)
        raise _not_found(ref, "version or alias", name, choices, f"{self.location} for {program}")

    def lineage(self, program: str, version: str) -> _Versions:
        """Ancestors of a version, nearest first (parents, then grandparents), each once.

        Raises:
            ArtifactError: a version or one of its ancestors is missing.
        """
        seen: set[str] = {version}
        order: _Versions = []
        frontier = list(self.get(program, version).parents)
        while frontier:
            name = frontier.pop(0)
            if name in seen:
                continue
            seen.add(name)
            ancestor = self.get(program, name)
            order.append(ancestor)
            frontier.extend(ancestor.parents)
        return order

    # -- writing --------------------------------------------------------------------------------

    def _write(self, version: PromptVersion) -> PromptVersion:
        """Caller holds the lock. Checks immutability and parents, writes .md then .json."""
        path = self._path(version.program, version.version)
        if path.is_file():
            existing = load_version_file(path)
            if existing.sha256 != version.sha256:
                raise ArtifactError(
                    f"{version.ref} already exists with other content (sha256 {existing.sha256[:12]} vs "
                    f"{version.sha256[:12]}); versions are immutable: save under a new name "
                    f"(e.g. {self._next_name(version.program, '')})"
                )
            if not path.with_suffix(".md").is_file():  # a crash between the two writes
                atomic_write_text(path.with_suffix(".md"), render_markdown(existing), fsync=True)
            return existing
        if self.is_seed(version.program, version.version):
            seed = self.get(version.program, version.version)
            if seed.sha256 == version.sha256:
                return seed  # a built-in is never copied into the store
        missing = [p for p in version.parents if not self.exists(version.program, p)]
        if missing:
            raise ArtifactError(f"{version.ref}: parent version(s) {', '.join(missing)} not found in "
                                f"{self.root / version.program}; save parents first")
        atomic_write_text(path.with_suffix(".md"), render_markdown(version), fsync=True)
        atomic_write_text(path, version.model_dump_json(indent=2) + "\n", fsync=True)
        return version

    def adopt(self, path: str | os.PathLike[str]) -> PromptVersion:
        """Store a version read from a file, first adopting each missing ancestor found beside it.

        Why: a prompt can arrive as a file from another checkout (``--prompt elsewhere/v2.json``);
        lineage requires its parents in this store, and a parent file usually sits next to it.

        Raises:
            ArtifactError: the file is invalid, or a parent is neither stored here nor beside it.
        """
        version = load_version_file(path)
        for parent in version.parents:
            beside = Path(path).parent / f"{parent}.json"
            if beside.is_file():
                if not self._holds(load_version_file(beside)):  # missing, or a seed of the same name
                    self.adopt(beside)                         # differs: the file's own parent wins
            elif not self.exists(version.program, parent):
                raise ArtifactError(f"{path}: parent version {parent!r} is neither in {self.location} "
                                    f"nor beside the file ({beside}); copy it there or save it first")
        return self.save(version)  # same content: no-op; other content in this store: the usual error

    def _holds(self, version: PromptVersion) -> bool:
        """True if the store resolves ``version``'s name to exactly its content."""
        return (self.exists(version.program, version.version)
                and self.get(version.program, version.version).sha256 == version.sha256)

    def save(self, version: PromptVersion) -> PromptVersion:
        """Store ``version`` under its own name; returns what is on disk afterwards.

        Raises:
            ArtifactError: the name exists with other content, or a parent is missing.
        """
        with self._locked():
            return self._write(version)

    def _next_name(self, program: str, suffix: str) -> str:
        numbers = [int(m.group(1)) for n in self.version_names(program) if (m := _NUMBERED_RE.match(n))]
        number = max(numbers, default=0) + 1
        return validate_name(f"v{number}-{suffix}" if suffix else f"v{number}")

    def next_version(self, program: str, suffix: str = "gepa") -> str:
        """The name ``save_new`` would pick now (``v<max+1>-<suffix>``).

        Advisory only: use ``save_new`` to allocate a name atomically.
        """
        return self._next_name(program, suffix)

    def save_new(self, program: str, instructions: Mapping[str, str], *, suffix: str = "gepa",
                 dedupe: bool = True, **metadata: Any) -> PromptVersion:
        """Allocate the next free name (``v3-gepa``, ``v4-gepa``, ...) and save, atomically.

        ``metadata`` is any other PromptVersion field (parents, source, models, scores, ...).
        With ``dedupe`` (default) identical content already in the program is returned instead.

        Raises:
            ArtifactError: bad metadata or a missing parent.
        """
        with self._locked():
            if dedupe:  # a quarantined copy is no stand-in for an accepted version, nor the reverse
                same = [v for v in self.find_by_sha(content_hash(program, instructions), program)
                        if (v.quarantine is None) == (metadata.get("quarantine") is None)]
                if same:
                    return same[0]
            name = self._next_name(program, suffix)
            try:
                version = PromptVersion(version=name, program=program, instructions=dict(instructions), **metadata)
            except ValidationError as exc:
                raise ArtifactError(f"{program}@{name}: invalid prompt version: {validation_message(exc, whole='file')}") from exc
            except TypeError as exc:
                raise ArtifactError(f"{program}@{name}: invalid prompt version: {exc}") from exc
            return self._write(version)

    def alias(self, program: str, alias: str, version: str) -> _Aliases:
        """Point ``program@alias`` at an existing version (create or move); returns all aliases.

        Raises:
            ArtifactError: bad alias name, alias equal to a version name, unknown or quarantined version.
        """
        validate_name(alias, "alias")
        with self._locked():
            if self.exists(program, alias):
                raise ArtifactError(f"alias {alias!r} would shadow version {program}@{alias}; pick another name")
            target = self.get(program, version)
            if target.quarantine is not None:
                raise ArtifactError(f"{target.ref} is quarantined ({target.quarantine}); an alias never points "
                                    "at a quarantined version")
            own = _read_aliases(self.root / ALIASES_FILE)  # the seeds' aliases stay where they are
            own.setdefault(program, {})[alias] = version
            ordered = {prog: dict(sorted(t.items())) for prog, t in sorted(own.items())}
            atomic_write_text(self.root / ALIASES_FILE, json.dumps(ordered, indent=2) + "\n", fsync=True)
            return self.aliases()

    def list(self, program: str | None = None) -> _Versions:
        """All versions of ``program`` (or of every program) in natural order.

        Raises:
            ArtifactError: ``program`` is given but has no directory (nearest names suggested).
        """
        if program and program not in self.programs():
            raise _not_found(program, "program", program, self.programs(), self.location)
        programs = [program] if program else self.programs()
        return [self.get(prog, name) for prog in programs for name in self.version_names(prog)]


def resolve_ref(ref: str, root: str | os.PathLike[str] | None = None) -> PromptVersion:
    """Resolve a prompt reference against the store at ``root`` (see ``PromptStore.resolve``)."""
    return PromptStore(root).resolve(ref)


__all__ = [
    "ALIASES_FILE", "LOCK_FILE", "LOCK_TIMEOUT_S", "PROMPTS_ENV", "PromptStore", "default_root", "nearest",
    "resolve_ref", "version_sort_key",
    "PromptVersion",  # from artifacts.version: tests and optimize/ import it from here too
]
