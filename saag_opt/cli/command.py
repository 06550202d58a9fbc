"""The command class of ``saag-opt``'s commands: renamed flags' old spellings, and the generated ``--resume`` help.

``app.command(cls=verb_command(...))`` gives a command both: an old flag still works a while (hidden,
one deprecation line on stderr), and ``--resume``'s help names the options its config marks
``RUN_OPTION`` (``resuming.run_options``), so the help cannot drift from the resume rule.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand

from saag_opt.cli.common import RESUME_HELP


class VerbCommand(TyperCommand):
    """A typer command whose renamed flags keep their old spelling a while and whose ``--resume`` help is generated.

    Subclassed per command by ``verb_command``. An old spelling is rewritten to the new one before
    parsing, with one deprecation line on stderr; it is in no help. ``--resume``'s help names the
    options a resume may change: the fields the command's config marks ``RUN_OPTION``
    (``resuming.run_options``) that the command offers, read when the help is shown (the config
    is heavy for start-up).
    """

    renamed: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """Old flag -> the tokens that replace it (``--json`` -> ``--format json``)."""
    resume_config: ClassVar[str | None] = None
    """``module:Class`` of the config whose run options a resume may change."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        resume = next((param for param in self.params if param.name == "resume"), None)
        if resume is not None and self.resume_config is not None:
            offered = frozenset(opt for param in self.params for opt in [*param.opts, *param.secondary_opts])
            _help_when_shown(resume, functools.partial(resume_help, self.resume_config, offered))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Click's parsing, of ``args`` with the old spellings replaced."""
        return super().parse_args(ctx, renamed_args(args, self.renamed))


def verb_command(*, renamed: Mapping[str, str] | None = None, resume: str | None = None) -> type[VerbCommand]:
    """A ``VerbCommand`` class for ``app.command(cls=...)``: ``renamed`` maps an old flag to its new spelling."""
    table = {old: tuple(new.split()) for old, new in (renamed or {}).items()}
    return type("VerbCommand", (VerbCommand,), {"renamed": table, "resume_config": resume})


def renamed_args(args: list[str], renamed: Mapping[str, tuple[str, ...]]) -> list[str]:
    """``args`` with each old flag (``--trials 2``, ``--trials=2``) spelt the new way; one stderr line per old flag."""
    out: list[str] = []
    warned: set[str] = set()
    for index, arg in enumerate(args):
        if arg == "--":  # what follows is arguments, not options
            return out + args[index:]
        old, equals, value = arg.partition("=")
        new = renamed.get(old)
        if new is None:
            out.append(arg)
            continue
        if old not in warned:
            typer.echo(f"warning: {old} is deprecated; use {' '.join(new)}", err=True)
            warned.add(old)
        out += [*new[:-1], new[-1] + equals + value]
    return out


@functools.cache
def resume_help(config: str, offered: frozenset[str]) -> str:
    """``--resume``'s help: ``RESUME_HELP`` and the flags among ``offered`` that ``config`` marks run options."""
    from saag_opt.resuming import flag, run_options  # noqa: PLC0415 - the config is heavy: read when help is shown

    module, _, name = config.partition(":")
    model = getattr(importlib.import_module(module), name)
    flags = sorted(option for option in (flag(field, model) for field in run_options(model)) if option in offered)
    return f"{RESUME_HELP}; only {', '.join(flags)} may change."


def _help_when_shown(param: Any, text: Callable[[], str]) -> None:
    """Make ``param.help`` call ``text`` (click set it when the command was built; this reads it later)."""
    param.__class__ = type(type(param).__name__, (type(param),),
                           {"help": property(lambda _: text(), lambda _, __: None)})


__all__ = ["VerbCommand", "renamed_args", "resume_help", "verb_command"]
