"""Pieces every command shares: option aliases, the one mapping from options to a config, which flags were set.

The review set-up's options (``--base`` ... ``--retries``) are one alias each, named as the
``ReviewSetup`` field they fill, so ``config_values`` maps any command's options to its config by
name: evaluate, compare and optimize offer and mean the same set-up options. Closed sets come from
``saag_opt.choices`` (typer offers a ``Literal``'s values as the choices). What an option left out
means is written here once too (``DEFAULT_*``: typer takes a default only in the signature); where
the config has the same field, tests/test_cli.py checks they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

import typer
from rich.console import Console

from saag_opt.choices import GroundingName, OnUnusable, ReasoningEffort, UserReminder
from saag_opt.errors import ConfigError
from saag_opt.runfiles import atomic_write_text, on_run_finished

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

DatasetOpt = Annotated[str, typer.Option(
    "--dataset", "-d", envvar="SAAG_OPT_DATASET", show_default=False,
    help="Dataset spec: [bold]shipped:bfcl[/], [bold]shipped:registry-10[/], [bold]bfcl:simple_python[/], "
         "[bold]bfcl:non_live[/], or a path to a .jsonl file. See [bold]saag-opt datasets list[/].")]
WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", min=1, max=64, show_default="4; 1 with a local model",
    help="Examples run concurrently (a local model's server answers one request at a time).")]
SplitOpt = Annotated[str, typer.Option(
    "--split", help="train | val | test | all. Reported numbers should come from test: GEPA trains on "
    "train and selects on val.")]
LimitOpt = Annotated[Optional[int], typer.Option(
    "--limit", min=1, help="N examples (after --split), taken round-robin across categories.")]
SkipOpt = Annotated[int, typer.Option(
    "--skip", min=0, help="Leave out the first N of that round-robin order first: fresh examples after a run "
    "of --limit N was looked at (a confirmatory sample).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Bootstrap seed.")]


GROUNDING_HELP = ("SAAG stage 3: [bold]paper[/] (values verbatim in the request) or [bold]calibrated[/] "
                  "(also accepts schema defaults, reformatted dates/times, number words, ...; flags wrong "
                  "JSON types and repeated calls). See README, 'How the SAAG cascade decides'.")
GroundingOpt = Annotated[Optional[GroundingName], typer.Option(
    "--grounding", show_default="calibrated",
    help=GROUNDING_HELP + " Decides when binary/saag repair and gate+ intervene and what --saag-informed shows.")]

# -- the review set-up (agents.setup.ReviewSetup): one alias per field, named as the field ----------

BaseOpt = Annotated[str, typer.Option("--base", envvar="SAAG_OPT_BASE",
                                      help="Base agent model: gpt-4o, local, openai/<m>@URL.")]
ReviewerOpt = Annotated[Optional[str], typer.Option(
    "--reviewer", envvar="SAAG_OPT_REVIEWER", help="Reviewer model (needed by mechanisms that call a reviewer, "
    "e.g. r2): gpt-5-mini, local, openai/<m>@URL.")]
UserModelOpt = Annotated[Optional[str], typer.Option(
    "--user-model", help="tau2 datasets: the model of tau2's user simulator (default: the base model).")]
UserReminderOpt = Annotated[UserReminder, typer.Option(
    "--user-reminder", help="tau2 datasets: end the user simulator's prompt with a reminder that it is the "
    "customer (auto: for the embedded model only, which otherwise answers as the agent).")]
MaxStepsOpt = Annotated[Optional[int], typer.Option(
    "--max-steps", min=2, max=1000, show_default="tau2's 100", help="tau2 datasets: messages (agent, user, "
    "tool) before a run ends unfinished (tau2's max_steps; reward 0).")]
TrialsOpt = Annotated[int, typer.Option(
    "--trials", min=1, max=32, help="tau2 datasets: runs per task (tau2's num_trials), for pass^k.")]
PromptOpt = Annotated[str, typer.Option("--prompt", help="Reviewer prompt: reviewer@v2, an alias, or a path.")]
MechanismOpt = Annotated[str, typer.Option(
    "--mechanism", "-m", help="Review mechanism, e.g. none, binary, saag, r2, s5, g5, gate+r2 (experimental); an "
    "unknown name lists them all.")]
SaagInformedOpt = Annotated[bool, typer.Option(
    "--saag-informed", help="Experimental: show the reviewer the gold-free SAAG report of the call it reviews.")]
ReviewerTemperatureOpt = Annotated[float, typer.Option(
    "--reviewer-temperature", min=0.0, max=2.0, help="Sampling temperature of the reviewer (reasoning models "
    "ignore it; the base agent stays at 0).")]
ReasoningEffortOpt = Annotated[Optional[ReasoningEffort], typer.Option(
    "--reasoning-effort", show_default="the model's", help="Reasoning effort asked of a reasoning reviewer model "
    "(gpt-5*, o*).")]
MaxRepairsOpt = Annotated[int, typer.Option("--max-repairs", min=0, max=50, help="Budget of binary/saag repair.")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", min=0, max=20, help="Extra attempts per LM call after a 429, 5xx, timeout or malformed reply "
    "(jittered exponential backoff).")]
RunsDirOpt = Annotated[Path, typer.Option("--runs-dir", envvar="SAAG_OPT_RUNS", help="Where run directories go.")]
StoreOpt = Annotated[Optional[Path], typer.Option(
    "--store", file_okay=False, show_default="$SAAG_OPT_PROMPTS, else ~/.local/share/saag-opt/prompts",
    help="Your prompt store: prompt references resolve there and new versions go there; the built-in "
         "seeds (reviewer@v1, reviewer@v2) are visible from any store.")]
MaxCostOpt = Annotated[Optional[float], typer.Option(
    "--max-cost", min=0.0, metavar="USD", show_default="no cap",
    help="Hard cap on the run's LM spend (every role): a call that could pass it is never sent; the run "
         "stops cleanly, keeping finished work.")]

BatchOpt = Annotated[bool, typer.Option(
    "--batch", help="Send each round of independent LM calls as one OpenAI Batch API job: half the price, "
                    "slower (hours at worst); a stopped run resumes its batches in flight. Every example is "
                    "in flight at once, so --workers has no effect.")]

RequestTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--request-timeout", min=0.0, metavar="SECONDS", show_default="the HTTP client's: 600 s a read",
    help="How long one LM request may wait for the server; a request that takes longer is retried with "
         "backoff like a 5xx, then the example is recorded as an error. Lower it for a server that may hang.")]


OnUnusableOpt = Annotated[OnUnusable, typer.Option(
    "--on-unusable",
    help="A review still unreadable after one retry: approve (the call runs as proposed) or reject "
         "(the agent revises). Counted in every table either way.")]
ResumeOpt = Annotated[Optional[Path], typer.Option(
    "--resume", metavar="RUN_DIR", file_okay=False, exists=True,
    help="Continue that run directory: its recorded options are used, finished examples are kept and not asked "
         "again. Other options may only repeat the recorded values (except --workers, --max-cost, "
         "--fail-on-error).")]
DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Print the expected LM calls, tokens and dollars by role, and exit without running.")]
MlflowOpt = Annotated[Optional[str], typer.Option(
    "--mlflow", metavar="URI", show_default=False,
    help="Also log the run (and the runs nested in it) to this MLflow tracking store, e.g. sqlite:///mlflow.db: "
         "config as params, accuracy/help/harm/cost/latency as metrics, report.html and summary.json as "
         "artifacts (pip install 'saag-opt[mlflow]').")]


def warn_workers_under_batch(batch: bool, passed: dict[str, Any]) -> None:
    """``--workers`` typed for a ``--batch`` run: one line on stderr that it has no effect.

    Why not honour it: under ``--batch`` an example only waits on its batch, and fewer in flight
    would only make smaller rounds, so more batches and hours more; why not refuse it: a resumed
    run may be given ``--workers`` (a run option) whether or not it batches.
    """
    if batch and "workers" in passed:
        from saag_opt.lm.batching import BATCH_WORKERS  # noqa: PLC0415 - heavy (dspy): --batch runs only

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


def print_dry_run(estimate: Any) -> None:
    """``--dry-run``: the estimate's table on stdout (an ``evaluation.estimate.Estimate``)."""
    from saag_opt.report.estimate_tables import print_estimate  # noqa: PLC0415 - start-up: --help loads no report table

    print_estimate(Console(), estimate.to_dict())
