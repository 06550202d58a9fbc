"""``saag-opt security``: AgentDojo's suites with and without the guard, as a resumable run directory.

``run_security(config)`` writes ``runs/<ts>-security/`` (docs/design.md §21): ``run.json`` (the
config, the agent, the suites and attacks, provenance), ``records.jsonl`` (one
``evaluation.security.SecurityRecord`` per arm and task or pair, appended as each finishes),
``costs.json`` for a model agent, and at the end ``summary.json`` (``SecuritySummary``: utility
without attack, utility under attack and ASR per suite and attack, each arm with its interval).
``--resume`` continues the same directory: runs already recorded are not run again; only
``max_cost`` may change. ``experiments/bench/agentdojo_guard.py`` calls this same function.

Agents: ``scripted`` (``ObedientAgent``, the deterministic worst case: no LLM) or any model spec
(``SaagLLM`` on ``lm.open_lm``: the embedded model, ``openai/<m>@URL``, ``gpt-4o``, ``fake@URL``),
which is told nothing but the user's prompt. The guard is ``Guard()``: the SAAG cascade and the
injection rule, no LLM reviewer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonlines

from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.evaluation.estimate import CHARS_PER_TOKEN
from saag_opt.evaluation.security import VERB, SecurityRecord, SecuritySummary, summarize
from saag_opt.lm import open_lm, parse_model_spec, price_call
from saag_opt.lm.ledgerfile import open_ledger, save_costs
from saag_opt.resuming import refuse_changes
from saag_opt.runfiles import (
    RECORDS_FILE,
    SUMMARY_FILE,
    RunHeader,
    atomic_write_json,
    atomic_write_jsonl,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_rows,
    resume_header,
    resumed,
    write_header,
)
from saag_opt.runtime.agentdojo import AGENTDOJO_VERSION, BENCHMARK_VERSION, require
from saag_opt.runtime.agentdojo.config import SCRIPTED, SecurityConfig

require()

from agentdojo.task_suite.load_suites import get_suite  # noqa: E402

from saag_opt.runtime.agentdojo.elements import function_to_openai  # noqa: E402
from saag_opt.runtime.agentdojo.llm import SaagLLM  # noqa: E402
from saag_opt.runtime.agentdojo.scripted import ObedientAgent  # noqa: E402
from saag_opt.runtime.agentdojo.suites import empty_ground_truth, run_suite  # noqa: E402
from saag_opt.runtime.guard import Guard  # noqa: E402

GUARD_LABEL = "Guard() (SAAG cascade + injection rule, no LLM reviewer)"


@dataclass(frozen=True)
class SecurityResult:
    """A finished (or stopped) security run."""

    run_dir: Path
    summary: SecuritySummary
    records: list[SecurityRecord]
    stopped_by: CostCapReached | None = None


@dataclass(frozen=True)
class PlanRow:
    """What ``--dry-run`` prints for one suite and attack: the runs, the agent turns, their tokens and price."""

    suite: str
    attack: str
    runs: int
    agent_turns: int
    """Scripted: 0 LM calls; a model: one turn per ground-truth call plus the answer, per run (a model may take more)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float | None = 0.0
    """At the agent model's price (None: unknown); the guard itself calls no LM."""


REPLY_ESTIMATE = 60
"""Tokens of one agent reply: a tool call, or a short final answer (estimate)."""
SYSTEM_TOKENS = 150
"""The agent's system prompt and the user's request, per turn (estimate)."""
STEP_TOKENS = 250
"""What each earlier turn adds to the next prompt: the call and its tool result (estimate)."""
PLAN_ASSUMPTIONS = (f"each turn's prompt: the suite's tool docs + {SYSTEM_TOKENS} tokens + {STEP_TOKENS} per earlier "
                    f"turn; each reply {REPLY_ESTIMATE} tokens", "about 4 characters per token",
                    "a ground-truth run's turns: a model may take more, so --max-cost USD caps the real spend")


def plan(config: SecurityConfig) -> list[PlanRow]:
    """The runs ``config`` asks for, per suite and attack, priced for a model agent (no LM is called)."""
    rows = []
    arms = len(config.arms)
    spec = parse_model_spec(config.agent) if config.agent != SCRIPTED else None
    for name in config.suites:
        suite = get_suite(BENCHMARK_VERSION, name)
        env = suite.load_and_inject_default_environment({})
        users = list(suite.user_tasks.values())[:config.limit]
        per_run = [len(u.ground_truth(env)) + 1 for u in users]
        docs = sum(len(json.dumps(function_to_openai(f))) for f in suite.tools) // CHARS_PER_TOKEN
        one = _Pass(name, len(users), sum(per_run),
                    sum(t * (docs + SYSTEM_TOKENS) + STEP_TOKENS * t * (t - 1) // 2 for t in per_run))
        if config.benign:
            rows.append(one.row("none", arms, spec))
        rows += [one.row(attack, len(suite.injection_tasks) * arms, spec) for attack in config.attacks]
    return rows


@dataclass(frozen=True)
class _Pass:
    """One pass over a suite's user tasks: what each (suite, attack) row repeats ``times``."""

    suite: str
    users: int
    turns: int
    prompt_tokens: int

    def row(self, attack: str, times: int, spec: Any) -> PlanRow:
        if spec is None:
            return PlanRow(self.suite, attack, self.users * times, 0)
        tokens_in, tokens_out = self.prompt_tokens * times, self.turns * times * REPLY_ESTIMATE
        return PlanRow(self.suite, attack, self.users * times, self.turns * times, tokens_in, tokens_out,
                       price_call(spec, tokens_in, tokens_out))


def resume_config(run_dir: Path, passed: dict[str, Any]) -> SecurityConfig:
    """The recorded config of ``run_dir`` with the allowed changes in ``passed`` (``max_cost``).

    Raises:
        RunError: not a security run, or unreadable.
        ConfigError: an option that contradicts the recorded run.
    """
    header = resume_header(run_dir, VERB)
    try:
        recorded = SecurityConfig.model_validate(header.config)
    except ValueError as exc:
        raise ConfigError(f"--resume {run_dir}: its run.json config is not a security config ({exc})") from exc
    return refuse_changes(recorded, passed, where=f"--resume {run_dir}")


def _header(config: SecurityConfig, run_dir: Path, args_passed: dict[str, Any] | None) -> RunHeader:
    return new_header(run_dir, VERB, config=config.model_dump(mode="json"), args_passed=args_passed or {},
                      models={"agent": config.agent}, plugins={"guard": {"spec": GUARD_LABEL, "arms": list(config.arms)}},
                      dataset={"spec": f"agentdojo=={AGENTDOJO_VERSION} {BENCHMARK_VERSION}",
                               "suites": ",".join(config.suites), "attacks": ",".join(config.attacks) or None,
                               "limit": config.limit})


def _agent(config: SecurityConfig, ledger: Any) -> Any:
    if config.agent == SCRIPTED:
        return ObedientAgent()
    return SaagLLM(open_lm(config.agent, role="base", ledger=ledger, temperature=0.0), mode=config.mode)


def run_security(config: SecurityConfig, *, resume: Path | None = None, args_passed: dict[str, Any] | None = None,
                 on_run: Callable[[SecurityRecord, float], None] | None = None,
                 on_start: Callable[[int], None] | None = None) -> SecurityResult:
    """Run ``config`` into a new run directory, or continue ``resume`` (module docstring).

    ``on_run(record, spent)``: after each run, with the dollars the run directory has spent so far;
    ``on_start(done)``: once, with the runs an earlier attempt finished (0 for a new run).

    Raises:
        ConfigError: a bad agent spec (or a ``max_cost`` on a model without a price).
        ModelUnavailableError: the agent's model cannot be reached (finished runs stay; resume continues).
        RunError: the run directory cannot be written or read back.
    """
    if resume is None:
        run_dir = create_run_dir(config.runs_dir, VERB)
        header = _header(config, run_dir, args_passed)
    else:
        run_dir = resume
        old = resume_header(run_dir, VERB)
        resumes = resumed(old, args_passed)
        header = old.model_copy(update={"status": "started", "finished": None, "error": None,
                                        "config": config.model_dump(mode="json"), "resumes": resumes})
    write_header(run_dir, header)
    path = run_dir / RECORDS_FILE
    stopped: CostCapReached | None = None
    with guarded_run(run_dir, header):
        records = list({r.key: r for r in read_rows(path, SecurityRecord)}.values()) if path.is_file() else []
        if path.is_file():  # rewritten whole: a row cut short by a kill must not glue onto the next one
            atomic_write_jsonl(path, [r.model_dump(mode="json") for r in records])
        done = {r.key for r in records}
        if on_start is not None:
            on_start(len(done))
        ledger = open_ledger(config.max_cost, run_dir if resume is not None else None)
        agent = _agent(config, ledger)
        try:
            with jsonlines.open(path, mode="a", flush=True) as out:
                for name in config.suites:
                    for record in run_suite(name, agent, Guard(), attacks=config.attacks, benign=config.benign,
                                            user_tasks=_first(name, config.limit), arms=config.arms, done=done):
                        out.write(record.model_dump(mode="json"))
                        records.append(record)
                        if on_run is not None:
                            on_run(record, ledger.total_dollars())
        except CostCapReached as exc:
            stopped = exc
        finally:
            if config.agent != SCRIPTED:
                save_costs(run_dir, ledger)
        summary = summarize(records, agent=config.agent, guard=GUARD_LABEL,
                            benchmark=f"AgentDojo {AGENTDOJO_VERSION} (benchmark {BENCHMARK_VERSION})",
                            unreachable_tasks=empty_ground_truth(config.suites) if config.agent == SCRIPTED else ())
        atomic_write_json(run_dir / SUMMARY_FILE, summary.model_dump(mode="json"))
    finish_header(run_dir, header, stopped)
    return SecurityResult(run_dir, summary, records, stopped)


def _first(name: str, limit: int | None) -> list[str] | None:
    """The ids of the first ``limit`` user tasks of suite ``name`` (None: all)."""
    if limit is None:
        return None
    return list(get_suite(BENCHMARK_VERSION, name).user_tasks)[:limit]


__all__ = ["GUARD_LABEL", "PLAN_ASSUMPTIONS", "SCRIPTED", "PlanRow", "SecurityConfig", "SecurityResult", "plan", "resume_config",
           "run_security"]
