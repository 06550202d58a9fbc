"""The CLI reference page, written from the typer app itself so it cannot drift from ``--help``.

The docs site builds ``reference/cli.md`` with :func:`cli_reference` (through mkdocs-gen-files); a test
checks that every command and option the app has appears on the page.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from saag_opt.cli import app

__all__ = ["cli_reference"]


def _walk(command: Any, path: str) -> list[tuple[str, Any]]:
    """(``saag-opt verb``, command) for the app and every command under it (typer's own click)."""
    found = [(path, command)]
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        found += _walk(sub, f"{path} {name}")
    return found


def _plain(text: str) -> str:
    """The help as the terminal shows it: typer's rich markup ([bold]...[/]) rendered away."""
    return Text.from_markup(text.replace("\b\n", "")).plain


def _cell(text: str) -> str:
    return " ".join(_plain(text).split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) and not param.secondary_opts and not param.default:
        return ""
    value = param.default
    if value is None or value == () or callable(value):
        return ""
    return f"`{value}`"


def _options(command: Any) -> list[str]:
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            names = f"`{(param.metavar or param.name or '').upper()}`"
            help_text = getattr(param, "help", None) or "(argument)"
            panel = getattr(param, "rich_help_panel", None) or "Arguments"
        else:
            names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
            help_text = param.help or ""
            panel = getattr(param, "rich_help_panel", None) or "Options"
            if param.envvar:
                envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
                help_text += " Env: " + ", ".join(f"`{e}`" for e in envvars) + "."
        rows.append((panel, names, _cell(help_text), _default(param)))
    if not rows:
        return []
    lines = ["| group | option | what | default |", "|---|---|---|---|"]
    lines += [f"| {panel} | {names} | {text} | {default} |" for panel, names, text, default in rows]
    return lines


def cli_reference() -> str:
    """The Markdown of the CLI reference: every command, its help and a table of its options."""
    root = typer.main.get_command(app)
    out = ["# CLI reference", "",
           "Generated from the `saag-opt` command itself (`saag_opt/cli/reference.py`); `saag-opt COMMAND --help`",
           "prints the same text in the terminal.", ""]
    for path, command in _walk(root, "saag-opt"):
        if path == "saag-opt":
            out += [_cell(command.help or ""), ""]
            continue
        out += [f"## `{path}`", ""]
        if command.help:
            out += [_plain(command.help).strip(), ""]
        out += [*_options(command), ""]
    return "\n".join(out).rstrip() + "\n"
