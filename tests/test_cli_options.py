"""One meaning per flag: an option several commands offer is one definition, in one help panel, with one help text.

Renamed flags keep their old spelling for a while (hidden, one deprecation line on stderr), and
``--resume``'s help names the options the command's config lets a resume change.
"""

from __future__ import annotations

import importlib
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from saag_opt.cli import app, main
from saag_opt.cli.command import VerbCommand, renamed_args
from saag_opt.cli.common import DATA, OUTPUT, RESUME_HELP, RUN, SETUP
from saag_opt.cli.tune import TUNE_RESUME_HELP
from saag_opt.resuming import flag, run_options

PANELS = {SETUP, DATA, RUN, OUTPUT}
DOCUMENTED_DIFFERENCES = {
    "--resume": "each command's help ends with the options its config lets a resume change (generated); tune's "
                "coordinates the run's study again with the --space given (TUNE_RESUME_HELP)",
}
"""Flags whose help may differ between commands, and why (the CLI reference shows each command's)."""
RESUME_CONFIGS = {
    "evaluate": "saag_opt.evaluate.config:EvaluateConfig",
    "compare": "saag_opt.evaluate.config:EvaluateConfig",
    "optimize": "saag_opt.optimize.config:OptimizeConfig",
    "security": "saag_opt.security.config:SecurityConfig",
}


def _leaves(command: Any, path: str = "saag-opt") -> list[tuple[str, Any]]:
    """(``saag-opt verb``, command) for every command that runs (groups left out)."""
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, f"{path} {name}")]


COMMANDS = _leaves(typer.main.get_command(app))


def _options() -> dict[str, dict[str, Any]]:
    """Flag -> {command path -> its click option}, for every visible option."""
    found: dict[str, dict[str, Any]] = defaultdict(dict)
    for path, command in COMMANDS:
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden and param.name != "help":
                for name in param.opts:
                    found[name][path] = param
    return found


def test_a_flag_several_commands_offer_has_one_help_text_and_one_panel() -> None:
    shared = {name: by for name, by in _options().items() if len(by) > 1}
    assert {"--base", "--dataset", "--limit", "--seed", "--max-cost", "--resume", "--json", "--store"} <= set(shared)
    for name, by in shared.items():
        texts = {path: option.help for path, option in by.items()}
        if name in DOCUMENTED_DIFFERENCES:
            texts = {path: text.split(";")[0] for path, text in texts.items() if path != "saag-opt tune"}
        assert len(set(texts.values())) == 1, f"{name} means different things: {texts}"
        panels = {path: option.rich_help_panel for path, option in by.items()}
        assert len(set(panels.values())) == 1, f"{name} sits in different panels: {panels}"


def test_every_option_sits_in_one_of_the_four_panels_with_a_short_help() -> None:
    for path, command in COMMANDS:
        for param in command.params:
            if param.param_type_name != "option" or param.name == "help":
                continue
            assert param.rich_help_panel in PANELS, (path, param.opts)
            assert param.help and len(param.help) <= 180, (path, param.opts, len(param.help or ""))  # two lines


@pytest.mark.parametrize("verb", sorted(RESUME_CONFIGS))
def test_the_resume_help_names_the_run_options_of_the_verbs_config(verb: str) -> None:
    command = typer.main.get_command(app).commands[verb]
    resume = next(p for p in command.params if p.name == "resume")
    module, _, name = RESUME_CONFIGS[verb].partition(":")
    config = getattr(importlib.import_module(module), name)
    offered = {opt for p in command.params for opt in p.opts}
    expected = sorted(flag(field, config) for field in run_options(config) if flag(field, config) in offered)
    assert expected and resume.help == f"{RESUME_HELP}; only {', '.join(expected)} may change."


def test_the_evaluate_resume_help_is_the_run_options_readme_names() -> None:
    resume = next(p for p in typer.main.get_command(app).commands["evaluate"].params if p.name == "resume")
    assert resume.help.endswith("only --batch, --fail-on-error, --max-cost, --workers may change.")
    tune = next(p for p in typer.main.get_command(app).commands["tune"].params if p.name == "resume")
    assert tune.help == TUNE_RESUME_HELP


def test_each_old_spelling_names_a_flag_its_command_has_and_no_longer_shows() -> None:
    renamed = {path: command.renamed for path, command in COMMANDS if isinstance(command, VerbCommand)}
    assert renamed["saag-opt evaluate"] == {"--trials": ("--tau2-trials",)}
    assert renamed["saag-opt tune"] == {"--workers": ("--processes",)}
    assert renamed["saag-opt security"] == {"--limit": ("--user-tasks",)}
    assert renamed["saag-opt prompts list"] == renamed["saag-opt prompts show"] == {
        "--root": ("--store",), "--json": ("--format", "json")}
    for path, command in COMMANDS:
        offered = {opt for param in command.params for opt in param.opts}
        for old, new in getattr(command, "renamed", {}).items():
            assert old not in offered and new[0] in offered, (path, old, new)


def test_an_old_spelling_is_rewritten_with_one_warning(capsys: pytest.CaptureFixture[str]) -> None:
    table = {"--trials": ("--tau2-trials",), "--json": ("--format", "json")}
    assert renamed_args(["--trials", "2", "--trials=3", "--json", "--", "--trials"], table) == [
        "--tau2-trials", "2", "--tau2-trials=3", "--format", "json", "--", "--trials"]
    assert capsys.readouterr().err == ("warning: --trials is deprecated; use --tau2-trials\n"
                                       "warning: --json is deprecated; use --format json\n")


def test_evaluate_trials_still_sets_the_tau2_trials(capsys: pytest.CaptureFixture[str]) -> None:
    """The value reaches ``trials``: a non-tau2 dataset refuses more than one, as with ``--tau2-trials``."""
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--trials", "2", "--base", "gpt-4o", "--mechanism", "none", "--dry-run"])
    assert exit_info.value.code == 2
    warning, error = capsys.readouterr().err.splitlines()
    assert warning == "warning: --trials is deprecated; use --tau2-trials"
    assert error.startswith("error: config: trials > 1 (--tau2-trials) is for tau2 datasets")


class _Stop(Exception):
    """Raised by a spy: the command got as far as the library, which did nothing."""


def test_tune_workers_still_sets_the_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Any] = []

    def spy(config: Any) -> None:
        seen.append(config)
        raise _Stop

    monkeypatch.setattr(importlib.import_module("saag_opt.tune.preflight"), "preflight_tune", spy)
    space = Path(__file__).parents[1] / "experiments" / "spaces" / "offline-bfcl.toml"
    result = CliRunner().invoke(app, ["tune", "--space", str(space), "--workers", "3", "--dry-run",
                                      "--runs-dir", str(tmp_path)])
    assert [config.workers for config in seen] == [3], result.output
    assert "warning: --workers is deprecated; use --processes" in result.output


def test_prompts_list_json_still_prints_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["prompts", "list", "--json", "--root", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ("warning: --json is deprecated; use --format json\n"
                             "warning: --root is deprecated; use --store\n")
    assert [v["version"] for v in json.loads(result.stdout)["versions"]] == ["v1", "v2"]


def test_security_attack_help_names_every_attack_the_config_takes() -> None:
    """The help is a literal (the CLI must not import the runtime package to print it); the config is the list."""
    from saag_opt.security.config import ADAPTIVE, ATTACKS  # noqa: PLC0415

    security = typer.main.get_command(app).commands["security"]  # type: ignore[attr-defined]
    help_text = next(p.help for p in security.params if "--attack" in getattr(p, "opts", ()))
    names = [*ATTACKS, *(a.removeprefix("adaptive_") for a in ADAPTIVE)]
    assert all(name in help_text for name in names), (names, help_text)


def test_no_help_text_loses_a_bracketed_word_to_rich_markup() -> None:
    """``--help`` renders with rich markup, which swallows ``[otel]`` in "the [otel] extra": brackets are escaped."""
    root = typer.main.get_command(app)
    texts = [(path, command.help or "") for path, command in COMMANDS]
    texts += [(f"{path} {param.opts[0]}", param.help or "") for path, command in [("saag-opt", root), *COMMANDS]
              for param in command.params if param.param_type_name == "option"]
    styles = {"[bold]", "[dim]", "[italic]", "[red]", "[green]", "[yellow]"}  # markup meant as markup
    eaten = [(where, m.group(0)) for where, text in texts for m in re.finditer(r"(?<!\\)\[[a-z][\w,-]*\]", text)
             if m.group(0) not in styles]
    assert not eaten, f"escape these as \\[...]: {eaten}"
