"""Immutable, content-hashed prompt versions on disk (DESIGN.md section 8).

Layout under the store root (``$SAAG_OPT_PROMPTS``, else the user's data dir, see ``saag_opt.paths``)::

    <root>/aliases.json                 {"reviewer": {"production": "v2", "best": "v3-gepa"}}
    <root>/<program>/<version>.json     one PromptVersion (the source of truth)
    <root>/<program>/<version>.md       rendered from the JSON, for humans and code review
    <root>/.lock                        filelock guarding every write

Decisions:

* ``sha256`` hashes the *content* only: canonical JSON of ``{"program", "instructions"}``. Metadata
  (scores, cost, notes, lineage) is kept beside the content and never changes the hash.
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
* Names (program, version, alias) match ``[A-Za-z0-9._-]+`` without a leading dot, so a name can
  never escape its directory (optuna artifacts/_filesystem.py checks ids the same way).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal

import filelock
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from rapidfuzz import fuzz, process

from saag_opt.errors import ArtifactError, validation_message
from saag_opt.model import canonical_json
from saag_opt.paths import PROMPTS_ENV, prompts_dir, shipped  # noqa: F401  (PROMPTS_ENV is re-exported)
from saag_opt.runfiles import atomic_write_text, utc_now

SCHEMA_VERSION = 1
"""Bump when PromptVersion's fields change meaning; migrate old files in a before-validator."""

ALIASES_FILE = "aliases.json"
LOCK_FILE = ".lock"
LOCK_TIMEOUT_S = 60.0

Source = Literal["manual", "gepa", "optuna"]
Split = Literal["train", "val", "test"]
GroundingName = Literal["paper", "calibrated"]
"""``saag.calibration.ModeName``, spelled out: the CLI imports the store and must not load the cascade
(tests/optimize/test_saag_informed.py checks the two agree)."""
SPLIT_NAMES: tuple[Split, ...] = ("train", "val", "test")

_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # always fullmatch: "$" accepts a trailing \n
_NUMBERED_RE = re.compile(r"^v(\d+)(?:$|[-._])")


def validate_name(name: str, what: str = "version") -> str:
    """Return ``name`` if it is safe as a file name; path separators and leading dots are refused."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ArtifactError(
            f"invalid {what} name {name!r}: use letters, digits, '.', '_' or '-' (no leading dot, "
            "no path separators, at most 100 characters)"
        )
    return name


def content_hash(program: str, instructions: Mapping[str, str]) -> str:
    """SHA-256 of the canonical JSON of program + instructions: what makes two versions 'the same'."""
    payload = canonical_json({"program": program, "instructions": dict(instructions)})
    return sha256(payload.encode("utf-8")).hexdigest()


class PromptVersion(BaseModel):
    """One immutable prompt version: per-predictor instructions plus where they came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    """File format version (see ``SCHEMA_VERSION``)."""
    version: str
    """Name inside the program, e.g. ``v2`` or ``v3-gepa``; safe as a file name."""
    program: str
    """The DSPy program the instructions belong to, e.g. ``reviewer``."""
    instructions: dict[str, str]
    """Predictor name (as ``named_predictors()`` spells it) -> instruction text."""
    sha256: str = ""
    """Content hash of program + instructions; filled in when empty, checked when given."""
    parents: list[str] = Field(default_factory=list)
    """Versions (same program) this one was derived from; empty for a root."""
    created: str = Field(default_factory=utc_now)
    """ISO-8601 UTC timestamp."""
    source: Source = "manual"
    """Who wrote it: a person (``manual``), a GEPA run, or an Optuna study."""
    models: dict[str, str] = Field(default_factory=dict)
    """Role -> model spec used when it was produced/scored, e.g. ``{"reviewer": "gpt-5-mini"}``."""
    dataset: str | None = None
    """Dataset it was optimised or scored on, if any."""
    split_hash: str | None = None
    """Hash of the train/val split, so scores are comparable only on the same split."""
    trained_on: list[Split] = Field(default_factory=list)
    """Splits of ``dataset`` whose examples shaped the instructions (GEPA: rollouts and reflection)."""
    selected_on: list[Split] = Field(default_factory=list)
    """Splits of ``dataset`` the version was chosen on (GEPA: the val scores)."""
    saag_report: GroundingName | None = None
    """The reviewer it was tuned for saw the gold-free SAAG report of each call, with this stage-3
    grounding (``optimize --saag-informed``); None = a plain reviewer (or unknown, for a manual prompt).
    Why kept: instructions learnt beside the report may lean on it, so ``evaluate`` warns when the
    reviewer it runs does not match (``reviewer_mismatch``)."""
    scores: dict[str, Any] = Field(default_factory=dict)
    """Metric name -> value (JSON values), e.g. ``{"val_accuracy": 0.925}``."""
    cost: dict[str, Any] = Field(default_factory=dict)
    """Spend to produce it, e.g. ``{"usd": 1.2, "metric_calls": 400}``."""
    notes: str = ""
    """Free text: provenance, caveats."""
    quarantine: str | None = None
    """Why GEPA's rails refused this proposal (``optimize.rails``): kept for the lineage, never aliased."""

    @field_validator("version", "program")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a safe name ([A-Za-z0-9._-], no leading dot)")
        return value

    @field_validator("instructions")
    @classmethod
    def _non_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("at least one predictor instruction is required")
        if any(not name.strip() for name in value):
            raise ValueError("predictor names must be non-empty")
        return value

    @field_validator("created")
    @classmethod
    def _iso(cls, value: str) -> str:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"created {value!r} is not an ISO-8601 timestamp") from exc
        if parsed.tzinfo is None:
            raise ValueError(f"created {value!r} has no UTC offset (write e.g. 2026-03-30T12:00:00+00:00)")
        return value

    @model_validator(mode="after")
    def _check_hash(self) -> PromptVersion:
        expected = content_hash(self.program, self.instructions)
        if not self.sha256:
            object.__setattr__(self, "sha256", expected)
        elif self.sha256 != expected:
            raise ValueError(f"sha256 {self.sha256[:12]}... does not match the content (expected {expected[:12]}...)")
        if self.version in self.parents:
            raise ValueError(f"version {self.version!r} lists itself as a parent")
        return self

    @property
    def ref(self) -> str:
        """``program@version``, the reference that resolves back to this version."""
        return f"{self.program}@{self.version}"

    def contaminated(self, splits: Iterable[str]) -> list[Split]:
        """Which of ``splits`` this version was trained or selected on (train, val, test order).

        Why: a score on such a split is not a held-out result. Splits are assigned by a hash of the
        example id, the same for every dataset, so the split name alone is what can overlap.
        """
        seen = set(self.trained_on) | set(self.selected_on)
        return [s for s in SPLIT_NAMES if s in seen and s in set(splits)]

    def reviewer_mismatch(self, saag_informed: bool, grounding: str) -> str | None:
        """Why a reviewer with these options is not the one this version was tuned for (None = it is, or unknown).

        Only a GEPA version knows what its reviewer saw; a manual prompt (the seeds) fits either.
        """
        if self.source != "gepa":
            return None
        if self.saag_report is not None and not saag_informed:
            return (f"tuned for a reviewer that sees the SAAG report (--saag-informed --grounding {self.saag_report}); "
                    "this reviewer does not see it")
        if self.saag_report is None and saag_informed:
            return "tuned for a reviewer without the SAAG report; this reviewer sees it (--saag-informed)"
        if saag_informed and self.saag_report != grounding:
            return (f"tuned beside a SAAG report with --grounding {self.saag_report}; this reviewer's report uses "
                    f"--grounding {grounding}")
        return None


def default_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The store root: the argument, else ``$SAAG_OPT_PROMPTS``, else ``<user data dir>/prompts``."""
    if root is not None:
        return Path(root).expanduser()
    return prompts_dir()


def load_version_file(path: str | os.PathLike[str]) -> PromptVersion:
    """Read and validate one version JSON (hash included).

    Raises:
        ArtifactError: the file is missing, not JSON, or fails validation (message names the path).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: cannot read prompt version ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        return PromptVersion.model_validate_json(text)
    except ValidationError as exc:
        raise ArtifactError(f"{path}: invalid prompt version: {validation_message(exc, whole='file')}") from exc


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
                       for p in layer.iterdir() if p.is_dir() and _NAME_RE.fullmatch(p.name)})

    def version_names(self, program: str) -> _Names:
        """Version names of a program (own and seeds) in natural order (tmp files and non-names skipped)."""
        validate_name(program, "program")
        names = {p.stem for layer in self._layers() for p in (layer / program).glob("*.json")
                 if _NAME_RE.fullmatch(p.stem)}
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


# -- rendering and diff ---------------------------------------------------------------------------


def _cell(value: Any) -> str:
    """A markdown table cell: JSON-ish for containers, '-' for empty, pipes escaped."""
    if value in (None, "", [], {}):
        text = "-"
    elif isinstance(value, list):
        text = ", ".join(map(str, value))
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={v}" for k, v in value.items())
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(version: PromptVersion) -> str:
    """Human-readable page: metadata table (lineage, models, scores), then each instruction."""
    rows = [
        ("version", version.version), ("program", version.program), ("sha256", f"`{version.sha256}`"),
        ("parents", version.parents), ("source", version.source), ("created", version.created),
        ("models", version.models), ("dataset", version.dataset), ("split hash", version.split_hash),
        ("trained on", version.trained_on), ("selected on", version.selected_on),
        ("scores", version.scores), ("cost", version.cost),
    ]
    if version.saag_report is not None:  # only then: the seeds' pages stay as shipped
        rows.append(("tuned with SAAG report", f"yes (grounding {version.saag_report})"))
    if version.quarantine is not None:
        rows.append(("quarantined", version.quarantine))
    lines = [f"# {version.ref}", "", "<!-- generated from the .json by saag-opt; do not edit by hand -->", "",
             "| field | value |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in rows]
    if version.notes:
        lines += ["", version.notes.strip()]
    for name, text in version.instructions.items():
        fence = _fence(text)
        lines += ["", f"## Predictor `{name}`", "", f"{fence}text", text.rstrip("\n"), fence]
    return "\n".join(lines) + "\n"


_DIFF_FIELDS = ("program", "sha256", "parents", "source", "created", "models", "dataset", "split_hash",
                "trained_on", "selected_on", "saag_report", "scores", "cost", "notes", "quarantine")


def diff_versions(a: PromptVersion, b: PromptVersion) -> str:
    """Metadata changes, then a unified diff of each predictor's instructions (``a`` -> ``b``)."""
    out = [f"--- {a.ref}", f"+++ {b.ref}"]
    for field in _DIFF_FIELDS:
        old, new = getattr(a, field), getattr(b, field)
        if old != new:
            if field == "sha256":
                old, new = old[:12], new[:12]
            out.append(f"~ {field}: {json.dumps(old, sort_keys=True)} -> {json.dumps(new, sort_keys=True)}")
    for name in list(a.instructions) + [n for n in b.instructions if n not in a.instructions]:
        old_text, new_text = a.instructions.get(name), b.instructions.get(name)
        if old_text == new_text:
            out.append(f"= predictor {name}: instructions identical")
            continue
        body = difflib.unified_diff(
            (old_text or "").splitlines(), (new_text or "").splitlines(),
            fromfile=f"{a.ref}:{name}" + ("" if old_text is not None else " (absent)"),
            tofile=f"{b.ref}:{name}" + ("" if new_text is not None else " (absent)"), lineterm="",
        )
        out.extend(body)
    return "\n".join(out) + "\n"
