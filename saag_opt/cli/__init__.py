"""The ``saag-opt`` command line.

Thin typer commands that parse flags, call one library function and hand the result to
``saag_opt.report``.

One module per command (``score``, ``evaluate``, ``optimize``, ``compare``, ``report``, ``tune``, ``security``) or noun group
(``datasets``, ``prompts``); shared options and helpers live in ``common``, the command class
(renamed flags, the generated ``--resume`` help) in ``command``.
Heavy modules are imported inside command bodies so ``saag-opt --help`` stays fast. ``main()``
turns any ``SaagOptError`` into one ``error: ...`` line on stderr and exit code 2 (1 for a run in
which every example failed); any other exception keeps its traceback, because that is a bug, not a
user mistake. SIGTERM and Ctrl-C stop a run cleanly (``saag_opt.stopping``): run marked
``interrupted``, embedded servers stopped, exit 143/130.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from saag_opt import __version__, stopping, telemetry
from saag_opt.cli.command import verb_command
from saag_opt.cli.common import EXIT_RUN_FAILED, EXIT_USER_ERROR
from saag_opt.cli.compare import compare
from saag_opt.cli.datasets import datasets_app
from saag_opt.cli.evaluate import evaluate
from saag_opt.cli.optimize import optimize
from saag_opt.cli.prompts import prompts_app
from saag_opt.cli.report import REPORT_HELP, report, write_run_report
from saag_opt.cli.score import SCORE_HELP, score
from saag_opt.cli.security import SECURITY_HELP, security
from saag_opt.cli.tune import TUNE_HELP, tune
from saag_opt.errors import ModelUnavailableError, RunError, RunFailed, SaagOptError
from saag_opt.runfiles import on_run_finished

__all__ = ["app", "main"]

app = typer.Typer(
    name="saag-opt",
    help="Measure and improve the reviewer of a tool-calling LLM agent (SAAG cascade, help/harm, GEPA).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
# Renamed flags keep their old spelling for a while (hidden; one deprecation line on stderr), and --resume's
# help names the run options of the config named here (cli.command.VerbCommand).
app.command(name="score", help=SCORE_HELP, cls=verb_command())(score)
app.command(name="evaluate", cls=verb_command(renamed={"--trials": "--tau2-trials"},
                                              resume="saag_opt.evaluate.config:EvaluateConfig"))(evaluate)
app.command(name="optimize", cls=verb_command(resume="saag_opt.optimize.config:OptimizeConfig"))(optimize)
app.command(name="compare", cls=verb_command(resume="saag_opt.evaluate.config:EvaluateConfig"))(compare)
app.command(name="report", help=REPORT_HELP, cls=verb_command())(report)
app.command(name="tune", help=TUNE_HELP, cls=verb_command(renamed={"--workers": "--processes"}))(tune)
app.command(name="security", help=SECURITY_HELP,
            cls=verb_command(renamed={"--limit": "--user-tasks"},
                             resume="saag_opt.security.config:SecurityConfig"))(security)
app.add_typer(datasets_app, name="datasets")
app.add_typer(prompts_app, name="prompts")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"saag-opt {__version__}")
        raise typer.Exit()


RUN_COMMANDS = frozenset({"evaluate", "compare", "optimize", "tune", "security"})
"""Commands that create run directories: each finished run gets report.html (docs/design.md §13)."""


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
    otel: Annotated[bool, typer.Option("--otel", help="Send OpenTelemetry traces (OTLP/HTTP to "
                                       "OTEL_EXPORTER_OTLP_ENDPOINT; the \\[otel] extra); on by itself when an "
                                       "OTEL_* endpoint is set. Also accepted after the command.")] = False,
) -> None:
    """Measure and improve the reviewer of a tool-calling LLM agent."""
    if ctx.invoked_subcommand in RUN_COMMANDS:  # imported here: the run machinery is heavy for --help

        ctx.call_on_close(on_run_finished(write_run_report))  # unregistered when the command ends
        ctx.call_on_close(on_run_finished(_remember_run))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one stderr line and exit code 2."""
    # The bundled price map: offline runs must not wait on a network refresh (dspy and litellm read it).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    stopping.add_cleanup(_stop_embedded_servers)
    _finished_runs.clear()  # "during this command" (tests call main() many times in one process)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with stopping.stop_on_signals(), _command_span(args):
            # Not standalone: a bad option comes back as an exception, printed below as one line
            # instead of click's usage block and boxed panel.
            code = app(args=args, prog_name="saag-opt", standalone_mode=False)
    except SaagOptError as exc:
        print(f"error: {exc}{_resume_hint(exc)}", file=sys.stderr)
        sys.exit(EXIT_RUN_FAILED if isinstance(exc, RunFailed) else EXIT_USER_ERROR)
    except typer.TyperException as exc:
        line = _usage_line(exc)
        if line is None:
            raise
        if line:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(int(getattr(exc, "exit_code", EXIT_USER_ERROR)))
    except (KeyboardInterrupt, SystemExit, typer.Abort):
        if not stopping.requested():
            raise
        code = None
    if stopping.requested():  # typer turns KeyboardInterrupt (RunInterrupted is one) into exit code 130
        print(interrupted_message(), file=sys.stderr)
        stopping.exit_interrupted()
    sys.exit(code if isinstance(code, int) else 0)


def _command_span(args: list[str]) -> Any:
    """The whole command as one span, the root of its runs' traces (``--otel`` or the OTEL_* variables).

    ``--otel`` is taken out of ``args`` here (a flag of every command, before or after the verb).
    """
    flag = "--otel" in args
    while "--otel" in args:
        args.remove("--otel")
    if not telemetry.configure(flag):
        return contextlib.nullcontext()
    verb = next((a for a in args if not a.startswith("-")), "")
    return telemetry.span(f"saag-opt {verb}".strip(), {"saag_opt.command": verb})


def _usage_line(exc: BaseException) -> str | None:
    """A command-line usage error (unknown option, bad value, missing argument) as one line, else None.

    "" for the bare command of a group: its help is already printed.
    """
    format_message = getattr(exc, "format_message", None)
    if not callable(format_message):
        return None
    if type(exc).__name__ == "NoArgsIsHelpError":
        return ""
    command = getattr(getattr(exc, "ctx", None), "command_path", None)
    hint = f" (see {command} --help)" if command else ""
    return " ".join(str(format_message()).split()) + hint


_finished_runs: list[Path] = []
"""Run directories that ended during this command, innermost first (a compare's passes, then the compare)."""


def _remember_run(run_dir: Path) -> None:
    _finished_runs.append(run_dir)


def interrupted_message() -> str:
    """What to tell a user whose run was stopped: the run directory and the command that continues it."""
    from saag_opt.report.format import resume_command  # noqa: PLC0415 - start-up: report.format loads the report face

    if not _finished_runs:
        return "interrupted before any run directory was written; nothing to resume"
    run_dir = _finished_runs[-1]  # the outermost run (its passes end first)
    try:
        command = resume_command(run_dir)
    except RunError:
        return f"interrupted: finished examples are saved in {run_dir}"
    return f"interrupted: finished examples are saved and {run_dir} is marked interrupted; continue it with: {command}"


def _resume_hint(exc: BaseException) -> str:
    """For a model that went away mid-run: where the finished examples are and the command that continues."""
    from saag_opt.report.format import resume_command  # noqa: PLC0415 - start-up: report.format loads the report face

    if not isinstance(exc, ModelUnavailableError) or not _finished_runs:
        return ""
    run_dir = _finished_runs[-1]  # the outermost run (its passes end first)
    if not _has_work(run_dir):  # e.g. a missing key, found before any call: rerunning is the same
        return ""
    try:
        return f" (finished examples are kept; once fixed, continue with: {resume_command(run_dir)})"
    except RunError:
        return ""


def _has_work(run_dir: Path) -> bool:
    """Whether a run (or one of its passes or trials) finished anything a resume would keep."""
    return any(path.stat().st_size > 0 for path in run_dir.rglob("records.jsonl")) or any(
        run_dir.glob("gepa/*"))


def _stop_embedded_servers() -> None:
    """Stop the llama.cpp servers this process started (only if the embedded module was used)."""
    embedded = sys.modules.get("saag_opt.lm.embedded.server")
    if embedded is not None:
        embedded.stop_embedded_servers()

