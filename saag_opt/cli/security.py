"""``saag-opt security``: the guard against AgentDojo's prompt injections, scored by AgentDojo.

Thin: flags -> ``SecurityConfig`` -> ``run_security`` -> ``report.security_tables``; needs the
``[agentdojo]`` extra (a missing extra is one error line).
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer
from rich.console import Console

from saag_opt.cli.common import (
    DATA,
    DEFAULT_PROMPT,
    DEFAULT_RUNS_DIR,
    SETUP,
    ConfigFile,
    ConfigFileOpt,
    DryRunOpt,
    MaxCostOpt,
    MechanismOpt,
    PromptOpt,
    ResumeOpt,
    ReviewerOpt,
    RunsDirOpt,
    SaagInformedOpt,
    StoreOpt,
    explicit_params,
    passed_values,
    print_dry_run,
    validated,
)
from saag_opt.errors import ConfigError

SECURITY_HELP = """Run AgentDojo's prompt-injection suites with and without the runtime guard, scored by AgentDojo.

Per suite and attack: utility without attack, utility under attack and attack success rate (ASR),
each arm with a 95% interval, beside the published defences' numbers (report.html). --agent scripted
is the deterministic worst case (completes the user task from its ground truth and obeys every
injected instruction: no LLM); any model spec (local, openai/<m>@URL, gpt-4o) drives a real agent.
The guarded arm is Guard() (--mechanism guard: the SAAG cascade and the injection rule, no LLM), or the
tuned reviewer that tune and optimize produce: --mechanism guard+r1 (or gate+guard+r1) --reviewer SPEC
--prompt REF. --dry-run prints the runs, agent turns and reviews per suite and attack, with their tokens
and price for a model; --max-cost caps agent and reviewer together. Needs: pip install
'saag-opt\\[agentdojo]'. Each finished run is kept; --resume continues a run."""
"""Help text of ``saag-opt security``."""


class Mode(str, Enum):
    """How a model agent calls tools."""

    auto = "auto"
    native = "native"
    json = "json"


def security(
    ctx: typer.Context,
    config_file: ConfigFileOpt = None,
    agent: Annotated[str, typer.Option(
        "--agent", envvar="SAAG_OPT_AGENT", rich_help_panel=SETUP,
        help="scripted (the obedient worst case, no LLM) or a model spec: local, openai/<m>@URL, gpt-4o.")]
    = "scripted",
    mode: Annotated[Mode, typer.Option(
        "--mode", rich_help_panel=SETUP,
        help="A model agent's tool calls: native tools, json answers, or auto (json without native tools).")]
    = Mode.auto,
    guard: Annotated[bool, typer.Option(
        "--guard/--no-guard", rich_help_panel=SETUP,
        help="Run both arms (without and with the guard), or the unguarded arm alone.")] = True,
    suite: Annotated[Optional[list[str]], typer.Option(
        "--suite", "-s", show_default="all four", rich_help_panel=DATA,
        help="workspace, travel, banking, slack (repeat or comma-separate).")] = None,
    attack: Annotated[Optional[list[str]], typer.Option(
        "--attack", "-a", show_default="all six", rich_help_panel=DATA,
        help="important_instructions, tool_knowledge, direct, ignore_previous, system_message, injecagent "
             "(AgentDojo), adaptive_{markerless|voice|swap|reviewer|laundering|search} (vs the guard)")] = None,
    benign: Annotated[bool, typer.Option(
        "--benign/--no-benign", rich_help_panel=DATA,
        help="Also run every user task without an attack (utility without attack).")] = True,
    limit: Annotated[Optional[int], typer.Option(
        "--user-tasks", min=1, show_default="all", rich_help_panel=DATA,
        help="Run the first N user tasks of each suite (each with every injection task).")] = None,
    search_budget: Annotated[int, typer.Option(
        "--search-budget", min=1, max=500, rich_help_panel=DATA,
        help="Trials per suite of the search attacker (adaptive_search), on every fifth user task.")] = 24,
    mechanism: MechanismOpt = "guard",  # runtime.agentdojo.config.CASCADE_ONLY (not imported: CLI start-up)
    reviewer: ReviewerOpt = None,
    prompt: PromptOpt = DEFAULT_PROMPT,
    saag_informed: SaagInformedOpt = False,
    prompts_dir: StoreOpt = None,
    max_cost: MaxCostOpt = None,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = None,
    runs_dir: RunsDirOpt = DEFAULT_RUNS_DIR,
) -> None:
    """Run the suites; print the tables; the run directory gets report.html."""
    try:
        from saag_opt.security.run import (  # noqa: PLC0415 - optional: the agentdojo extra (and heavy: CLI start-up)
            CASCADE_ONLY,
            SecurityConfig,
            preflight_security,
            priced,
            resume_config,
            run_security,
        )
    except ImportError as exc:
        raise ConfigError(str(exc)) from None
    from saag_opt.report.security_tables import (  # noqa: PLC0415 - start-up: --help loads no report table
        SecurityProgress,
        print_security_report,
    )

    file = ConfigFile.read(config_file, SecurityConfig.model_fields, "security")
    given = {_FIELDS.get(name, name) for name in explicit_params(ctx)}
    values = file.under({"suites": suite, "attacks": attack, "agent": agent, "mode": mode.value, "guard": guard,
                         "benign": benign, "limit": limit, "max_cost": max_cost, "runs_dir": runs_dir,
                         "mechanism": mechanism, "prompt": prompt,
                         "reviewer": None if "reviewer" in explicit_params(ctx, ("ENVIRONMENT",)) and mechanism == CASCADE_ONLY
                         else reviewer,
                         "saag_informed": saag_informed, "prompts_dir": prompts_dir, "search_budget": search_budget},
                        given)
    typed = passed_values(ctx, ctx.params, command_line_only=resume is not None)
    passed = {_FIELDS.get(k, k): v for k, v in typed.items() if _FIELDS.get(k, k) in values} | file.passed(given)
    if isinstance(passed.get("mode"), Enum):
        passed["mode"] = passed["mode"].value
    if resume is not None:
        config = validated(resume_config, resume, passed)
    else:
        config = file.validated(SecurityConfig, **{k: v for k, v in values.items() if v is not None})
    estimate = preflight_security(config)
    if dry_run:
        print_dry_run(estimate)
        return
    with SecurityProgress(Console(stderr=True), estimate.examples, config.max_cost,
                          priced=priced(config)) as progress:
        result = run_security(config, resume=resume, args_passed=passed, on_run=progress, on_start=progress.start)
    print_security_report(Console(), result.summary, str(result.run_dir),
                          stopped=str(result.stopped_by) if result.stopped_by else None)


_FIELDS = {"suite": "suites", "attack": "attacks"}
"""Option -> config field, where the names differ (a repeatable option is singular)."""

__all__ = ["SECURITY_HELP", "security"]
