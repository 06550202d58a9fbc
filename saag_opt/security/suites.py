"""Run AgentDojo's suites with and without the guard, scored by AgentDojo's own checks.

For each suite: every user task without an attack (utility), then for each attack every (user
task, injection task) pair (utility under attack and attack success, AgentDojo's ``security``:
True = the attacker's goal was met). Each arm (``none``: the plain pipeline; ``guard``: the same
pipeline with ``GuardElement`` + ``StripBlocked``) runs on a deep copy of the same injected
environment, with the same agent, so the two arms differ by the guard alone.

Scoring is ``TaskSuite.run_task_with_pipeline``: AgentDojo loads nothing again, inits the task,
runs the pipeline and applies the task's utility / security checks. Nothing is logged to disk
(AgentDojo's ``TraceLogger`` is not opened); each record keeps its own trace (``trace.Tracer``:
the conversation, the guard's decision on each call, what was scored, where the injection sits).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from saag_opt.runtime.agentdojo import BENCHMARK_VERSION, require
from saag_opt.security.config import ATTACKS, SUITES
from saag_opt.security.records import ARMS, Arm, SecurityRecord, run_key

require()

from agentdojo.attacks.attack_registry import load_attack  # noqa: E402
from agentdojo.task_suite.load_suites import get_suite  # noqa: E402

from saag_opt.runtime.agentdojo.elements import guarded_pipeline  # noqa: E402
from saag_opt.security import adaptive  # noqa: E402, F401 - registers the adaptive attacks with AgentDojo
from saag_opt.security import search as searching  # noqa: E402
from saag_opt.security.trace import Tracer  # noqa: E402

if TYPE_CHECKING:
    from saag_opt.runtime.guard import Guard



def pipelines(agent: Any, guard: Guard) -> tuple[dict[str, Any], dict[str, Tracer]]:
    """The two arms around one agent element, and the tracer of each (the guard's decisions, the conversation)."""
    tracers = {"none": Tracer(), "guard": Tracer()}
    return {"none": guarded_pipeline(agent, None, tap=tracers["none"].tap),
            "guard": guarded_pipeline(agent, guard, on_decision=tracers["guard"], tap=tracers["guard"].tap)}, tracers


def run_suite(name: str, agent: Any, guard: Guard, *, attacks: Sequence[str] = ATTACKS, benign: bool = True,
              user_tasks: Iterable[str] | None = None, injection_tasks: Iterable[str] | None = None,
              arms: Sequence[str] = ARMS, done: Container[tuple[str, ...]] = (),
              on_run: Callable[[SecurityRecord], None] | None = None, search_budget: int = searching.BUDGET,
              on_search: Callable[[str, searching.SearchResult], None] | None = None) -> Iterator[SecurityRecord]:
    """Yield every run of suite ``name`` (module docstring); a scripted ``agent`` has ``set_task(user, injection)``.

    An attack may script how the scripted agent obeys it (its ``obedience`` hook) and what a pair is
    scored against (its ``task_for`` hook): the adaptive attacks (``adaptive``) do.

    ``benign``: also run each user task without an attack. ``user_tasks`` / ``injection_tasks``
    restrict the tasks (ids such as ``user_task_0``). ``done``: ``SecurityRecord.key``s already
    run (a resumed run); they are not run again, and a pair whose arms are all done is not even
    injected.

    The search attacker (``search.NAME``) first searches its wording on every fifth user task, on the
    guarded arm (the unguarded one when the guard does not run), ``search_budget`` trials, then runs
    on the other user tasks only; ``on_search(suite, result)`` gets what it found. A resumed run
    searches again (deterministic for the scripted agent; a model agent's calls replay from the LM
    cache) unless every held-out run is done.
    """
    suite = get_suite(BENCHMARK_VERSION, name)
    arms_of, tracers = pipelines(agent, guard)
    chosen = [suite.get_user_task_by_id(t) for t in user_tasks] if user_tasks is not None else list(suite.user_tasks.values())
    injections_of = ([suite.get_injection_task_by_id(t) for t in injection_tasks] if injection_tasks is not None
                     else list(suite.injection_tasks.values()))

    def todo(user: Any, injection: Any, attack: str | None) -> list[str]:
        return [arm for arm in arms if run_key(name, attack, user.ID, injection.ID if injection is not None else None,
                                                arm) not in done]

    def run(user: Any, injection: Any, attack: str | None, injected: dict[str, str], env: Any,
            left: Sequence[str], hooks: Any = None) -> Iterator[SecurityRecord]:
        scored = hooks.task_for(injection, user) if hasattr(hooks, "task_for") else injection
        for arm in left:
            if hasattr(agent, "set_task"):  # the scripted agent; a model agent is told only the prompt
                agent.set_task(user, injection, getattr(hooks, "obedience", None))
            tracer = tracers[arm]
            tracer.reset()
            started = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                utility, security = suite.run_task_with_pipeline(arms_of[arm], user, scored, injected,
                                                                 environment=env.model_copy(deep=True))
            result = SecurityRecord(suite=name, user_task=user.ID, injection_task=injection.ID if injection else None,
                                    attack=attack, arm=cast(Arm, arm), utility=bool(utility),
                                    security=bool(security) if injection is not None else None,
                                    blocks=tracer.blocks(), excepted=tracer.excepted(),
                                    seconds=time.perf_counter() - started,
                                    trace=tracer.trace(injected))
            if on_run is not None:
                on_run(result)
            yield result

    if benign:
        clean = suite.load_and_inject_default_environment({})
        for user in chosen:
            left = todo(user, None, None)
            if left:
                yield from run(user, None, None, {}, clean, left)
    for attack_name in attacks:
        users = chosen
        if attack_name == searching.NAME:
            seen, held = searching.split_user_tasks([u.ID for u in chosen])
            users = [u for u in chosen if u.ID in held]
            if any(todo(u, i, attack_name) for u in users for i in injections_of):
                target = ("guard",) if "guard" in arms else tuple(arms[:1])
                found = _search(name, agent, guard, seen, [i.ID for i in injections_of], target, search_budget)
                if on_search is not None:
                    on_search(name, found)
        attack = load_attack(attack_name, suite, arms_of["guard"])
        for user in users:
            for injection in injections_of:
                left = todo(user, injection, attack_name)
                if not left:
                    continue
                injected = attack.attack(user, injection)
                env = suite.load_and_inject_default_environment(injected)
                yield from run(user, injection, attack_name, injected, env, left, attack)


def _search(name: str, agent: Any, guard: Guard, user_tasks: Sequence[str], injection_tasks: Sequence[str],
            arms: Sequence[str], budget: int) -> searching.SearchResult:
    """The search attacker's wording for suite ``name``, searched on ``user_tasks`` x ``injection_tasks``."""
    def run_trial(names: Sequence[str]) -> Iterator[SecurityRecord]:
        return run_suite(name, agent, guard, attacks=names, benign=False, user_tasks=user_tasks,
                         injection_tasks=injection_tasks, arms=arms)

    return searching.search(run_trial, budget=budget)


def empty_ground_truth(suites: Iterable[str] = SUITES) -> set[tuple[str, str]]:
    """``(suite, injection task)`` pairs whose ground truth makes no call: a scripted agent cannot meet their goal."""
    out = set()
    for name in suites:
        suite = get_suite(BENCHMARK_VERSION, name)
        env = suite.load_and_inject_default_environment({})
        out |= {(name, tid) for tid, task in suite.injection_tasks.items() if not task.ground_truth(env)}
    return out


__all__ = ["ARMS", "ATTACKS", "SUITES", "empty_ground_truth", "pipelines", "run_suite"]
