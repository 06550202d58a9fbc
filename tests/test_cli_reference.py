"""The generated CLI reference names every command and every visible option of the app.

Why: the docs' CLI page is written from the typer app at build time; a command or option it dropped would
be invisible to a reader of the site while ``--help`` still shows it.
"""

from __future__ import annotations

import re

import typer

from saag_opt.cli import app
from saag_opt.cli.reference import cli_reference


def _commands(command: object, path: str) -> list[tuple[str, object]]:
    found = [(path, command)]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        found += _commands(sub, f"{path} {name}")
    return found


def test_every_command_and_option_is_on_the_page() -> None:
    page = cli_reference()
    missing = []
    for path, command in _commands(typer.main.get_command(app), "saag-opt")[1:]:
        if f"## `{path}`" not in page:
            missing.append(path)
            continue
        section = page.split(f"## `{path}`", 1)[1].split("\n## ", 1)[0]
        for param in getattr(command, "params", []):
            if param.param_type_name == "option" and not param.hidden:
                missing += [f"{path} {opt}" for opt in param.opts if f"`{opt}`" not in section]
    assert not missing, f"the CLI reference lacks: {missing}"


def test_the_page_shows_help_as_the_terminal_does() -> None:
    """No rich markup ([bold]...[/]) leaks into the Markdown; every table row has four cells."""
    page = cli_reference()
    assert "[bold]" not in page and "[/]" not in page
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| group")]
    assert rows and all(len(re.split(r"(?<!\\)\|", line)) == 6 for line in rows)  # 4 cells, 5 bars
