"""Pieces every command shares: one definition per option, the help panels, which flags were set, renamed flags.

An option several commands offer is defined once here (help, panel, environment variable), so a
flag means one thing on every command (tests/test_cli_options.py checks it). The review set-up's
options (``--base`` ... ``--retries``) are named as the ``ReviewSetup`` field they fill, so
``config_values`` maps any command's options to its config by name. Options sit in four help panels,
the same on every command: Set-up (what is measured), Data (which examples), Run (how the run goes)
and Output (where results go). Closed sets come from ``saag_opt.choices`` (typer offers a
``Literal``'s values as the choices). What an option left out means is written here once too
(``DEFAULT_*``: typer takes a default only in the signature); where the config has the same field,
tests/test_cli.py checks they agree. A renamed flag keeps its old spelling for a while
(``cli.command.VerbCommand``), hidden from help, with one deprecation line on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

import typer
from rich.console import Console

from saag_opt.atomic import atomic_write_text
from saag_opt.choices import GroundingName, OnUnusable, ReasoningEffort, UserReminder
from saag_opt.errors import ConfigError, option_path
from saag_opt.runfiles import on_run_finished

if TYPE_CHECKING:
    from saag_opt.agents.setup import SetupConfig

C = TypeVar("C")

EXIT_USER_ERROR = 2
"""Exit code for a SaagOptError (bad input, missing key, dead server) and for rejected score rows."""
EXIT_RUN_FAILED = 1
"""Exit code for a run that ended without a result (``RunFailed``: every example failed)."""

# -- defaults: one value for every command that offers the option -----------------------------------

DEFAULT_BASE = "gpt-4o"
DEFAULT_PROMPT = "reviewer@v2"
DEFAULT_MECHANISM = "r2"
DEFAULT_REVIEWER_TEMPERATURE = 0.0
DEFAULT_MAX_REPAIRS = 5
DEFAULT_RETRIES = 4
DEFAULT_ON_UNUSABLE: OnUnusable = "approve"
DEFAULT_DATASET = "shipped:bfcl"
DEFAULT_SPLIT = "test"
"""Reported numbers come from test (GEPA trains on train and selects on val)."""
DEFAULT_SEED = 0
DEFAULT_RUNS_DIR = Path("runs")

# -- help panels: the same four on every command ------------------------------------------------------

SETUP = "Set-up"
"""What is measured: models, prompt, mechanism and how their LM calls behave (``ReviewSetup``)."""
DATA = "Data"
"""Which examples: dataset, split and how many."""
RUN = "Run"
"""How the run goes: concurrency, seed, spend cap, resume, the verb's own search settings."""
OUTPUT = "Output"
"""Where results go besides the run directory's files and the terminal."""

# -- the review set-up (agents.setup.ReviewSetup): one alias per field, named as the field ----------

_BASE = typer.Option("--base", envvar="SAAG_OPT_BASE", rich_help_panel=SETUP,
                     help="Base agent model: gpt-4o, local, openai/<m>@URL.")
BaseOpt = Annotated[str, _BASE]
BasePinOpt = Annotated[Optional[str], _BASE]
"""tune's ``--base``: when given, it replaces the space's value (as ``--reviewer``, ``--dataset``, ``--limit``)."""
_REVIEWER = typer.Option("--reviewer", envvar="SAAG_OPT_REVIEWER", rich_help_panel=SETUP,
                         help="Reviewer model, for mechanisms that call one (e.g. r2): gpt-5-mini, local, openai/<m>@URL.")
ReviewerOpt = Annotated[Optional[str], _REVIEWER]
PromptOpt = Annotated[str, typer.Option("--prompt", rich_help_panel=SETUP,
                                        help="Reviewer prompt: reviewer@v2, an alias, or a path.")]
MechanismOpt = Annotated[str, typer.Option(
    "--mechanism", "-m", rich_help_panel=SETUP,
    help="Review mechanism: none, binary, saag, r2, s5, g5, gate+r2 (experimental) ...; an unknown name lists them all.")]
SaagInformedOpt = Annotated[bool, typer.Option(
    "--saag-informed", rich_help_panel=SETUP,
    help="Experimental: show the reviewer the gold-free SAAG report of the call it reviews.")]
GROUNDING_HELP = ("SAAG stage 3: paper (values verbatim in the request) or calibrated (also schema defaults, "
                  "reformatted dates, number words ...).")
GroundingOpt = Annotated[Optional[GroundingName], typer.Option(
    "--grounding", show_default="calibrated", rich_help_panel=SETUP, help=GROUNDING_HELP)]
ReviewerTemperatureOpt = Annotated[float, typer.Option(
    "--reviewer-temperature", min=0.0, max=2.0, rich_help_panel=SETUP,
    help="Sampling temperature of the reviewer (reasoning models ignore it; the base agent stays at 0).")]
ReasoningEffortOpt = Annotated[Optional[ReasoningEffort], typer.Option(
    "--reasoning-effort", show_default="the model's", rich_help_panel=SETUP,
    help="Reasoning effort asked of a reasoning reviewer model (gpt-5*, o*).")]
MaxRepairsOpt = Annotated[int, typer.Option("--max-repairs", min=0, max=50, rich_help_panel=SETUP,
                                            help="Repair budget of the binary and saag mechanisms.")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", min=0, max=20, rich_help_panel=SETUP,
    help="Extra attempts per LM call after a 429, 5xx, timeout or malformed reply (with backoff).")]
RequestTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--request-timeout", min=0.0, metavar="SECONDS", show_default="the HTTP client's: 600 s a read",
    rich_help_panel=SETUP, help="How long one LM request may wait; a longer one is retried like a 5xx.")]
OnUnusableOpt = Annotated[OnUnusable, typer.Option(
    "--on-unusable", rich_help_panel=SETUP,
    help="A review unreadable after one retry: approve (the call runs) or reject (the agent revises).")]
StoreOpt = Annotated[Optional[Path], typer.Option(
    "--store", file_okay=False, show_default="$SAAG_OPT_PROMPTS, else ~/.local/share/saag-opt/prompts",
    rich_help_panel=SETUP,
    help="Your prompt store: references resolve there, new versions go there; the built-in seeds show in any.")]
UserModelOpt = Annotated[Optional[str], typer.Option(
    "--user-model", show_default="the base model", rich_help_panel=SETUP,
    help="tau2 datasets: the model of tau2's user simulator.")]
UserReminderOpt = Annotated[UserReminder, typer.Option(
    "--user-reminder", rich_help_panel=SETUP,
    help="tau2 datasets: remind the user simulator it is the customer (auto: for the embedded model only).")]
ConfigFileOpt = Annotated[Optional[Path], typer.Option(
    "--config", metavar="FILE.toml", exists=True, dir_okay=False, show_default=False, rich_help_panel=SETUP,
    help="Read options from this TOML file (keys as in run.json's config); flags given override it.")]

# -- data --------------------------------------------------------------------------------------------

_DATASET = typer.Option(
    "--dataset", "-d", envvar="SAAG_OPT_DATASET", show_default=False, rich_help_panel=DATA,
    help="Dataset: shipped:bfcl, bfcl:<category>, tau2:<domain>, a .jsonl path ... (saag-opt datasets list).")
DatasetOpt = Annotated[str, _DATASET]
DatasetPinOpt = Annotated[Optional[str], _DATASET]
SplitOpt = Annotated[str, typer.Option(
    "--split", rich_help_panel=DATA, help="train | val | test | all; report on test (GEPA trains on train, selects on val).")]
_LIMIT = typer.Option("--limit", min=1, rich_help_panel=DATA,
                      help="Use N examples (after --split), taken round-robin over the categories.")
LimitOpt = Annotated[Optional[int], _LIMIT]
SkipOpt = Annotated[int, typer.Option(
    "--skip", min=0, rich_help_panel=DATA,
    help="Leave out the first N of that order (fresh examples after a run of --limit N was looked at).")]
TEST_LIMIT_HELP = "Use at most N TEST examples in the final re-evaluation."
Tau2TrialsOpt = Annotated[int, typer.Option(
    "--tau2-trials", min=1, max=32, rich_help_panel=DATA,
    help="tau2 datasets: runs per task (tau2's num_trials), for pass^k.")]
MaxStepsOpt = Annotated[Optional[int], typer.Option(
    "--max-steps", min=2, max=1000, show_default="tau2's 100", rich_help_panel=DATA,
    help="tau2 datasets: messages (agent, user, tool) before a run ends unfinished, with reward 0.")]

# -- how the run goes --------------------------------------------------------------------------------

WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", min=1, max=64, show_default="4; 1 with a local model", rich_help_panel=RUN,
    help="Examples run concurrently (a local model's server answers one request at a time).")]
SeedOpt = Annotated[int, typer.Option(
    "--seed", rich_help_panel=RUN, help="Seed of the run's random choices (the bootstrap; GEPA's minibatches; tune's sampler).")]
MaxCostOpt = Annotated[Optional[float], typer.Option(
    "--max-cost", min=0.0, metavar="USD", show_default="no cap", rich_help_panel=RUN,
    help="Hard cap on the run's LM spend, resumes included: the run stops cleanly before a call could pass it.")]
BatchOpt = Annotated[bool, typer.Option(
    "--batch", rich_help_panel=RUN,
    help="Send the LM calls as OpenAI Batch API jobs: half the price, slower (hours at worst); --workers has no effect.")]
DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", rich_help_panel=RUN,
    help="Print what the run would ask and cost (LM calls, tokens, dollars) and exit without running.")]
NoTestOpt = Annotated[bool, typer.Option("--no-test", rich_help_panel=RUN,
                                         help="Skip the final re-evaluation on TEST.")]
RESUME_HELP = "Continue that run directory with its recorded options, keeping its finished work"
"""The first words of every ``--resume`` help; ``cli.command.VerbCommand`` adds the options a resume may change."""
ResumeOpt = Annotated[Optional[Path], typer.Option(
    "--resume", metavar="RUN_DIR", file_okay=False, exists=True, rich_help_panel=RUN, help=RESUME_HELP + ".")]

# -- output ------------------------------------------------------------------------------------------

RunsDirOpt = Annotated[Path, typer.Option("--runs-dir", envvar="SAAG_OPT_RUNS", rich_help_panel=OUTPUT,
                                          help="Where run directories go.")]
JsonOutOpt = Annotated[Optional[Path], typer.Option(
    "--json", metavar="FILE", dir_okay=False, show_default=False, rich_help_panel=OUTPUT,
    help="Also write the results as JSON to this file.")]
MLFLOW_HELP = "MLflow tracking store to write to, e.g. sqlite:///mlflow.db (pip install 'saag-opt\\[mlflow]')."
MlflowOpt = Annotated[Optional[str], typer.Option("--mlflow", metavar="URI", show_default=False,
                                                  rich_help_panel=OUTPUT, help=MLFLOW_HELP)]
OUT_HELP = "Write to this file (- for stdout)."
FORMAT_HELP = "Output format."


def warn_workers_under_batch(batch: bool, passed: dict[str, Any]) -> None:
    """``--workers`` typed for a ``--batch`` run: one line on stderr that it has no effect.

    Why not honour it: under ``--batch`` an example only waits on its batch, and fewer in flight
    would only make smaller rounds, so more batches and hours more; why not refuse it: a resumed
    run may be given ``--workers`` (a run option) whether or not it batches.
    """
    if batch and "workers" in passed:
        from saag_opt.lm.batch.rounds import BATCH_WORKERS  # noqa: PLC0415 - heavy (dspy): --batch runs only

        typer.echo(f"warning: --workers has no effect under --batch: every example is in flight at once (up to "
                   f"{BATCH_WORKERS}), each waiting on its batch", err=True)


def log_to_mlflow(ctx: typer.Context, uri: str | None, dry_run: bool = False) -> None:
    """``--mlflow URI``: open the store now (a bad URI fails before any LM call), log the command's runs when it ends.

    The runs are those that finish during the command (``runfiles.on_run_finished``), each logged
    with the runs nested in it (``saag_opt.report.mlflow_log``), after their report.html is written.
    """
    if uri is None or dry_run:
        return
    from saag_opt.report.mlflow_log import MlflowTarget  # noqa: PLC0415 - optional (MLflow) and heavy: --mlflow only

    target = MlflowTarget(uri)
    target.experiment_id()
    finished: list[Path] = []
    stop_collecting = on_run_finished(finished.append)

    def log() -> None:
        stop_collecting()
        if not finished:
            return
        logged = target.log_runs(finished)
        top = [run for run in logged if run.parent is None]
        typer.echo(f"MLflow: logged {len(top)} run(s) and {len(logged) - len(top)} nested to experiment "
                   f"{target.experiment_name!r} at {target.shown} (run {', '.join(r.run_id for r in top)})", err=True)

    ctx.call_on_close(log)


def explicit_params(ctx: typer.Context, sources: tuple[str, ...] = ("COMMANDLINE", "ENVIRONMENT")) -> set[str]:
    """Names of the options set on the command line or through the environment, not by default.

    Why: run.json records them (what the user asked for vs what defaults filled in) and
    ``optimize --resume`` lets only these override the stored config. Compared by name because
    typer vendors click, so ``click.core.ParameterSource`` members never compare equal.
    """
    return {name for name in ctx.params if getattr(ctx.get_parameter_source(name), "name", None) in sources}


def passed_values(ctx: typer.Context, values: dict[str, Any], *, command_line_only: bool = False) -> dict[str, Any]:
    """The subset of ``values`` the user set explicitly, JSON-friendly (paths as strings).

    ``command_line_only``: leave out values from environment variables (``--resume`` checks only
    what was typed against the run's recorded configuration; a shell's ``SAAG_OPT_BASE`` is not a
    request to change it).
    """
    explicit = explicit_params(ctx, ("COMMANDLINE",) if command_line_only else ("COMMANDLINE", "ENVIRONMENT"))
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items() if k in explicit}


def output_path(path: Path | None, option: str = "--json") -> Path | None:
    """Check an output file before the work that fills it (its folder is created).

    Why: a path in a missing folder or ``-`` used to fail only after the whole run, with a
    traceback (or write a file named ``-``).

    Raises:
        ConfigError: ``-``, a folder, or a folder that cannot be created.
    """
    if path is None:
        return None
    if str(path) == "-":
        raise ConfigError(f"{option} -: the tables go to stdout; give a file path for the JSON")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot create its folder ({exc.strerror or exc})") from None
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; give a file path")
    return path


def write_output(path: Path, text: str) -> None:
    """Write an output file atomically (a reader never sees half of it)."""
    atomic_write_text(path, text)


def split_filter(split: str) -> str | None:
    """``--split all`` means no filter."""
    return None if split == "all" else split


def config_values(ctx: typer.Context, config: type[SetupConfig]) -> dict[str, Any]:
    """The command's options that are fields of ``config`` (set-up and verb), by name.

    ``None`` for a set-up option means "the set-up's default" (``--grounding`` not given: calibrated).
    """
    from saag_opt.agents.setup import ReviewSetup  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

    fields = config.option_fields()
    return {name: value for name, value in ctx.params.items()
            if name in fields and not (value is None and name in ReviewSetup.model_fields)}


def validated(build: Callable[..., C], *args: Any, **kwargs: Any) -> C:
    """``build(...)``, a pydantic validation error as one ``ConfigError`` line naming each option.

    Raises:
        ConfigError: a bad option value (or the builder's own).
    """
    try:
        return build(*args, **kwargs)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError.from_validation(exc) from exc


@dataclass(frozen=True)
class ConfigFile:
    """``--config FILE.toml``: options by config field name, read as tune reads SPACE.toml's ``[fixed]`` table.

    Flags (and environment variables) given win over the file, the file over the defaults; what the
    file sets is recorded in ``run.json`` beside what was typed, and the config it records is the merge.
    """

    path: Path | None = None
    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path | None, fields: Collection[str], verb: str) -> ConfigFile:
        """The file at ``path`` (no file: nothing), each key one of ``fields``.

        Raises:
            ConfigError: unreadable TOML, or a key that is not an option of ``verb`` (naming the file and the key).
        """
        if path is None:
            return cls()
        from saag_opt.tune.space import load_options  # noqa: PLC0415 - heavy: CLI start-up (tests/test_cli.py)

        return cls(path, load_options(path, fields, verb=verb))

    def under(self, values: Mapping[str, Any], given: Collection[str]) -> dict[str, Any]:
        """``values`` with the file's where no flag was ``given`` (config field names)."""
        return dict(values) | self.passed(given)

    def passed(self, given: Collection[str]) -> dict[str, Any]:
        """What the file sets that no flag overrides: the user's request, recorded with what was typed."""
        return {key: value for key, value in self.values.items() if key not in given}

    def validated(self, build: Callable[..., C], **values: Any) -> C:
        """``validated(build, **values)``; a bad value that came from the file is said to come from it.

        Raises:
            ConfigError: a bad option value, one line (``limit: ... (limit from run.toml)``).
        """
        try:
            return validated(build, **values)
        except ConfigError as exc:
            errors = getattr(exc.__cause__, "errors", None)
            named = [option_path(error.get("loc")) for error in (errors() if callable(errors) else [])]
            mine = sorted({path[0] for path in named if path} & set(self.values))
            if self.path is None or not mine:
                raise
            raise ConfigError(f"{exc} ({', '.join(mine)} from {self.path})") from exc.__cause__


def print_dry_run(estimate: Any) -> None:
    """``--dry-run`` of every verb: its ``evaluation.estimate.Estimate`` as the one estimate table, on stdout."""
    from saag_opt.report.estimate_tables import print_estimate  # noqa: PLC0415 - start-up: --help loads no report table

    print_estimate(Console(), estimate.to_dict())
