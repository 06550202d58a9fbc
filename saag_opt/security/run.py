"""``saag-opt security``: AgentDojo's suites with and without the guard, as a resumable run directory.

``run_security(config)`` writes ``runs/<ts>-security/`` (docs/design.md §21): ``run.json`` (the
config, the agent, the suites and attacks, provenance), ``records.jsonl`` (one
``security.records.SecurityRecord`` per arm and task or pair, appended as each finishes),
``costs.json`` for a model agent or reviewer, and at the end ``summary.json`` (``SecuritySummary``: utility
without attack, utility under attack and ASR per suite and attack, each arm with its interval).
``--resume`` continues the same directory: runs already recorded are not run again; only
``max_cost`` may change. ``experiments/bench/agentdojo_guard.py`` calls this same function.

Agents: ``scripted`` (``ObedientAgent``, the deterministic worst case: no LLM) or any model spec
(``SaagLLM`` on ``lm.open_lm``: the embedded model, ``openai/<m>@URL``, ``gpt-4o``, ``fake@URL``),
which is told nothing but the user's prompt.

The guarded arm (``config.mechanism``): ``guard`` is ``Guard()``, the SAAG cascade and the injection
rule with no LLM reviewer; ``guard+r<N>`` / ``gate+guard+r<N>`` is ``Guard.load`` with the tuned
reviewer (``--reviewer``, ``--prompt``, ``--saag-informed``, ``--store``): what ``tune`` and
``optimize`` produce, with the rejection revised on the reviewer's model as the deployed guard does.
Its LMs book on the run's ledger, so ``--max-cost`` caps agent and reviewer together and
``costs.json`` has both; a decision has no time bound here (the request's own timeout holds), so a
slow model is measured, not timed out into ``on_error``. ``run.json`` names the guard (prompt
reference and hash, reviewer, mechanism), and a resume refuses another one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonlines

from saag_opt.atomic import atomic_write_json, atomic_write_jsonl
from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.evaluation.estimate import CHARS_PER_TOKEN, REPLY_TOKENS, THINKING_TOKENS, Estimate, RoleEstimate
from saag_opt.lm import is_reasoning_model, open_lm, parse_model_spec, price_call
from saag_opt.lm.spend.ledgerfile import open_ledger, save_costs
from saag_opt.resuming import refuse_changes
from saag_opt.runfiles import (
    RECORDS_FILE,
    SUMMARY_FILE,
    RunHeader,
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
from saag_opt.runtime.prompt import LoadedPrompt, load_prompt
from saag_opt.security.config import CASCADE_ONLY, SCRIPTED, SEARCH, SecurityConfig
from saag_opt.security.records import VERB, SecurityRecord, SecuritySummary, summarize

require()

from agentdojo.task_suite.load_suites import get_suite  # noqa: E402

from saag_opt.runtime.agentdojo.elements import function_to_openai  # noqa: E402
from saag_opt.runtime.agentdojo.llm import SaagLLM  # noqa: E402
from saag_opt.runtime.agentdojo.scripted import ObedientAgent  # noqa: E402
from saag_opt.runtime.guard import Guard  # noqa: E402
from saag_opt.security.search import SEARCH_FILE, SearchResult, split_user_tasks  # noqa: E402
from saag_opt.security.suites import empty_ground_truth, run_suite  # noqa: E402

GUARD_LABEL = "Guard() (SAAG cascade + injection rule, no LLM reviewer)"
"""The guarded arm of ``--mechanism guard`` (``guard_label`` names a reviewer mechanism's)."""


@dataclass(frozen=True)
class SecurityResult:
    """A finished (or stopped) security run."""

    run_dir: Path
    summary: SecuritySummary
    records: list[SecurityRecord]
    stopped_by: CostCapReached | None = None


REPLY_ESTIMATE = 60
"""Tokens of one agent reply: a tool call, or a short final answer (estimate)."""
SYSTEM_TOKENS = 150
"""The agent's system prompt and the user's request, per turn (estimate)."""
STEP_TOKENS = 250
"""What each earlier turn adds to the next prompt: the call and its tool result (estimate)."""
PLAN_ASSUMPTIONS = (f"each turn's prompt: the suite's tool docs + {SYSTEM_TOKENS} tokens + {STEP_TOKENS} per earlier "
                    f"turn; each reply {REPLY_ESTIMATE} tokens", "about 4 characters per token",
                    "a ground-truth run's turns: a model may take more, so --max-cost USD caps the real spend")
REVIEW_FRAME_TOKENS = 250
"""A review's fields, their descriptions and the calls under review, beside its instructions (estimate)."""


def plan_assumptions(config: SecurityConfig) -> tuple[str, ...]:
    """What ``preflight_security(config)`` assumes (the reviewer's part for a reviewer mechanism)."""
    turns = PLAN_ASSUMPTIONS
    if config.agent != SCRIPTED and _agent_reply(parse_model_spec(config.agent)) != REPLY_ESTIMATE:
        turns = (f"{turns[0]}, and {THINKING_TOKENS} more of a reasoning model's thinking", *turns[1:])
    if not config.reviewed:
        return turns
    agent = turns if config.agent != SCRIPTED else (
        PLAN_ASSUMPTIONS[1], "the reviews of a ground-truth run: more calls mean more reviews, so --max-cost USD "
                             "caps the real spend")
    said: tuple[str, ...] = (f"one review per ground-truth tool call of the user task, on the guarded arm only; its prompt: the "
                             f"reviewer's instructions + the suite's tool docs + {REVIEW_FRAME_TOKENS} tokens + the "
                             f"conversation so far (as the agent's turn); each reply {_review_reply(config.reviewer)} tokens",
                             "every review approves (a rejection adds a revision on the reviewer's model; a call the "
                             "injection rule blocks is never reviewed; the obedient agent's injected calls add reviews "
                             "not counted here)")
    if config.gated:
        said += (f"{config.mechanism}: every call reaches the reviewer (none vouched for by the SAAG gate), "
                 "so this is the upper end",)
    return agent + said


def _agent_reply(spec: Any) -> int:
    """Completion tokens of one agent turn (a reasoning model thinks first, as ``evaluation.estimate`` counts it)."""
    return REPLY_ESTIMATE + (THINKING_TOKENS if is_reasoning_model(spec) else 0)


def _review_reply(reviewer: str | None) -> int:
    """Completion tokens of one review (a reasoning model thinks first)."""
    spec = parse_model_spec(reviewer) if reviewer is not None else None
    return REPLY_TOKENS["reviewer"] + (THINKING_TOKENS if spec is not None and is_reasoning_model(spec) else 0)


def preflight_security(config: SecurityConfig) -> Estimate:
    """``--dry-run``: the runs ``config`` asks for, one part per suite and attack, priced by role (no LM is called).

    Roles as the run's ledger books them (``costs.json``): ``base`` (a model agent's turns: its
    ground-truth calls and the answer, per run) and ``reviewer`` (one review per ground-truth call,
    guarded arm only); the scripted agent and ``Guard()`` call no LM, so their parts count runs
    only. ``examples`` counts runs.
    """
    arms = len(config.arms)
    spec = parse_model_spec(config.agent) if config.agent != SCRIPTED else None
    review = _Reviewing.of(config)
    out = Estimate(VERB, 0, assumptions=list(plan_assumptions(config)) if spec is not None or review is not None
                   else [], unit="runs")
    for name in config.suites:
        suite = get_suite(BENCHMARK_VERSION, name)
        env = suite.load_and_inject_default_environment({})
        users = list(suite.user_tasks.values())[:config.limit]
        docs = sum(len(json.dumps(function_to_openai(f))) for f in suite.tools) // CHARS_PER_TOKEN
        first = docs + review.instructions + REVIEW_FRAME_TOKENS + SYSTEM_TOKENS if review is not None else 0
        one, injections = _Pass.over(name, users, env, docs, first), len(suite.injection_tasks)
        if config.benign:
            out.add_part(f"{name} / none", one.part(1, arms, spec, review))
        for attack in config.attacks:
            label = f"{name} / {attack}"
            if attack != SEARCH:
                out.add_part(label, one.part(injections, arms, spec, review))
                continue
            seen, held = split_user_tasks([u.ID for u in users])  # the search's trials: one arm, its tasks only
            out.add_part(label, _Pass.over(name, [u for u in users if u.ID in held], env, docs, first).part(
                injections, arms, spec, review))
            out.add_part(label, _Pass.over(name, [u for u in users if u.ID in seen], env, docs, first).part(
                injections * config.search_budget, 1, spec, review))
    return out


@dataclass(frozen=True)
class _Reviewing:
    """What ``preflight_security`` prices a review at: the reviewer's model, its instructions' tokens, its reply's."""

    spec: Any
    instructions: int
    reply: int

    @classmethod
    def of(cls, config: SecurityConfig) -> _Reviewing | None:
        """None without a reviewer (``guard``, or the unguarded arm alone); resolves the prompt (an unknown one fails here)."""
        if not config.reviewed or config.reviewer is None:
            return None
        loaded = _prompt(config)
        chars = sum(len(text) for text in loaded.instructions.values()) if loaded is not None else 0
        return cls(parse_model_spec(config.reviewer), chars // CHARS_PER_TOKEN, _review_reply(config.reviewer))


@dataclass(frozen=True)
class _Pass:
    """One pass over a suite's user tasks: what each (suite, attack) row repeats per arm."""

    suite: str
    users: int
    turns: int
    prompt_tokens: int
    calls: int
    """The user tasks' ground-truth calls: one review each on the guarded arm."""
    review_tokens: int
    """The prompt tokens of those reviews."""

    @classmethod
    def over(cls, suite: str, users: Sequence[Any], env: Any, docs: int, first_review: int) -> _Pass:
        """One pass over ``users``: each run's turns are its ground-truth calls and the answer; prompts grow per turn."""
        per_run = [len(u.ground_truth(env)) + 1 for u in users]
        return cls(suite, len(users), sum(per_run),
                   sum(t * (docs + SYSTEM_TOKENS) + STEP_TOKENS * t * (t - 1) // 2 for t in per_run),
                   sum(t - 1 for t in per_run),
                   sum((t - 1) * first_review + STEP_TOKENS * (t - 1) * (t - 2) // 2 for t in per_run))

    def part(self, repeats: int, arms: int, spec: Any, review: _Reviewing | None) -> Estimate:
        """``repeats`` passes on each of ``arms`` arms: the agent's turns on every arm, the reviews on the guarded one."""
        times = repeats * arms
        out = Estimate(VERB, self.users * times, unit="runs")
        if spec is not None:
            tokens_in, tokens_out = self.prompt_tokens * times, self.turns * times * _agent_reply(spec)
            out.add("base", RoleEstimate(self.turns * times, tokens_in, tokens_out,
                                         price_call(spec, tokens_in, tokens_out), spec.label))
        if review is not None:
            reviews, tokens_in = self.calls * repeats, self.review_tokens * repeats  # the guarded arm only
            tokens_out = reviews * review.reply
            out.add("reviewer", RoleEstimate(reviews, tokens_in, tokens_out,
                                             price_call(review.spec, tokens_in, tokens_out), review.spec.label))
        return out


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


def _prompt(config: SecurityConfig) -> LoadedPrompt | None:
    """The reviewer's prompt, resolved (None for ``guard``).

    Raises:
        ArtifactError: an unknown reference or unreadable file.
    """
    return load_prompt(config.prompt, config.prompts_dir) if config.reviewed else None


def guard_label(config: SecurityConfig, prompt: LoadedPrompt | None) -> str:
    """What the guarded arm ran, for run.json, the summary and the tables: ``GUARD_LABEL``, or the reviewer set-up."""
    if not config.reviewed or prompt is None:
        return GUARD_LABEL
    informed = ", saag-informed" if config.saag_informed else ""
    return (f"Guard.load({prompt.label}, reviewer={config.reviewer}, mechanism={config.mechanism}{informed}) "
            f"(SAAG cascade + injection rule, then the LLM reviewer; prompt sha256 {prompt.sha256[:12]})")


def _guard_plugin(config: SecurityConfig, prompt: LoadedPrompt | None) -> dict[str, Any]:
    """``run.json``'s ``plugins.guard``: the label and arms, and a reviewer mechanism's set-up."""
    plugin: dict[str, Any] = {"spec": guard_label(config, prompt), "arms": list(config.arms)}
    if config.reviewed and prompt is not None:
        plugin |= {"mechanism": config.mechanism, "reviewer": config.reviewer, "prompt": prompt.label,
                   "prompt_sha256": prompt.sha256, "saag_informed": config.saag_informed}
    return plugin


def _header(config: SecurityConfig, run_dir: Path, args_passed: dict[str, Any] | None,
            prompt: LoadedPrompt | None) -> RunHeader:
    models = {"agent": config.agent} | ({"reviewer": config.reviewer} if config.reviewed else {})
    return new_header(run_dir, VERB, config=config.model_dump(mode="json"), args_passed=args_passed or {},
                      models=models, plugins={"guard": _guard_plugin(config, prompt)},
                      dataset={"spec": f"agentdojo=={AGENTDOJO_VERSION} {BENCHMARK_VERSION}",
                               "suites": ",".join(config.suites), "attacks": ",".join(config.attacks) or None,
                               "limit": config.limit})


def _same_prompt(header: RunHeader, prompt: LoadedPrompt | None, run_dir: Path) -> None:
    """A resumed run's reviewer prompt still has the content it measured (an alias may have moved).

    Raises:
        ConfigError: the reference now resolves to other instructions.
    """
    recorded = (header.plugins.get("guard") or {}).get("prompt_sha256")
    if prompt is not None and recorded is not None and recorded != prompt.sha256:
        raise ConfigError(f"--resume {run_dir}: the reviewer prompt {prompt.label} now has sha256 {prompt.sha256[:12]}, "
                          f"the run measured {recorded[:12]}; start a new run to measure it")


def _agent(config: SecurityConfig, ledger: Any) -> Any:
    if config.agent == SCRIPTED:
        return ObedientAgent()
    return SaagLLM(open_lm(config.agent, role="base", ledger=ledger, temperature=0.0), mode=config.mode)


def _guard(config: SecurityConfig, prompt: LoadedPrompt | None, ledger: Any) -> Guard:
    """``Guard()``, or ``Guard.load`` with the tuned reviewer booking on the run's ledger (module docstring)."""
    if not config.reviewed or prompt is None:
        return Guard()
    return Guard.load(config.prompt, reviewer=config.reviewer, mechanism=config.mechanism, gate=config.gated,
                      saag_informed=config.saag_informed, store=config.prompts_dir, ledger=ledger, timeout=None,
                      cache=False)


def run_security(config: SecurityConfig, *, resume: Path | None = None, args_passed: dict[str, Any] | None = None,
                 on_run: Callable[[SecurityRecord, float], None] | None = None,
                 on_start: Callable[[int], None] | None = None) -> SecurityResult:
    """Run ``config`` into a new run directory, or continue ``resume`` (module docstring).

    ``on_run(record, spent)``: after each run, with the dollars the run directory has spent so far;
    ``on_start(done)``: once, with the runs an earlier attempt finished (0 for a new run).

    Raises:
        ConfigError: a bad agent or reviewer spec (or a ``max_cost`` on a model without a price); a resume
            whose reviewer prompt now resolves to other instructions.
        ArtifactError: an unknown reviewer prompt (before a run directory is made).
        ModelUnavailableError: the agent's or reviewer's model cannot be reached (finished runs stay; resume continues).
        RunError: the run directory cannot be written or read back.
    """
    prompt = _prompt(config)
    if resume is None:
        run_dir = create_run_dir(config.runs_dir, VERB)
        header = _header(config, run_dir, args_passed, prompt)
    else:
        run_dir = resume
        old = resume_header(run_dir, VERB)
        _same_prompt(old, prompt, run_dir)
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
        guard = _guard(config, prompt, ledger)
        try:
            with jsonlines.open(path, mode="a", flush=True) as out:
                for name in config.suites:
                    for record in run_suite(name, agent, guard, attacks=config.attacks, benign=config.benign,
                                            user_tasks=_first(name, config.limit), arms=config.arms, done=done,
                                            search_budget=config.search_budget,
                                            on_search=lambda suite, found: _keep_search(run_dir, suite, found)):
                        out.write(record.model_dump(mode="json"))
                        records.append(record)
                        if on_run is not None:
                            on_run(record, ledger.total_dollars())
        except CostCapReached as exc:
            stopped = exc
        finally:
            guard.close()
            if priced(config):
                save_costs(run_dir, ledger)
        summary = summarize(records, agent=config.agent, guard=guard_label(config, prompt),
                            benchmark=f"AgentDojo {AGENTDOJO_VERSION} (benchmark {BENCHMARK_VERSION})",
                            unreachable_tasks=empty_ground_truth(config.suites) if config.agent == SCRIPTED else ())
        atomic_write_json(run_dir / SUMMARY_FILE, summary.model_dump(mode="json"))
    finish_header(run_dir, header, stopped)
    return SecurityResult(run_dir, summary, records, stopped)


def priced(config: SecurityConfig) -> bool:
    """A model runs (the agent, or the guarded arm's reviewer): the run has a spend and a ``costs.json``."""
    return config.agent != SCRIPTED or config.reviewed


def _keep_search(run_dir: Path, suite: str, found: SearchResult) -> None:
    """The search attacker's wording and trials for ``suite``, kept in ``search.json`` (one entry per suite)."""
    path = run_dir / SEARCH_FILE
    kept = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    atomic_write_json(path, kept | {suite: found.to_json()})


def _first(name: str, limit: int | None) -> list[str] | None:
    """The ids of the first ``limit`` user tasks of suite ``name`` (None: all)."""
    if limit is None:
        return None
    return list(get_suite(BENCHMARK_VERSION, name).user_tasks)[:limit]


__all__ = ["CASCADE_ONLY", "GUARD_LABEL", "PLAN_ASSUMPTIONS", "SCRIPTED", "SecurityConfig", "SecurityResult",
           "guard_label", "plan_assumptions", "preflight_security", "priced", "resume_config", "run_security"]
