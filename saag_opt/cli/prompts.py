"""``saag-opt prompts ...``: list, show, diff, new (hand-written), export, alias and push (to MLflow) prompt versions.

Thin by design: each command calls ``saag_opt.artifacts`` and prints with rich. ``SaagOptError``
propagates; the main CLI turns it into one stderr line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from saag_opt.artifacts import (
    PromptStore,
    PromptVersion,
    content_hash,
    diff_versions,
    export_version,
    exporter_names,
    validate_name,
)
from saag_opt.cli.command import verb_command
from saag_opt.cli.common import (
    DATA,
    FORMAT_HELP,
    MLFLOW_HELP,
    OUT_HELP,
    OUTPUT,
    SETUP,
    StoreOpt,
    output_path,
    write_output,
)
from saag_opt.errors import ConfigError
from saag_opt.optimize.rails import quarantine_reason

prompts_app = typer.Typer(help="Inspect, compare, export and alias prompt versions.", no_args_is_help=True)

ListFormat = Literal["table", "json"]
FormatOpt = Annotated[ListFormat, typer.Option("--format", "-f", rich_help_panel=OUTPUT, help=FORMAT_HELP)]

COMMAND = verb_command(renamed={"--root": "--store"})
"""The prompts commands: ``--root`` is the old spelling of ``--store``."""
LISTING = verb_command(renamed={"--root": "--store", "--json": "--format json"})
"""``list`` and ``show``: ``--json`` is the old spelling of ``--format json``."""


def _console() -> Console:
    """A console bound to the current stdout (so test runners capture it)."""
    return Console(highlight=False)


def _fmt_scores(scores: dict[str, object]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in scores.items())


@prompts_app.command("list", cls=LISTING)
def list_cmd(
    program: Annotated[str | None, typer.Option("--program", "-p", rich_help_panel=DATA, help="Only this program.")]
    = None,
    root: StoreOpt = None,
    output: FormatOpt = "table",
) -> None:
    """List versions with hash, lineage, source, scores, aliases and, if any, why GEPA quarantined one."""
    store = PromptStore(root)
    versions = store.list(program)
    aliases = store.aliases()
    if output == "json":
        typer.echo(json.dumps({"versions": [v.model_dump() for v in versions], "aliases": aliases}, indent=2))
        return
    several = len({v.program for v in versions}) > 1
    quarantined = any(v.quarantine is not None for v in versions)  # the column only when there is one
    columns = ["program"] * several + ["version", "sha256", "parents", "source", "created", "scores", "aliases"] + [
        "quarantined (never aliased)"] * quarantined
    table = Table(title=f"prompt versions in {store.location}", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    for name in columns:
        table.add_column(name, no_wrap=name in ("version", "sha256", "created"), overflow="fold")
    for v in versions:
        names = sorted(a for a, target in aliases.get(v.program, {}).items() if target == v.version)
        source = f"{v.source} (built-in)" if store.is_seed(v.program, v.version) else v.source
        row = [v.version, v.sha256[:12], ", ".join(v.parents), source, v.created[:10],
               _fmt_scores(v.scores), ", ".join(names)] + [v.quarantine or ""] * quarantined
        table.add_row(*([v.program] * several + row))
    _console().print(table if versions else f"no prompt versions in {store.location}")


@prompts_app.command("show", cls=LISTING)
def show_cmd(ref: Annotated[str, typer.Argument(help="reviewer@v2, reviewer@production or a path.")],
             root: StoreOpt = None, output: FormatOpt = "table") -> None:
    """Show one version: metadata and every predictor's instructions."""
    version = PromptStore(root).resolve(ref)
    if output == "json":
        typer.echo(version.model_dump_json(indent=2))
        return
    console = _console()
    console.print(_metadata_table(version))
    for name, text in version.instructions.items():
        console.print(Panel(Text(text), title=f"predictor {name}", title_align="left"))


def _metadata_table(version: PromptVersion) -> Table:
    """Key/value table of everything but the instructions (lineage, models, scores, notes)."""
    table = Table(title=version.ref, show_header=False, box=box.SIMPLE, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    meta = version.model_dump(exclude={"instructions", "schema_version"})
    for key, value in meta.items():
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        table.add_row(key, "-" if value in (None, "", [], {}) else shown)
    return table


@prompts_app.command("diff", cls=COMMAND)
def diff_cmd(a: Annotated[str, typer.Argument(help="Old version reference.")],
             b: Annotated[str, typer.Argument(help="New version reference.")],
             root: StoreOpt = None) -> None:
    """Unified diff of instructions per predictor, plus metadata changes."""
    store = PromptStore(root)
    text = diff_versions(store.resolve(a), store.resolve(b))
    console = _console()
    for line in text.splitlines():
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else (
            "cyan" if line.startswith(("@@", "~")) else "")
        console.print(Text(line, style=style), soft_wrap=True)


@prompts_app.command("new", cls=COMMAND)
def new_cmd(
    parent: Annotated[str, typer.Argument(help="The version it derives from, e.g. reviewer@v2.")],
    replace: Annotated[list[str], typer.Option(
        "--set", metavar="PREDICTOR=FILE", show_default=False, rich_help_panel=SETUP,
        help="Replace one predictor's instructions with a text file's (repeat for several), e.g. review=review.txt.")],
    name: Annotated[str | None, typer.Option(
        "--name", show_default="the next free v<N>", rich_help_panel=SETUP, help="Version name.")] = None,
    notes: Annotated[str, typer.Option("--notes", rich_help_panel=SETUP, help="Why this version exists (kept with it).")]
    = "",
    root: StoreOpt = None,
) -> None:
    """Save a hand-written version: PARENT's instructions with the predictors you --set, PARENT as its lineage.

    Like every version it is immutable and content-hashed; the same content twice is the same version.
    GEPA's rails read it as they would a proposal from PARENT, and what they would refuse is printed
    as a warning (the text is yours: it is saved all the same).
    """
    store = PromptStore(root)
    base = store.resolve(parent)
    instructions = dict(base.instructions)
    for item in replace:
        predictor, sep, file = item.partition("=")
        if not sep or predictor not in instructions:
            raise ConfigError(f"--set {item!r}: expected PREDICTOR=FILE with PREDICTOR one of "
                              f"{', '.join(instructions)} (the predictors of {base.ref})")
        try:
            text = Path(file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--set {item!r}: cannot read {file}: {exc}") from exc
        if not text:
            raise ConfigError(f"--set {item!r}: {file} is empty")
        instructions[predictor] = text
    if instructions == base.instructions:
        raise ConfigError(f"nothing changed: the instructions are {base.ref}'s")
    console = _console()
    same = [v for v in store.find_by_sha(content_hash(base.program, instructions), base.program) if v.quarantine is None]
    if same:
        console.print(f"same content as {same[0].ref} ({same[0].sha256[:12]}): nothing saved")
        return
    if name is None:
        version = store.save_new(base.program, instructions, suffix="", parents=[base.version], notes=notes)
    else:
        version = store.save(PromptVersion(version=validate_name(name), program=base.program,
                                           instructions=instructions, parents=[base.version], notes=notes))
    console.print(f"saved {version.ref} ({version.sha256[:12]}), parent {base.ref}; "
                  f"see it with: saag-opt prompts diff {base.ref} {version.ref}")
    concern = quarantine_reason(instructions, base.instructions)
    if concern:
        console.print(f"[yellow]warning:[/] GEPA's rails would refuse this text as a proposal: {concern}")


@prompts_app.command("export", cls=COMMAND)
def export_cmd(
    ref: Annotated[str, typer.Argument(help="Version reference.")],
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="|".join(exporter_names()), rich_help_panel=OUTPUT,
                                     help=FORMAT_HELP)] = "txt",
    out: Annotated[Path | None, typer.Option("--out", "-o", show_default="stdout", rich_help_panel=OUTPUT,
                                             help=OUT_HELP)] = None,
    root: StoreOpt = None,
) -> None:
    """Export a version for DSPy, OpenAI, MLflow, or as text/markdown/JSON."""
    out = None if out is None or str(out) == "-" else output_path(out, "--out")
    version = PromptStore(root).resolve(ref)
    text = export_version(version, fmt)
    if out is None:
        typer.echo(text, nl=False)
        return
    write_output(out, text)
    _console().print(f"wrote {version.ref} as {fmt} to {out}")


@prompts_app.command("alias", cls=COMMAND)
def alias_cmd(name: Annotated[str, typer.Argument(help="Alias, e.g. production or best.")],
              ref: Annotated[str, typer.Argument(help="Version reference it should point to.")],
              root: StoreOpt = None) -> None:
    """Point PROGRAM@NAME at the version REF resolves to (create or move the alias)."""
    store = PromptStore(root)
    version = store.resolve(ref)
    store.alias(version.program, name, version.version)
    _console().print(f"{version.program}@{name} -> {version.version} ({version.sha256[:12]})")


@prompts_app.command("push", cls=COMMAND)
def push_cmd(ref: Annotated[str, typer.Argument(help="Version reference, e.g. reviewer@production.")],
             mlflow_uri: Annotated[str, typer.Option("--mlflow", metavar="URI", show_default=False,
                                                     rich_help_panel=OUTPUT, help=MLFLOW_HELP)],
             root: StoreOpt = None) -> None:
    """Register a version in MLflow's prompt registry: one prompt per predictor, the store's aliases as MLflow aliases.

    Lineage and the content hash go along as tags; pushing the same content again registers nothing new.
    """
    from saag_opt.report.mlflow_log import MlflowTarget  # noqa: PLC0415 - optional (MLflow) and heavy

    store = PromptStore(root)
    version = store.resolve(ref)
    aliases = [a for a, target in store.aliases().get(version.program, {}).items() if target == version.version]
    target = MlflowTarget(mlflow_uri)
    pushed = target.push_prompt(version, aliases)
    table = Table(title=f"{version.ref} ({version.sha256[:12]}) in MLflow at {target.shown}", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for name in ("predictor", "MLflow prompt", "version", "aliases", "load with"):
        table.add_column(name, overflow="fold")
    for predictor, item in zip(version.instructions, pushed):
        table.add_row(predictor, item.name, f"{item.version}{'' if item.new else ' (already there)'}",
                      ", ".join(item.aliases) or "-", item.uri)
    _console().print(table)
