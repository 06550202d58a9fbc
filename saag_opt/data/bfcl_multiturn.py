"""BFCL's multi-turn categories as ``Episode``s (``bfcl:multi_turn_base`` and its three variants).

Read from the installed ``bfcl-eval`` (``BFCL_VERSION``), whose backends the ``bfcl`` environment
(``saag_opt.data.bfcl_environment``) runs; none of its modules are imported to load the data
(``bfcl_eval.utils`` writes folders into its install location on import), only the constant
table of function-doc files. What BFCL's inference does (``bfcl_eval.utils:
populate_test_cases_with_predefined_functions`` and ``model_handler/base_handler.py:
inference_multi_turn_FC``), done here once, at load:

* the tools are the function docs of the entry's ``involved_classes``, in that order;
* ``miss_func``: the functions named in ``missed_function[turn]`` are held out of the initial
  tools and added at that turn, whose (empty) user turn becomes BFCL's
  ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``;
* ``excluded_function`` is not applied: bfcl-eval 2026.3.23 reads it nowhere either;
* descriptions are the doc files' own: BFCL's inference appends a "Python 3 syntax" hint, which
  the single-turn loader (``data/bfcl.py``) does not add either.

The gold (``possible_answer``: per turn, BFCL call strings) goes into ``Episode.gold``, which only
the environment's checker reads; ``initial_config`` and ``involved_classes`` go into
``Episode.setup``, which only the environment reads.

Splits: the same index is the same scenario in all four categories (``multi_turn_base_7`` and
``multi_turn_miss_param_7`` share the first turn, and mostly the initial state), so an entry's split
is that of its scenario, ``multi_turn_<index>`` (``scenario_id``): no scenario is trained on in one
category and tested in another.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from saag_opt.data.bfcl import BFCL_VERSION, _read_jsonl, _short, bfcl_data_dir
from saag_opt.data.bfcl_environment import BfclEnvironment
from saag_opt.data.splits import split_of
from saag_opt.episodes import Episode, Turn, register_environment
from saag_opt.errors import ConfigError, DatasetError
from saag_opt.model import Registry, ToolSpec

MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                         "multi_turn_long_context")
"""BFCL v4's multi-turn categories (``multi_turn_composite`` is commented out in BFCL itself)."""

ENVIRONMENT = "bfcl"
"""The environment name of every BFCL multi-turn episode."""

ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
"""BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``: the user turn at which held-out functions arrive."""

_HOW_TO_GET = (f"BFCL multi-turn runs BFCL's own backends: `pip install --no-deps bfcl-eval=={BFCL_VERSION}` "
               "(and mpmath, a saag-opt dependency)")


class MultiTurnRow(BaseModel):
    """One line of ``BFCL_v4_multi_turn_<variant>.json``."""

    model_config = ConfigDict(extra="allow")
    id: str
    """``multi_turn_base_0``, ..."""
    question: list[list[dict[str, Any]]]
    """Per turn, the user's messages (empty at a ``miss_func`` turn)."""
    initial_config: dict[str, Any]
    """Per backend class, its initial state."""
    involved_classes: list[str]
    """The backend classes the entry uses (their function docs are the tools)."""
    missed_function: dict[str, list[str]] = {}
    """``miss_func``: turn index (a string) -> function names held out until that turn."""


class MultiTurnAnswer(BaseModel):
    """One line of ``possible_answer/BFCL_v4_multi_turn_<variant>.json``."""

    model_config = ConfigDict(extra="allow")
    id: str
    """Matches the question's id."""
    ground_truth: list[list[str]]
    """Per turn, the gold calls as BFCL call strings (an empty turn: call nothing)."""


def is_multi_turn(category: str) -> bool:
    """A BFCL multi-turn category name."""
    return category in MULTI_TURN_CATEGORIES


_INDEX = re.compile(r"^multi_turn_[a-z_]+?_(\d+)$")


def scenario_id(entry_id: str) -> str:
    """The scenario an entry belongs to (``multi_turn_miss_param_7`` -> ``multi_turn_7``); the split hashes it."""
    match = _INDEX.match(entry_id)
    return f"multi_turn_{match[1]}" if match else entry_id


def _data_dir() -> Path:
    data = bfcl_data_dir()
    if data is None or importlib.util.find_spec("bfcl_eval") is None:
        raise DatasetError(f"BFCL multi-turn data not found; {_HOW_TO_GET}")
    return data


def _doc_files() -> Mapping[str, str]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING  # noqa: PLC0415 - optional: bfcl-eval is installed apart (--no-deps)

    return MULTI_TURN_FUNC_DOC_FILE_MAPPING


def _function_docs(root: Path, involved: Sequence[str], cache: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    files = _doc_files()
    docs: list[dict[str, Any]] = []
    for name in involved:
        if name not in files:
            raise DatasetError(f"unknown backend class {name!r}; BFCL knows {', '.join(sorted(files))}")
        if name not in cache:
            cache[name] = [row for _, row, _ in _read_jsonl(root, f"multi_turn_func_doc/{files[name]}")]
        docs.extend(dict(doc) for doc in cache[name])
    return docs


def _turns(row: MultiTurnRow, docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], tuple[Turn, ...]]:
    """The initial function docs and the turns, with held-out functions moved to their turn (BFCL's order)."""
    held: dict[int, list[dict[str, Any]]] = {}
    for key, names in row.missed_function.items():
        if not key.isdigit() or int(key) >= len(row.question):
            raise DatasetError(f"entry {row.id!r}: missed_function turn {key!r} is not a turn index")
        for name in names:
            found = next((i for i, doc in enumerate(docs) if doc.get("name") == name), None)
            if found is None:
                raise DatasetError(f"entry {row.id!r}: missed function {name!r} is not among its classes' functions")
            held.setdefault(int(key), []).append(docs.pop(found))
    turns = []
    for index, messages in enumerate(row.question):
        added = held.get(index, [])
        if added and messages:
            raise DatasetError(f"entry {row.id!r}: turn {index} adds functions and has user messages (BFCL "
                               "expects an empty turn there)")
        shown = [{"role": "user", "content": ADDED_FUNCTIONS_PROMPT}] if added else messages
        turns.append(Turn(tuple(dict(m) for m in shown), tuple(ToolSpec.from_dict(doc) for doc in added)))
    return docs, tuple(turns)


def episode_from_rows(row: Mapping[str, Any], answer: Mapping[str, Any], category: str, docs: list[dict[str, Any]], *,
                      source: str = f"bfcl-eval=={BFCL_VERSION}") -> Episode:
    """One BFCL multi-turn entry (question row, answer row, its classes' function docs) as an ``Episode``.

    Raises:
        DatasetError: a malformed row (no path; callers add it).
    """
    try:
        question = MultiTurnRow.model_validate(row)
        truth = MultiTurnAnswer.model_validate(answer)
    except ValidationError as exc:
        raise DatasetError(_short(exc)) from None
    if len(truth.ground_truth) != len(question.question):
        raise DatasetError(f"entry {question.id!r}: {len(question.question)} turns but "
                           f"{len(truth.ground_truth)} gold turns")
    initial, turns = _turns(question, docs)
    try:
        tools = Registry.from_dicts(initial)
    except ValueError as exc:
        raise DatasetError(f"entry {question.id!r}: {exc}") from None
    setup = {"initial_config": question.initial_config, "involved_classes": list(question.involved_classes),
             "long_context": "long_context" in category}
    gold = tuple(tuple(turn) for turn in truth.ground_truth)
    return Episode(question.id, category, turns, tools, ENVIRONMENT, setup, gold,
                   split_of(scenario_id(question.id)), source)


def load_bfcl_multi_turn(category: str, *, root: str | Path | None = None) -> list[Episode]:
    """All entries of one BFCL multi-turn category, in file order, each tagged with its scenario's split.

    ``root`` is a ``bfcl_eval/data`` directory (default: the installed package's).

    Raises:
        ConfigError: an unknown category (the message lists the choices).
        DatasetError: the data or the package is missing (says how to install it), or a bad row (path:line).
    """
    if category not in MULTI_TURN_CATEGORIES:
        raise ConfigError(f"unknown BFCL multi-turn category {category!r}; choose one of: "
                          f"{', '.join(MULTI_TURN_CATEGORIES)}")
    base = Path(root) if root is not None else _data_dir()
    answers = {row["id"]: row for _, row, _ in _read_jsonl(base, f"possible_answer/BFCL_v4_{category}.json")
               if isinstance(row, dict) and "id" in row}
    docs: dict[str, list[dict[str, Any]]] = {}
    episodes = []
    for lineno, row, shown in _read_jsonl(base, f"BFCL_v4_{category}.json"):
        try:
            entry_id = row.get("id") if isinstance(row, dict) else None
            if entry_id not in answers:
                raise DatasetError(f"entry {entry_id!r} has no possible answer")
            involved = row.get("involved_classes")
            if not isinstance(involved, list):
                raise DatasetError(f"entry {entry_id!r}: 'involved_classes' must be a list of class names")
            episodes.append(episode_from_rows(row, answers[entry_id], category, _function_docs(base, involved, docs)))
        except DatasetError as exc:
            raise DatasetError(str(exc), path=shown, line=lineno) from None
    return episodes


def bfcl_multi_turn_files(category: str, *, root: str | Path | None = None) -> tuple[Path, ...]:
    """The question and answer files ``load_bfcl_multi_turn`` reads (for the catalog's memo key)."""
    base = Path(root) if root is not None else _data_dir()
    return base / f"BFCL_v4_{category}.json", base / "possible_answer" / f"BFCL_v4_{category}.json"


def _open_bfcl_environment() -> Any:
    return BfclEnvironment()


register_environment(ENVIRONMENT, _open_bfcl_environment,
                     "BFCL's executable backends, scored by its multi_turn_checker and multi_turn_irrelevance_checker")

__all__ = ["ADDED_FUNCTIONS_PROMPT", "ENVIRONMENT", "MULTI_TURN_CATEGORIES", "MultiTurnAnswer", "MultiTurnRow",
           "bfcl_multi_turn_files", "episode_from_rows", "is_multi_turn", "load_bfcl_multi_turn", "scenario_id"]
