"""The one resume rule of every verb: the set-up and the dataset never change; run options may.

A resumed run continues one measurement. Its review set-up, its examples and what decides its
numbers come from its ``run.json``; what the user types with ``--resume`` may only repeat them.
Only a field marked ``RUN_OPTION`` (how the rest of the run goes: workers, spend cap, budgets ...)
takes the new value. Each verb marks its own fields where it declares them, so the rule has one
home (``refuse_changes``) and the error one sentence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from pydantic import BaseModel

from saag_opt.errors import ConfigError


class _RunOption:
    """The marker's type (a singleton; ``repr`` keeps field listings readable)."""

    def __repr__(self) -> str:
        return "RUN_OPTION"


RUN_OPTION: Final = _RunOption()
"""``Annotated[..., RUN_OPTION]`` on a config field: ``--resume`` may change it."""

IGNORED: Final = frozenset({"runs_dir", "resume"})
"""Options a resume does not compare: the run directory is given, not made."""

_FLAGS: Final = {"prompts_dir": "--store", "evaluate_test": "--no-test"}
"""Fields whose command-line flag is not ``--`` plus the field name with dashes (a config's ``FLAGS`` adds its own)."""

C = TypeVar("C", bound=BaseModel)


def flag(name: str, model: type[BaseModel] | None = None) -> str:
    """The command-line flag of a config field (``prompts_dir`` -> ``--store``; ``model.FLAGS`` first)."""
    own: Mapping[str, str] = getattr(model, "FLAGS", {})
    return own.get(name) or _FLAGS.get(name, "--" + name.replace("_", "-"))


def run_options(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` marked ``RUN_OPTION``."""
    return frozenset(name for name, info in model.model_fields.items() if RUN_OPTION in info.metadata)


def refuse_changes(recorded: C, passed: Mapping[str, Any], *, where: str, clashes: Sequence[str] = ()) -> C:
    """``recorded`` (a run's configuration) with the run options in ``passed`` applied.

    ``passed``: the options the user typed with ``--resume``, by the names ``recorded`` dumps
    (``model_dump`` keys). Every one that is not a run option must repeat the recorded value (both
    are validated, so ``R2`` repeats ``r2``); ``clashes`` are the caller's own contradictions (a
    compare's A and B), reported in the same line.

    Raises:
        ConfigError: a contradiction, one line naming each option, its value and the recorded one.
    """
    model = type(recorded)
    before = recorded.model_dump(mode="json")
    options = run_options(model)
    # A field the dump leaves out at its default (``OMITTED_AT_DEFAULT``) is still the run's setting.
    defaults = {k: info.default for k, info in model.model_fields.items()}
    given = {k: v for k, v in passed.items() if (k in before or k in defaults) and k not in IGNORED}
    fixed = {k: v for k, v in given.items() if k not in options}
    had = defaults | before
    try:
        asked = defaults | model.model_validate(before | fixed).model_dump(mode="json")
        differs = [k for k in fixed if asked[k] != had[k]]
    except ValueError:
        differs = [k for k, v in fixed.items() if v != had[k]]
    found = [*clashes, *(f"{flag(k, model)} {fixed[k]!r} (the run has {had[k]!r})" for k in differs)]
    if found:
        raise ConfigError(f"{where}: {'; '.join(found)}: a resumed run keeps its recorded configuration; drop "
                          f"{'these options' if len(found) > 1 else 'that option'} or start a new run "
                          f"(only {', '.join(sorted(flag(k, model) for k in options))} may change)")
    changes = {k: v for k, v in given.items() if k in options}
    return model.model_validate(before | changes) if changes else recorded


__all__ = ["IGNORED", "RUN_OPTION", "flag", "refuse_changes", "run_options"]
