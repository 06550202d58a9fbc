"""``saag-opt optimize``: GEPA over the reviewer's instructions via dspy.GEPA (docs/design.md §7, §8, §10).

Flow of ``run_optimize``: open the models and the seed prompt and load TRAIN and VAL (TEST is never
shown to GEPA), then open (or re-open) ``runs/<ts>-optimize/``; build the student
(``program.ReviewerProgram``) around the seed prompt; emit a cost estimate; run ``dspy.GEPA`` with
``log_dir=<run>/gepa`` and cloudpickle; every candidate that enters GEPA's pool becomes a prompt
artifact (``reviewer@v3-gepa``...) with its parents and val score, and its help/harm on val (fixed and
broken base calls, ``candidates``) goes to ``summary.json``; the best is aliased ``best``;
then seed and best are compared on TEST with ``compare_prompts`` (``holdout``) and the comparison
is written to ``summary.json``. A BFCL multi-turn dataset runs the same flow on entries: a rollout
is one reviewed conversation scored by BFCL's checker (``rollouts.work_for`` picks the rollout and the metric).

Resume (``--resume RUN_DIR``) reloads the stored config, reuses the same gepa ``log_dir`` (gepa's
``max_metric_calls`` is cumulative, and 0.1.4 re-evaluates the seed on val once per resume; those
rollouts hit the LM cache) and the candidate->version map, so no candidate is saved twice (the store
also dedupes by content hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saag_opt.atomic import atomic_write_json
from saag_opt.data import split_hash
from saag_opt.errors import CostCapReached, RunError
from saag_opt.events import EventSink, emit
from saag_opt.lm.disk_cache import configure_lm_cache
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.optimize.budget import estimate_run, resolve_metric_calls
from saag_opt.optimize.callbacks import ArtifactWriter, CostStopper, FatalStopper
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.optimize.edit_proposer import EDIT_MEMORY_FILE, EditMemory
from saag_opt.optimize.holdout import evaluate_test
from saag_opt.optimize.program import ReviewerProgram, to_dspy_examples
from saag_opt.optimize.progress import GepaProgress
from saag_opt.optimize.reflections import ReflectionRecorder
from saag_opt.optimize.spend import CostSaver, open_ledger, save_costs
from saag_opt.optimize.summary import OptimizeSummary, TestComparison
from saag_opt.optimize.unusable import RolloutCountSaver, restore_counts, save_counts, unusable_by_phase
from saag_opt.optimize.wiring import GepaSettings, build_gepa, compile_gepa, set_aside_unreadable_state
from saag_opt.optimize.world import World, build_world, load_splits
from saag_opt.resuming import refuse_changes
from saag_opt.runfiles import (
    RunHeader,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    resume_header,
    write_header,
)

OptimizeResult = OptimizeSummary
"""What ``run_optimize`` returns: the summary it writes to ``summary.json``."""


def open_run(config: OptimizeConfig, overrides: frozenset[str] | set[str] = frozenset()
             ) -> tuple[Path, OptimizeConfig, RunHeader]:
    """Create ``runs/<ts>-optimize/`` or re-open ``config.resume``; returns (dir, effective config, header).

    ``overrides``: the options the user gave (``args_passed``); on resume they follow the one rule of
    every verb (``resuming.refuse_changes``): GEPA's checkpoint, the saved versions and the cached
    rollouts belong to the recorded set-up, so only the run options (budgets, cap, workers, the
    test phase) may change. The seed alias the run pinned (``reviewer@best``) repeats its version.

    Raises:
        RunError: the resume directory is not an optimize run.
        ConfigError: an option contradicts the recorded configuration (one line naming each).
    """
    given = config.model_dump(mode="json")
    passed = {k: given[k] for k in sorted(overrides) if k in given}
    if config.resume:
        run_dir = config.resume
        header = resume_header(run_dir, "optimize")
        if "prompt" in passed and passed["prompt"] == (header.plugins or {}).get("seed_prompt_given"):
            del passed["prompt"]
        # a run recorded before --proposer existed wrote whole rewrites (and evolved no report note)
        recorded = OptimizeConfig.model_validate({"proposer": "rewrite", **header.config})
        effective = refuse_changes(recorded, passed, where=f"--resume {run_dir}").model_copy(
            update={"resume": run_dir})
        header.status, header.finished, header.error = "started", None, None
        header.config = effective.model_dump(mode="json", exclude={"resume"})
        return run_dir, effective, header
    run_dir = create_run_dir(config.runs_dir, "optimize")
    setup = config.setup
    header = new_header(run_dir, "optimize", config=config.model_dump(mode="json", exclude={"resume"}),
                        args_passed=passed, models={"base": setup.base, "reviewer": config.reviewer_spec,
                                                    "reflection": config.reflection_spec},
                        plugins={"mechanism": {"spec": setup.mechanism.spec},
                                 "reviewer": {"class": "SaagInformedReviewer" if setup.saag_informed else "Reviewer",
                                              "experimental": setup.saag_informed, "grounding": setup.grounding}})
    return run_dir, config, header


def run_optimize(config: OptimizeConfig, *, on_event: EventSink | None = None,
                 overrides: frozenset[str] | set[str] = frozenset()) -> OptimizeResult:
    """Optimize the reviewer's instructions with GEPA: train on train, select on val, compare seed and best on test.

    ``overrides``: on ``config.resume``, the options the user typed (they may change only run options).
    A new run checks its inputs (``_start``) before its run directory exists, so a bad dataset,
    split, key or seed prompt leaves none behind; a resumed run checks them with its run.json
    marked ``error`` on failure.

    Raises:
        ConfigError, ModelUnavailableError, ArtifactError, DatasetError: bad input.
        RunError: the run directory cannot be created/resumed, a split is empty, or a candidate could not be saved.
    """
    start = None if config.resume else _start(config, None)
    run_dir, config, header = open_run(config, overrides)
    write_header(run_dir, header)
    emit(on_event, "resumed" if config.resume else "run_started", f"run directory {run_dir}", run_dir=str(run_dir))
    with guarded_run(run_dir, header):
        result = _run(config, run_dir, header, on_event, start if start is not None else _start(config, run_dir))
    finish_header(run_dir, header, status=result.status)
    return result


@dataclass
class _Started:
    """What the start checks built: the models, prompt store and seed, and the splits GEPA sees."""

    world: World
    train: list[Any]
    val: list[Any]


def _start(config: OptimizeConfig, run_dir: Path | None) -> _Started:
    """Open the LM cache and the models (key, spend-cap pricing), resolve the seed, load TRAIN and VAL.

    ``run_dir``: the run being resumed (its earlier spend counts against ``--max-cost``); None for a new run.

    Raises:
        ConfigError, ModelUnavailableError, ArtifactError, DatasetError, RunError: as ``run_optimize``.
    """
    configure_lm_cache()
    world = build_world(config, open_ledger(config.max_cost, run_dir))
    train, val = load_splits(config)
    return _Started(world, train, val)


def _run(config: OptimizeConfig, run_dir: Path, header: RunHeader, sink: EventSink | None,
         started: _Started) -> OptimizeResult:
    """The body of ``run_optimize`` once the run directory exists."""
    world, train, val = started.world, started.train, started.val
    restore_counts(world.context, run_dir)
    cap = world.ledger.cap
    _pin_seed_and_splits(config, header, world, train + val, run_dir, (len(train), len(val)))
    calls = resolve_metric_calls(config.budget_name, config.max_metric_calls,
                                 n_components=len(config.components), n_val=len(val),
                                 minibatch=config.minibatch)
    size = world.work.rollout_size(train + val, *config.setup.mechanism.calls_per_example())
    estimate = estimate_run(config, world.seed.instructions, train + val, calls, size)
    emit(sink, "estimate", estimate.headline(), **estimate.to_dict())
    writer = ArtifactWriter(world.store, seed_version=world.seed, map_path=run_dir / "artifacts.json",
                            metadata=_artifact_metadata(config, header.dataset["split_hash"]),
                            spent=world.ledger.total_dollars, sink=sink, cap=cap)
    settings = _gepa_settings(config, world, run_dir, calls, writer, sink)
    details = _compile(world, settings, config.components, train, val, run_dir, sink)
    rollout_counts = save_counts(run_dir, world.context)
    if world.context.fatal is not None:
        raise world.context.fatal
    _report_rollouts(config, writer, rollout_counts, sink)
    best, val_scores, rollouts = _outcome(world, writer, details, len(val))
    stopped_by = "max_cost" if cap is not None and cap.reached else (
        "max_metric_calls" if rollouts >= calls else "stop_file")
    emit(sink, "gepa_done", f"GEPA finished ({stopped_by}): best {world.seed.program}@{best} "
         f"(val {max(val_scores, default=0.0):.3f}, seed {val_scores[0] if val_scores else float('nan'):.3f})",
         best=best, stopped_by=stopped_by)
    test = _test_phase(config, world, run_dir, best, cap, sink)
    costs = save_costs(run_dir, world.ledger)
    status = "stopped" if cap is not None and cap.reached else "success"
    result = OptimizeSummary(run_dir=run_dir, status=status, saag_informed=config.setup.saag_informed,
                             grounding=config.setup.grounding, seed_version=world.seed.version, best_version=best,
                             versions=writer.versions, val_scores=val_scores, candidates=writer.candidate_list(),
                             metric_calls=rollouts, stopped_by=stopped_by, estimate=estimate, costs=costs,
                             test=None if test is None else TestComparison.model_validate(test))
    result.reviewer_unusable = unusable_by_phase(rollout_counts, result.test)
    atomic_write_json(run_dir / "summary.json", result.to_dict())
    emit(sink, "run_finished", f"done: {run_dir}", run_dir=str(run_dir))
    return result


def _pin_seed_and_splits(config: OptimizeConfig, header: RunHeader, world: World, examples: list[Any],
                         run_dir: Path, sizes: tuple[int, int]) -> None:
    """Record the seed's version for an alias (``reviewer@best`` may move before a resume) and the splits GEPA sees."""
    if header.config.get("prompt") != world.seed.ref:
        header.plugins["seed_prompt_given"] = config.setup.prompt
        header.config["prompt"] = world.seed.ref
    header.dataset = {"spec": config.dataset, "train": sizes[0], "val": sizes[1], "split_hash": split_hash(examples)}
    write_header(run_dir, header)


def _gepa_settings(config: OptimizeConfig, world: World, run_dir: Path, calls: int, writer: ArtifactWriter,
                   sink: EventSink | None) -> GepaSettings:
    """dspy.GEPA's knobs for this run, with its stoppers (a fatal fault, the spend cap) and callbacks."""
    cap = world.ledger.cap
    stoppers: list[Any] = [FatalStopper(world.context)]
    if cap is not None:
        stoppers.append(CostStopper(cap, on_stop=lambda why: emit(sink, "stopped", why, max_cost=cap.max_cost)))
    progress = GepaProgress(lambda message, **data: emit(sink, "progress", message, **data), budget=calls,
                            spent=world.ledger.total_dollars, accepted=len(writer.versions) - 1)
    return GepaSettings(max_metric_calls=calls, log_dir=run_dir / "gepa", reflection_lm=world.reflection_lm,
                        minibatch=config.minibatch, proposals=config.proposals, max_chars=config.max_chars,
                        workers=config.workers or 1,
                        seed=config.seed, accept=config.accept, stoppers=stoppers, quarantine=writer,
                        proposer=config.proposer, memory=EditMemory(run_dir / EDIT_MEMORY_FILE), sink=sink,
                        callbacks=[writer, progress, CostSaver(run_dir, world.ledger),
                                   RolloutCountSaver(run_dir, world.context), ReflectionRecorder(run_dir)])


def _compile(world: World, settings: GepaSettings, components: tuple[str, ...], train: list[Any], val: list[Any],
             run_dir: Path, sink: EventSink | None) -> Any:
    """Run dspy.GEPA on the student (the seed's reviewer); None when the spend cap stopped the reflection LM."""
    aside = set_aside_unreadable_state(settings.log_dir)
    if aside is not None:
        emit(sink, "warning", f"GEPA's checkpoint could not be read and was moved to {aside}; GEPA starts again "
             "from the seed (finished LM calls replay from the cache)", moved_to=str(aside))
    student = ReviewerProgram(world.condition.reviewer_for(world.seed.instructions), world.context, components)
    cap = world.ledger.cap
    try:
        return compile_gepa(build_gepa(world.work, settings), student, to_dspy_examples(train),
                            to_dspy_examples(val))
    except CostCapReached as exc:  # the reflection LM was refused mid-iteration: gepa re-raises
        emit(sink, "stopped", str(exc), max_cost=cap.max_cost if cap is not None else None)
        return None
    except Exception:
        # When every rollout of the seed evaluation failed (a key rejected, a server gone), gepa fails
        # on its own terms ("requires objective_scores ..."); the cause the user can fix is the fault.
        if world.context.fatal is not None:
            save_counts(run_dir, world.context)
            raise world.context.fatal from None
        raise


def _report_rollouts(config: OptimizeConfig, writer: ArtifactWriter, counts: dict[str, int],
                     sink: EventSink | None) -> None:
    """Warn about unreadable reviews and candidates cut short; fail when a candidate could not be saved.

    Raises:
        RunError: a candidate could not be saved as a prompt version.
    """
    if counts["reviewer_unusable"]:
        emit(sink, "warning", f"{counts['reviewer_unusable']} reviewer repl"
             f"{'y' if counts['reviewer_unusable'] == 1 else 'ies'} could not be read in "
             f"{counts['rollouts_with_unusable']} of {counts['rollouts']} GEPA rollouts "
             f"(--on-unusable {config.setup.on_unusable} decided them)", **counts)
    if writer.errors:
        raise RunError("could not save GEPA candidates as prompt versions: " + "; ".join(writer.errors))
    if writer.incomplete:
        emit(sink, "warning", f"candidate(s) {writer.incomplete}: val evaluation cut short by --max-cost; not saved "
             "as prompt versions", candidates=list(writer.incomplete))


def _outcome(world: World, writer: ArtifactWriter, details: Any, n_val: int) -> tuple[str, list[float], int]:
    """The best version (aliased ``best``), the val scores and the rollouts GEPA used."""
    best = writer.best_saved(n_val)  # the seed unless a candidate clears rails.pick_best's val margin
    world.store.alias(world.seed.program, "best", best)
    val_scores = ([float(x) for x in details.val_aggregate_scores] if details is not None
                  else [writer.val_means[i] for i in sorted(writer.val_means)])
    rollouts = int(details.total_metric_calls) if details is not None else writer.metric_calls
    return best, val_scores, rollouts


def _test_phase(config: OptimizeConfig, world: World, run_dir: Path, best: str, cap: SpendCap | None,
                sink: EventSink | None) -> dict[str, Any] | None:
    """Seed vs best on TEST, unless skipped (``--no-test``) or the cap was reached during GEPA."""
    if not config.evaluate_test:
        return None
    if cap is not None and cap.reached:
        emit(sink, "stopped", "test comparison skipped: --max-cost reached during GEPA; resume with a higher "
             "--max-cost to run it")
        return None
    return evaluate_test(config, world, run_dir, best, sink)


def _artifact_metadata(config: OptimizeConfig, split: str) -> dict[str, Any]:
    setup = config.setup
    return {"models": {"base": setup.base, "reviewer": config.reviewer_spec, "reflection": config.reflection_spec},
            "dataset": config.dataset, "split_hash": split, "trained_on": ["train"], "selected_on": ["val"],
            "saag_report": setup.grounding if setup.saag_informed else None,
            "notes": f"GEPA ({setup.mechanism.spec}{', SAAG-informed reviewer' if setup.saag_informed else ''}) "
                     f"from {setup.prompt}; val = the dataset's val split"}


__all__ = ["OptimizeResult", "open_run", "run_optimize"]
