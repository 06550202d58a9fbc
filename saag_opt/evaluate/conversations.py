"""``saag-opt evaluate`` on a multi-turn dataset: ``EvaluateConfig`` -> ``runs/<timestamp>-evaluate-multiturn/``.

The same configuration as single-call ``evaluate`` (one ``ReviewSetup``, opened by
``agents.setup.open_setup``), the same run files (``run.json``, ``records.jsonl`` with one
``EpisodeRecord`` per entry and condition, ``summary.json`` an ``EpisodeSummary``, ``costs.json``)
and the same resume rule (``resuming``: the set-up and the dataset never change, run options may),
at entry granularity. ``--workers`` runs entries in parallel (records in episode order at the
end); ``--max-cost`` caps the whole run (a spent cap starts no further entry); ``--dry-run`` is
``preflight_multi_turn`` (``evaluation.estimate.estimate_episodes``: tool docs and the history's
growth step by step).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saag_opt.agents.base import BasePredictionCache
from saag_opt.agents.setup import open_setup
from saag_opt.agents.tau2 import DEFAULT_MAX_STEPS, Tau2Sizes, pass_hat_ks, simulated_user, task_sizes
from saag_opt.data.catalog import load_episodes
from saag_opt.data.tau2 import task_id_of, with_trials
from saag_opt.episodes import Episode
from saag_opt.errors import ConfigError, RunError
from saag_opt.evaluate.calls import EvaluationResult
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.conversation_loop import Play, evaluate_episodes, play_episode
from saag_opt.evaluate.tau2_play import tau2_play
from saag_opt.evaluation.conversation_records import VERB, EpisodeRecord, EpisodeSummary
from saag_opt.evaluation.estimate import Estimate, estimate_episodes, estimate_tau2
from saag_opt.evaluation.results import EvaluationSummary
from saag_opt.events import EventSink
from saag_opt.lm import CostLedger
from saag_opt.lm.disk_cache import configure_lm_cache
from saag_opt.lm.spend.ledgerfile import open_ledger, save_costs
from saag_opt.paths import base_predictions_dir
from saag_opt.resuming import refuse_changes
from saag_opt.runfiles import (
    RunHeader,
    atomic_write_json,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_costs,
    read_header,
    resume_header,
    resumed,
    write_header,
)


@dataclass
class MultiTurnResult:
    """What ``run_multi_turn`` returns."""

    run_dir: Path
    summary: EpisodeSummary
    records: list[EpisodeRecord] = field(default_factory=list)


def is_multi_turn_run(run_dir: Path) -> bool:
    """``run_dir`` is a multi-turn evaluate run (what ``--resume`` dispatches on)."""
    try:
        return read_header(run_dir).verb == VERB
    except RunError:
        return False


def multi_turn_resume_config(run_dir: Path, passed: Mapping[str, Any] | None = None) -> EvaluateConfig:
    """The configuration a multi-turn run continues with (``evaluation.config.resume_config``'s rule).

    Raises:
        RunError: not a multi-turn evaluate run, or an unreadable ``run.json``.
        ConfigError: ``passed`` contradicts the recorded configuration.
    """
    header = resume_header(run_dir, VERB)
    return refuse_changes(EvaluateConfig.model_validate(header.config), passed or {}, where=f"--resume {run_dir}")


def _ids_hash(episodes: Sequence[Episode]) -> str:
    return hashlib.sha256("\n".join(e.id for e in episodes).encode()).hexdigest()[:16]


def _header(config: EvaluateConfig, run_dir: Path, episodes: Sequence[Episode],
            args_passed: dict[str, Any] | None) -> RunHeader:
    setup = config.setup
    version = setup.prompt_version()
    models = {"base": setup.base} | ({"reviewer": setup.reviewer} if setup.reviewer else {})
    if config.dataset.startswith("tau2:"):
        models["user"] = config.user_model or setup.base
    return new_header(
        run_dir, VERB, config=config.model_dump(mode="json"), args_passed=args_passed or {}, models=models,
        plugins={"mechanism": {"spec": setup.mechanism.spec, "experimental": setup.mechanism.experimental,
                               "args": {"max_repairs": setup.max_repairs, "grounding": setup.grounding}},
                 "reviewer": {"prompt": setup.prompt, "sha256": version.sha256 if version is not None else None},
                 "environments": sorted({e.environment for e in episodes})},
        dataset={"spec": config.dataset, "split": config.split, "limit": config.limit,
                 **({"skip": config.skip} if config.skip else {}), "n": len(episodes), "ids_hash": _ids_hash(episodes)})


def _reopen(run_dir: Path, config: EvaluateConfig, episodes: Sequence[Episode],
            args_passed: dict[str, Any] | None) -> RunHeader:
    header = read_header(run_dir)
    if header.dataset.get("ids_hash") not in (None, _ids_hash(episodes)):
        raise RunError(f"--resume {run_dir}: dataset {config.dataset!r} no longer gives the run's entries; "
                       "start a new run")
    version = config.setup.prompt_version()
    recorded = (header.plugins.get("reviewer") or {}).get("sha256")
    if recorded and version is not None and version.sha256 != recorded:
        raise RunError(f"--resume {run_dir}: prompt {config.setup.prompt!r} now resolves to other instructions; "
                       "start a new run")
    resumes = resumed(header, args_passed)
    return header.model_copy(update={"status": "started", "finished": None, "error": None,
                                     "config": config.model_dump(mode="json"), "resumes": resumes})


def tau2_max_steps(config: EvaluateConfig) -> int:
    """The step limit of the config's tau2 runs (``--max-steps``, else tau2's default)."""
    return config.max_steps or DEFAULT_MAX_STEPS


def _play(config: EvaluateConfig, ledger: CostLedger) -> Play:
    """The episode loop, or tau2's orchestrator for ``tau2:<domain>``.

    tau2's user simulator runs on ``user_model`` (default the base model), booked on the run's ledger
    under role ``user``.
    """
    if not config.dataset.startswith("tau2:"):
        return play_episode
    return tau2_play(simulated_user(config.user_model or config.setup.base, ledger=ledger,
                                    call_options=config.setup.call_options(), reminder=config.user_reminder),
                     max_steps=tau2_max_steps(config))


def pass_hat_k_by_condition(records: Sequence[EpisodeRecord]) -> dict[str, dict[int, float]]:
    """Per condition, tau2's pass^k over each task's trials (an errored run counts as reward 0).

    A task is its category (the domain) and its id, so records pooled over domains (whose task ids
    repeat: airline and retail both have a task ``0``) keep their tasks apart; ``experiments/recompute.py``
    reads collected runs through this too.
    """
    rewards: dict[str, dict[str, list[float]]] = {}
    for record in records:
        reward = record.judgement.reward if record.judgement is not None else None
        task = f"{record.category}/{task_id_of(record.example_id)}"
        rewards.setdefault(record.condition, {}).setdefault(task, []).append(reward or 0.0)
    return {condition: pass_hat_ks(tasks) for condition, tasks in rewards.items()}


def preflight_multi_turn(config: EvaluateConfig) -> Estimate:
    """``--dry-run`` on a multi-turn dataset: expected calls, tokens and dollars by role; opens no model.

    Raises:
        ConfigError, DatasetError, ArtifactError: as ``run_multi_turn`` would, before any work.
    """
    episodes = load_episodes(config.dataset, split=config.split, limit=config.limit, skip=config.skip)
    if not episodes:
        raise ConfigError(f"dataset: {config.dataset!r} (split {config.split!r}) has no entries")
    setup = config.setup
    version = setup.prompt_version()
    if config.dataset.startswith("tau2:"):
        return estimate_tau2(task_sizes(with_trials(episodes, config.trials)), base=setup.base,
                             reviewer=setup.reviewer, user=config.user_model or setup.base, mechanism=setup.mechanism,
                             instructions=dict(version.instructions) if version is not None else {},
                             max_steps=tau2_max_steps(config))
    return estimate_episodes(episodes, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                             instructions=dict(version.instructions) if version is not None else {})


def run_multi_turn(config: EvaluateConfig, *, on_event: EventSink | None = None,
                   args_passed: dict[str, Any] | None = None, resume: Path | None = None,
                   ledger: CostLedger | None = None) -> MultiTurnResult:
    """Evaluate ``config`` (a multi-turn dataset) and write its run directory; ``resume`` continues one.

    ``ledger``: the ledger (and spend cap) of a bigger run this evaluation is a pass of (compare);
    the run books into a child of it, as ``run_evaluation`` does.

    Raises:
        ConfigError: not a multi-turn dataset, no entries, a mechanism without a reviewer.
        ModelUnavailableError: a model cannot be reached (the finished entries stay; ``--resume`` continues).
        RunError: the run directory cannot be written or resumed.
    """
    if config.batch:
        raise ConfigError("--batch: multi-turn datasets are not sent as Batch API jobs yet (a step waits on "
                          "the one before it, so a round would hold one step per entry); drop --batch")
    episodes = load_episodes(config.dataset, split=config.split, limit=config.limit, skip=config.skip)
    if config.dataset.startswith("tau2:"):
        episodes = with_trials(episodes, config.trials)
    if not episodes:
        raise ConfigError(f"dataset: {config.dataset!r} (split {config.split!r}) has no entries")
    configure_lm_cache()
    if resume is None:
        run_dir = create_run_dir(config.runs_dir, VERB)
        header = _header(config, run_dir, episodes, args_passed)
    else:
        run_dir, header = resume, _reopen(resume, config, episodes, args_passed)
    write_header(run_dir, header)
    with guarded_run(run_dir, header):
        own = open_ledger(config.max_cost, run_dir, parent=ledger)
        condition = open_setup(config.setup, own, BasePredictionCache(config.cache_dir or base_predictions_dir()))
        play = _play(config, own)
        try:
            run = evaluate_episodes(episodes, agent=condition.agent, reviewer=condition.reviewer,
                                    mechanism=condition.mechanism, ctx=condition.ctx,
                                    reviewer_lm=condition.reviewer_lm, run_id=run_dir.name,
                                    records_path=run_dir / "records.jsonl", seed=config.seed, on_event=on_event,
                                    costs=own.snapshot, workers=config.workers or 1, cap=own.cap, play=play)
        finally:
            save_costs(run_dir, own)
        summary = run.summary
        if config.dataset.startswith("tau2:"):
            summary = summary.model_copy(update={"pass_hat_k": pass_hat_k_by_condition(run.records)})
        atomic_write_json(run_dir / "summary.json", summary.model_dump(mode="json"))
    finish_header(run_dir, header, run.stopped_by)
    return MultiTurnResult(run_dir, summary, run.records)


def preflight_compare_episodes(settings: EvaluateConfig, refs: Sequence[str]) -> Estimate:
    """``compare --dry-run`` on a multi-turn dataset: the shared base pass, then one pass per prompt version.

    Raises:
        ConfigError, DatasetError, ArtifactError: as the compare would, before any work.
    """
    episodes = load_episodes(settings.dataset, split=settings.split, limit=settings.limit, skip=settings.skip)
    setup = settings.setup
    if settings.dataset.startswith("tau2:"):
        return _compare_tau2(settings, refs, task_sizes(with_trials(episodes, settings.trials)))
    total = estimate_episodes(episodes, base=setup.base, reviewer=None, mechanism=setup.replace(mechanism="none")
                              .mechanism, command="compare")
    for ref in refs:
        version = setup.replace(prompt=ref).prompt_version()
        total.merge(estimate_episodes(episodes, base=setup.base, reviewer=setup.reviewer, mechanism=setup.mechanism,
                                      instructions=dict(version.instructions) if version is not None else {},
                                      base_cached=True))
    return total


def _compare_tau2(settings: EvaluateConfig, refs: Sequence[str], sizes: Sequence[Tau2Sizes]) -> Estimate:
    """``preflight_compare_episodes`` on tau2: the shared base pass, then each version's reviewed runs."""
    setup = settings.setup
    user = settings.user_model or setup.base
    steps = tau2_max_steps(settings)
    total = estimate_tau2(sizes, base=setup.base, reviewer=None, user=user,
                          mechanism=setup.replace(mechanism="none").mechanism, command="compare", max_steps=steps)
    for ref in refs:
        version = setup.replace(prompt=ref).prompt_version()
        total.merge(estimate_tau2(sizes, base=setup.base, reviewer=setup.reviewer, user=user,
                                  mechanism=setup.mechanism, base_cached=True, max_steps=steps,
                                  instructions=dict(version.instructions) if version is not None else {}))
    return total


def evaluate_pass(config: EvaluateConfig, *, on_event: EventSink | None = None, ledger: CostLedger | None = None,
                 resume: Path | None = None) -> EvaluationResult:
    """``run_multi_turn`` handed back as ``run_evaluation``'s result: compare's passes, tune's trials.

    The adapter that lets those verbs treat conversations like examples: the run is a multi-turn
    evaluate run (its records keep every turn), its summary the evaluate summary's fields they read
    (the paired numbers, costs, contamination, the stop).
    """
    result = run_multi_turn(config, on_event=on_event, ledger=ledger, resume=resume)
    episode, setup = result.summary, config.setup
    version = setup.prompt_version() if setup.reviewer else None
    splits = {r.split for r in result.records if r.split}
    summary = EvaluationSummary(
        run_id=episode.run_id, mechanism=episode.mechanism, experimental=episode.experimental,
        prompt=setup.prompt if setup.reviewer else None, n_examples=episode.n_episodes, errors=episode.errors,
        base=episode.base, reviewed=episode.reviewed, help_harm=episode.help_harm, latency=episode.latency,
        reviewer_calls_per_item=episode.reviewer_calls_per_item, agent_calls_per_item=episode.agent_calls_per_item,
        gated_share=episode.gated_share, costs=read_costs(result.run_dir) or {}, on_unusable=setup.on_unusable,
        contaminated=list(version.contaminated(splits)) if version is not None else [],
        reviewer_mismatch=version.reviewer_mismatch(setup.saag_informed, setup.grounding) if version else None,
        stopped=episode.stopped)
    return EvaluationResult(result.run_dir, summary, list(result.records))


__all__ = ["MultiTurnResult", "evaluate_pass", "is_multi_turn_run", "multi_turn_resume_config", "pass_hat_k_by_condition",
           "preflight_compare_episodes", "preflight_multi_turn", "run_multi_turn"]
