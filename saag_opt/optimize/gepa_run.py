"""``saag-opt optimize``: GEPA over the reviewer's instructions via dspy.GEPA (DESIGN sections 7, 8, 10).

Flow of ``run_optimize``: open (or re-open) ``runs/<ts>-optimize/``; load TRAIN and VAL splits (TEST is
never shown to GEPA); build the student (``program.ReviewerProgram``) around the seed prompt; emit a
cost estimate; run ``dspy.GEPA`` with ``log_dir=<run>/gepa`` and cloudpickle; every candidate that
enters GEPA's pool becomes a prompt artifact (``reviewer@v3-gepa``...) with its parents and val
score; the best is aliased ``best``; then seed and best are compared on TEST with the evaluation
runner and the table is written to ``summary.json``.

Resume (``--resume RUN_DIR``) reloads the stored config, reuses the same gepa ``log_dir`` (gepa's
``max_metric_calls`` is cumulative, and 0.1.4 re-evaluates the seed on val once per resume; those
rollouts hit the LM cache) and the candidate->version map, so no candidate is saved twice (the store
also dedupes by content hash).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import dspy
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from saag_opt.errors import ConfigError, RunError
from saag_opt.paths import base_predictions_dir, configure_lm_cache
from saag_opt.optimize.budget import BudgetName, CostStopper
from saag_opt.runfiles import (
    atomic_write_json,
    atomic_write_jsonl,
    create_run_dir,
    finish_header,
    guarded_run,
    new_header,
    read_header,
    write_header,
)

# -- config ----------------------------------------------------------------------------------------


class OptimizeConfig(BaseModel):
    """Everything ``saag-opt optimize`` needs; stored in ``run.json`` (no secrets) for resume."""

    model_config = ConfigDict(extra="forbid")

    base: str = "gpt-4o"
    """Base agent model spec (frozen during optimization)."""
    reviewer: str = "gpt-5-mini"
    """Reviewer model spec (its instructions evolve)."""
    reflection: str | None = None
    """Reflection LM spec; None = same as the reviewer."""
    prompt: str = "reviewer@v2"
    """Seed prompt reference."""
    mechanism: str = "r2"
    """Review mechanism the reviewer is optimized for; it must call the reviewer (r2, s5, gate+r2, ...)."""
    dataset: str = "shipped:bfcl"
    """Dataset spec (see ``saag_opt.data.load_dataset``)."""
    budget: BudgetName | None = None
    """GEPA auto budget; exclusive with ``max_metric_calls``; both None = ``light``."""
    max_metric_calls: int | None = Field(default=None, gt=0)
    """Cumulative cap on program rollouts (GEPA metric calls)."""
    max_cost: float | None = Field(default=None, gt=0)
    """Stop at an iteration boundary before spend (all roles, reflection included) passes this (USD)."""
    workers: int | None = Field(default=None, ge=1, le=64)
    """Concurrent rollouts; None = 4, or 1 with an embedded model."""
    seed: int = 0
    """GEPA's seed (minibatch sampling, candidate selection)."""
    train_limit: int | None = Field(default=None, gt=0)
    """Use at most this many TRAIN examples."""
    val_limit: int | None = Field(default=None, gt=0)
    """Use at most this many VAL examples."""
    test_limit: int | None = Field(default=None, gt=0)
    """Use at most this many TEST examples for the final comparison."""
    minibatch: int = Field(default=3, ge=1)
    """GEPA reflection minibatch size."""
    accept: Literal["strict", "equal"] = "strict"
    """When a proposed instruction enters the pool: it must beat its parent on the minibatch
    (``strict``, GEPA's default) or may tie it (``equal``: GEPA's ``improvement_or_equal``). Ties
    still get a full val evaluation, and ``best`` is still the highest val score; ``equal`` lets a
    weak (local) reviewer's run explore when small minibatches rarely show a strict gain."""
    max_chars: int = Field(default=4000, ge=200)
    """Hard cap on a proposed instruction's length (InstructionProposer max_chars)."""
    reflection_max_tokens: int = Field(default=16000, ge=1000)
    """Generous reflection max_tokens (a truncated proposal is adopted verbatim by gepa)."""
    evaluate_test: bool = True
    """Compare seed and best on TEST at the end."""
    runs_dir: str = "runs"
    """Where ``<timestamp>-optimize/`` is created."""
    prompts_dir: str | None = None
    """Prompt store root (None = ``$SAAG_OPT_PROMPTS``, else the user data dir; see ``saag_opt.paths``)."""
    resume: str | None = None
    """Run directory to resume; its stored config wins except for the fields in ``overrides``."""

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, value: str) -> str:
        from saag_opt.agents.mechanisms import mechanism_names, parse_mechanism

        if not parse_mechanism(value).components:
            raise ValueError(f"{value!r} never calls the LLM reviewer, so there is no reviewer prompt to optimize; "
                             f"use one of {', '.join(mechanism_names(reviewer_only=True))} (e.g. r2)")
        return value

    @model_validator(mode="after")
    def _one_budget(self) -> OptimizeConfig:
        if self.budget is not None and self.max_metric_calls is not None:
            raise ValueError("give either budget or max_metric_calls, not both")
        return self

    @model_validator(mode="after")
    def _default_workers(self) -> OptimizeConfig:
        if self.workers is None:
            from saag_opt.lm import default_workers

            self.workers = default_workers(self.base, self.reviewer, self.reflection)
        return self

    @property
    def reflection_spec(self) -> str:
        """The reflection model actually used."""
        return self.reflection or self.reviewer

    @property
    def budget_name(self) -> BudgetName | None:
        """``budget``, defaulting to ``light`` when no cap is given."""
        return self.budget or (None if self.max_metric_calls is not None else "light")


# -- events ----------------------------------------------------------------------------------------

EventKind = Literal["start", "resume", "estimate", "warning", "candidate", "stopped", "gepa_done",
                    "evaluating", "done"]


@dataclass(frozen=True, slots=True)
class OptimizeEvent:
    """Progress for observers (the CLI prints them); ``data`` is JSON-friendly."""

    kind: EventKind
    message: str
    data: dict[str, Any] = field(default_factory=dict)


EventSink = Callable[[OptimizeEvent], None]


def emit(sink: EventSink | None, kind: EventKind, message: str, **data: Any) -> None:
    """Send an event; an observer that raises is ignored (it must not break a paid run)."""
    if sink is None:
        return
    try:
        sink(OptimizeEvent(kind, message, data))
    except Exception:  # noqa: BLE001 - observers are best effort (STYLE practice 16)
        import logging

        logging.getLogger(__name__).warning("optimize event observer failed", exc_info=True)


# -- artifacts on accept ---------------------------------------------------------------------------


class ArtifactWriter:
    """gepa callback: each candidate added to the pool becomes a prompt version.

    ``on_valset_evaluated`` fires for the seed (index 0, already an artifact) and for every accepted
    or merged candidate, with its full val score and parents. The candidate index -> version map is
    persisted (atomically) in ``<run>/artifacts.json``, so a resumed run knows the versions of
    candidates found before the crash; ``PromptStore.save_new(dedupe=True)`` makes re-accepting an
    identical candidate after a crash return the saved version instead of a duplicate.
    """

    def __init__(self, store: Any, *, seed_version: Any, map_path: Path, metadata: Mapping[str, Any],
                 spent: Callable[[], float], sink: EventSink | None = None) -> None:
        self.store = store
        self.seed = seed_version
        self.map_path = map_path
        self.metadata = dict(metadata)
        self._spent = spent
        self._sink = sink
        self._lock = threading.Lock()
        self.metric_calls = 0
        self.errors: list[str] = []
        self.versions: dict[int, str] = {0: seed_version.version}
        if map_path.is_file():
            saved = json.loads(map_path.read_text(encoding="utf-8"))
            self.versions.update({int(k): v for k, v in saved.get("versions", {}).items()})

    def on_budget_updated(self, event: Mapping[str, Any]) -> None:
        """Remember the cumulative rollout count (recorded as the candidate's discovery cost)."""
        self.metric_calls = int(event.get("metric_calls_used", self.metric_calls))

    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        """Save a prompt version for a new pool member (never raises: errors are kept for the run)."""
        idx = int(event["candidate_idx"])
        if idx == 0:
            return
        try:
            self._save(idx, event)
        except Exception as exc:  # noqa: BLE001 - reported by run_optimize after GEPA returns
            self.errors.append(f"candidate {idx}: {type(exc).__name__}: {exc}")

    def _save(self, idx: int, event: Mapping[str, Any]) -> None:
        parents = [self.versions[p] for p in event.get("parent_ids") or () if p is not None and p in self.versions]
        instructions = dict(self.seed.instructions)
        instructions.update({k.removeprefix("reviewer."): v for k, v in event["candidate"].items()})
        scores = {"val_accuracy": round(float(event["average_score"]), 6),
                  "val_examples": int(event.get("num_examples_evaluated", 0)), "gepa_candidate": idx,
                  "gepa_iteration": int(event.get("iteration", 0))}
        cost = {"usd_so_far": round(self._spent(), 6), "metric_calls_so_far": self.metric_calls}
        with self._lock:
            version = self.store.save_new(self.seed.program, instructions, parents=parents or [self.seed.version],
                                          source="gepa", scores=scores, cost=cost, **self.metadata)
            self.versions[idx] = version.version
            atomic_write_json(self.map_path, {"versions": {str(k): v for k, v in sorted(self.versions.items())}})
        emit(self._sink, "candidate", f"candidate {idx} -> {version.ref} (val {scores['val_accuracy']:.3f})",
             candidate=idx, version=version.version, parents=parents, val_accuracy=scores["val_accuracy"])


class FatalStopper:
    """gepa stop callback: end the run when a rollout hit a systemic fault (missing key, dead server)."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def __call__(self, gepa_state: Any) -> bool:
        """True once the context recorded a fatal error."""
        return self.context.fatal is not None


# -- GEPA wiring -----------------------------------------------------------------------------------


@dataclass
class GepaSettings:
    """The dspy.GEPA knobs run_optimize sets (kept separate so tests and the bench reuse them)."""

    max_metric_calls: int
    log_dir: Path
    reflection_lm: dspy.LM
    minibatch: int = 3
    max_chars: int = 4000
    workers: int = 4
    seed: int = 0
    accept: Literal["strict", "equal"] = "strict"
    stoppers: list[Any] = field(default_factory=list)
    callbacks: list[Any] = field(default_factory=list)


ADDITIONAL_INSTRUCTIONS = (
    "The assistant is a REVIEWER of another agent's tool calls, not the agent itself. Write instructions for "
    "deciding whether tentative calls contain an error and for writing feedback that lets the agent fix them. "
    "Keep the instruction general: do not copy example-specific values, function names or expected answers "
    "into it. Rejecting a correct call is as harmful as approving a wrong one."
)


ACCEPTANCE = {"strict": "strict_improvement", "equal": "improvement_or_equal"}
"""``--accept`` -> gepa's ``acceptance_criterion``."""


def build_gepa(metric: Callable[..., Any], settings: GepaSettings) -> dspy.GEPA:
    """dspy.GEPA with the project's fixed choices (see anchors.md sections 1-2 for why each)."""
    from dspy.teleprompt.gepa import InstructionProposer

    return dspy.GEPA(
        metric=metric,
        max_metric_calls=settings.max_metric_calls,
        reflection_minibatch_size=settings.minibatch,
        candidate_selection_strategy="pareto",
        reflection_lm=settings.reflection_lm,
        instruction_proposer=InstructionProposer(additional_instructions=ADDITIONAL_INSTRUCTIONS,
                                                 max_chars=settings.max_chars),
        use_merge=False,
        num_threads=settings.workers,
        log_dir=str(settings.log_dir),
        track_stats=True,
        warn_on_score_mismatch=False,
        seed=settings.seed,
        gepa_kwargs={"use_cloudpickle": True, "frontier_type": "hybrid", "cache_evaluation": True,
                     "acceptance_criterion": ACCEPTANCE[settings.accept],
                     "stop_callbacks": list(settings.stoppers), "callbacks": list(settings.callbacks)},
    )


def compile_gepa(gepa: dspy.GEPA, student: dspy.Module, trainset: Sequence[dspy.Example],
                 valset: Sequence[dspy.Example]) -> Any:
    """Run GEPA (train for reflection, val for selection) and return ``detailed_results``.

    Raises:
        RunError: an empty split.
    """
    if not trainset or not valset:
        raise RunError(f"GEPA needs non-empty train and val splits (got {len(trainset)} train, {len(valset)} val)")
    program = gepa.compile(student, trainset=list(trainset), valset=list(valset))
    return program.detailed_results


# -- the run ---------------------------------------------------------------------------------------

RESUMABLE_OVERRIDES = frozenset({"max_metric_calls", "budget", "max_cost", "workers", "evaluate_test",
                                 "test_limit"})
"""Fields a resume may change (budgets are cumulative); everything else comes from run.json."""


@dataclass
class OptimizeResult:
    """What ``run_optimize`` returns (and writes to ``summary.json``)."""

    run_dir: Path
    status: str
    seed_version: str
    best_version: str
    versions: dict[int, str]
    val_scores: list[float]
    metric_calls: int
    stopped_by: str | None
    estimate: dict[str, Any]
    costs: dict[str, Any]
    test: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {"run_dir": str(self.run_dir), "status": self.status, "seed_version": self.seed_version,
                "best_version": self.best_version, "versions": {str(k): v for k, v in self.versions.items()},
                "val_scores": self.val_scores, "metric_calls": self.metric_calls, "stopped_by": self.stopped_by,
                "estimate": self.estimate, "costs": self.costs, "test": self.test}


def open_run(config: OptimizeConfig, overrides: frozenset[str] | set[str] = frozenset()
             ) -> tuple[Path, OptimizeConfig, Any]:
    """Create ``runs/<ts>-optimize/`` or re-open ``config.resume``; returns (dir, effective config, header).

    Raises:
        RunError: the resume directory is not an optimize run.
    """
    if config.resume:
        run_dir = Path(config.resume)
        try:
            header = read_header(run_dir)
        except RunError as exc:
            raise RunError(f"--resume {exc}") from exc
        if header.verb != "optimize":
            raise RunError(f"--resume {run_dir}: it is a {header.verb!r} run, not an optimize run")
        stored = header.config | {k: getattr(config, k) for k in overrides if k in RESUMABLE_OVERRIDES}
        effective = OptimizeConfig.model_validate(stored | {"resume": str(run_dir)})
        header.status, header.finished, header.error = "started", None, None
        header.config = effective.model_dump(mode="json", exclude={"resume"})
        return run_dir, effective, header
    run_dir = create_run_dir(Path(config.runs_dir), "optimize")
    header = new_header(run_dir, "optimize", config=config.model_dump(mode="json", exclude={"resume"}),
                        args_passed={k: getattr(config, k) for k in overrides},
                        models={"base": config.base, "reviewer": config.reviewer,
                                "reflection": config.reflection_spec},
                        plugins={"mechanism": {"spec": config.mechanism}})
    return run_dir, config, header


def run_optimize(config: OptimizeConfig, *, on_event: EventSink | None = None,
                 overrides: frozenset[str] | set[str] = frozenset()) -> OptimizeResult:
    """Optimize the reviewer's instructions with GEPA; see the module docstring.

    Raises:
        ConfigError, ModelUnavailableError, ArtifactError, DatasetError: bad input (run.json says error).
        RunError: the run directory cannot be created/resumed, or a candidate could not be saved.
    """
    run_dir, config, header = open_run(config, overrides)
    write_header(run_dir, header)
    emit(on_event, "resume" if config.resume else "start", f"run directory {run_dir}", run_dir=str(run_dir))
    with guarded_run(run_dir, header):
        result = _run(config, run_dir, header, on_event)
    finish_header(run_dir, header, status=result.status)
    return result


@dataclass
class _World:
    """Everything a rollout needs, built once per process."""

    ledger: Any
    agent: Any
    mechanism: Any
    mech_ctx: Any
    reviewer_lm: Any
    reflection_lm: Any
    store: Any
    seed: Any
    context: Any
    components: tuple[str, ...]


def build_world(config: OptimizeConfig) -> _World:
    """Open the LMs (one ledger), the frozen base agent, the mechanism and the seed prompt.

    Raises:
        ModelUnavailableError: a model cannot be used (missing key points to ``--base local``).
        ArtifactError: the seed prompt reference does not resolve.
    """
    from saag_opt.agents.base import BaseAgent, BasePredictionCache
    from saag_opt.agents.mechanisms import MechanismContext, parse_mechanism
    from saag_opt.artifacts.store import PromptStore
    from saag_opt.lm import CostLedger, open_lm, parse_model_spec
    from saag_opt.optimize.program import RolloutContext

    ledger = CostLedger()
    base_spec = parse_model_spec(config.base)
    open_lm(base_spec, role="base", ledger=ledger)  # fail fast (missing key) before any work
    reviewer_lm = open_lm(config.reviewer, role="reviewer", ledger=ledger)
    reflection_lm = open_lm(config.reflection_spec, role="reflection", ledger=ledger, temperature=1.0,
                            max_tokens=config.reflection_max_tokens)
    store = PromptStore(config.prompts_dir)
    seed = store.resolve(config.prompt)
    if not store.exists(seed.program, seed.version):  # a seed given as a file path: lineage needs it stored
        seed = store.adopt(config.prompt)
    mechanism = parse_mechanism(config.mechanism)
    agent = BaseAgent(base_spec, ledger=ledger)  # same cache key as the evaluation runner's agent
    mech_ctx = MechanismContext(cache=BasePredictionCache(directory=base_predictions_dir()))
    context = RolloutContext(lambda ex, rev: mechanism.run(ex, agent, rev, ctx=mech_ctx), label=config.mechanism)
    return _World(ledger, agent, mechanism, mech_ctx, reviewer_lm, reflection_lm, store, seed, context,
                  mechanism.components)


def build_reviewer(world: _World, instructions: Mapping[str, str]) -> Any:
    """A Reviewer carrying ``instructions`` whose predictors all talk to the reviewer LM."""
    from saag_opt.agents.reviewer import Reviewer

    reviewer = Reviewer.from_prompt(dict(instructions))
    reviewer.set_lm(world.reviewer_lm)
    return reviewer


def load_splits(config: OptimizeConfig) -> tuple[list[Any], list[Any]]:
    """TRAIN and VAL examples (TEST is loaded only for the final comparison).

    Raises:
        RunError: a split is empty.
    """
    from saag_opt.data import load_dataset

    train = load_dataset(config.dataset, split="train", limit=config.train_limit)
    val = load_dataset(config.dataset, split="val", limit=config.val_limit)
    if not train or not val:
        raise RunError(f"dataset {config.dataset!r} has {len(train)} train and {len(val)} val examples; "
                       "GEPA needs both (lower --train-limit/--val-limit or use a larger dataset)")
    return train, val


def _run(config: OptimizeConfig, run_dir: Path, header: Any, sink: EventSink | None) -> OptimizeResult:
    """The body of ``run_optimize`` once the run directory exists."""
    from saag_opt.data.splits import split_hash
    from saag_opt.optimize.budget import resolve_metric_calls
    from saag_opt.optimize.feedback import metric
    from saag_opt.optimize.program import ReviewerProgram, to_dspy_examples

    configure_lm_cache()
    world = build_world(config)
    if header.config.get("prompt") != world.seed.ref:  # pin an alias (e.g. reviewer@best) for resume
        header.plugins["seed_prompt_given"] = config.prompt
        header.config["prompt"] = world.seed.ref
    train, val = load_splits(config)
    header.dataset = {"spec": config.dataset, "train": len(train), "val": len(val),
                      "split_hash": split_hash(train + val)}
    write_header(run_dir, header)
    calls = resolve_metric_calls(config.budget_name, config.max_metric_calls, n_components=len(world.components),
                                 n_val=len(val), minibatch=config.minibatch)
    estimate = estimate_run(config, world, train + val, calls)
    emit(sink, "estimate", f"about {estimate.lm_calls} LM calls and ${estimate.dollars:.2f} for {calls} rollouts "
         f"(an estimate; {estimate.assumptions})", **estimate.to_dict())
    student = ReviewerProgram(build_reviewer(world, world.seed.instructions), world.context, world.components)
    writer = ArtifactWriter(world.store, seed_version=world.seed, map_path=run_dir / "artifacts.json",
                            metadata=_artifact_metadata(config, header.dataset["split_hash"]),
                            spent=world.ledger.total_dollars, sink=sink)
    stoppers: list[Any] = [FatalStopper(world.context)]
    cost_stopper = None
    if config.max_cost is not None:
        cost_stopper = CostStopper(config.max_cost, world.ledger.total_dollars, on_stop=lambda usd: emit(
            sink, "stopped", f"stopping: spend ${usd:.4f} would pass --max-cost ${config.max_cost:.2f}", usd=usd))
        stoppers.append(cost_stopper)
    settings = GepaSettings(max_metric_calls=calls, log_dir=run_dir / "gepa", reflection_lm=world.reflection_lm,
                            minibatch=config.minibatch, max_chars=config.max_chars, workers=config.workers,
                            seed=config.seed, accept=config.accept, stoppers=stoppers, callbacks=[writer])
    details = compile_gepa(build_gepa(metric, settings), student, to_dspy_examples(train), to_dspy_examples(val))
    if world.context.fatal is not None:
        raise world.context.fatal
    if writer.errors:
        raise RunError("could not save GEPA candidates as prompt versions: " + "; ".join(writer.errors))
    best = writer.versions.get(details.best_idx, world.seed.version)
    world.store.alias(world.seed.program, "best", best)
    stopped_by = "max_cost" if cost_stopper is not None and cost_stopper.stopped else (
        "max_metric_calls" if details.total_metric_calls >= calls else "stop_file")
    emit(sink, "gepa_done", f"GEPA finished ({stopped_by}): best {world.seed.program}@{best} "
         f"(val {max(details.val_aggregate_scores):.3f}, seed {details.val_aggregate_scores[0]:.3f})",
         best=best, stopped_by=stopped_by)
    test = evaluate_test(config, world, run_dir, best, sink) if config.evaluate_test else None
    costs = world.ledger.to_dict()
    atomic_write_json(run_dir / "costs.json", costs)
    result = OptimizeResult(run_dir, "success", world.seed.version, best, dict(writer.versions),
                            [float(x) for x in details.val_aggregate_scores], int(details.total_metric_calls),
                            stopped_by, estimate.to_dict(), costs, test)
    atomic_write_json(run_dir / "summary.json", result.to_dict())
    emit(sink, "done", f"done: {run_dir}", run_dir=str(run_dir))
    return result


def _artifact_metadata(config: OptimizeConfig, split: str) -> dict[str, Any]:
    return {"models": {"base": config.base, "reviewer": config.reviewer, "reflection": config.reflection_spec},
            "dataset": config.dataset, "split_hash": split, "trained_on": ["train"], "selected_on": ["val"],
            "notes": f"GEPA ({config.mechanism}) from {config.prompt}; val = the dataset's val split"}


def estimate_run(config: OptimizeConfig, world: _World, examples: Sequence[Any], rollouts: int) -> Any:
    """Up-front estimate from the examples' prompt sizes and the models' prices."""
    from saag_opt.agents.reviewer import render_conversation, render_tool_docs
    from saag_opt.lm import is_reasoning_model, parse_model_spec, price_call
    from saag_opt.optimize.budget import Price, estimate_cost

    sample = list(examples)[:20]
    prompt = sum(len(render_conversation(e)) + len(render_tool_docs(e)) for e in sample) / max(1, len(sample)) / 4
    instr = sum(len(t) for t in world.seed.instructions.values()) / 4
    reviews, revisions = world.mechanism.calls_per_example()

    def price(text: str) -> Price:
        model = parse_model_spec(text)
        per_in, per_out = price_call(model, 1_000_000, 0), price_call(model, 0, 1_000_000)
        return Price(per_in or 0.0, per_out or 0.0)

    think = 1500 if is_reasoning_model(parse_model_spec(config.reviewer)) else 0
    reflect_in = config.minibatch * (prompt + 400) + instr + 600
    return estimate_cost(rollouts=rollouts, reviews_per_rollout=reviews, revisions_per_rollout=revisions,
                         review_tokens=(prompt + instr + 250, 120 + think), base_tokens=(prompt + 200, 60),
                         reflection_tokens=(reflect_in, config.max_chars / 4 + 2000), minibatch=config.minibatch,
                         reviewer_price=price(config.reviewer), base_price=price(config.base),
                         reflection_price=price(config.reflection_spec))


def evaluate_test(config: OptimizeConfig, world: _World, run_dir: Path, best: str,
                  sink: EventSink | None) -> dict[str, Any]:
    """Seed (A) vs best (B) on TEST with ``compare_prompts`` (base paid once, outputs cached).

    Returns ``{"seed", "best", "compare_run", "comparison"}``; ``comparison`` is the compare run's
    ``CompareSummary``. The compare run's rows are copied into this run's ``records.jsonl``.
    """
    from saag_opt.evaluation.compare import CompareConfig, compare_prompts
    from saag_opt.evaluation.results import read_records
    from saag_opt.evaluation.runner import EvaluateConfig

    seed = world.seed.version
    emit(sink, "evaluating", f"comparing {world.seed.program}@{seed} and @{best} on test", seed=seed, best=best)
    ref = {v: str(world.store.path_of(world.seed.program, v)) for v in (seed, best)}  # own file or built-in seed
    evaluation = EvaluateConfig(base=config.base, reviewer=config.reviewer, prompt=ref[seed], mechanism=config.mechanism,
                                dataset=config.dataset, split="test", limit=config.test_limit, workers=config.workers,
                                seed=config.seed)
    compared = compare_prompts(CompareConfig(a=ref[seed], b=ref[best], evaluation=evaluation,
                                             runs_dir=run_dir / "test", seed=config.seed), ref[seed], ref[best])
    rows = read_records(compared.run_dir / "records.jsonl")  # a resumed run re-evaluates; keep one copy
    atomic_write_jsonl(run_dir / "records.jsonl",
                       [r.model_copy(update={"run_id": run_dir.name}).model_dump(mode="json") for r in rows])
    return {"seed": seed, "best": best, "compare_run": str(compared.run_dir),
            "comparison": compared.summary.model_dump(mode="json")}


__all__ = ["ADDITIONAL_INSTRUCTIONS", "ArtifactWriter", "CostStopper", "FatalStopper", "GepaSettings",
           "OptimizeConfig", "OptimizeEvent", "OptimizeResult", "build_gepa", "build_reviewer", "build_world",
           "compile_gepa", "emit",
           "estimate_run", "evaluate_test", "load_splits", "open_run", "run_optimize"]
