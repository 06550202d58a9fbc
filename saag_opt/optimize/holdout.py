"""Seed vs best on the held-out TEST split: a ``compare_prompts`` run inside the optimize run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from saag_opt.agents.setup import ReviewSetup
from saag_opt.atomic import atomic_write_jsonl
from saag_opt.compare.run import CompareConfig, compare_prompts
from saag_opt.errors import CostCapReached
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.events import EventSink, emit
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.optimize.world import World
from saag_opt.runfiles import read_rows


def holdout_settings(config: OptimizeConfig, prompt: str) -> EvaluateConfig:
    """How the test phase's compare evaluates: the run's set-up with ``prompt``, on the TEST split."""
    setup = ReviewSetup.model_validate(dict(config.setup) | {"prompt": prompt})  # plain: compare runs "none" too
    return EvaluateConfig(setup=setup, dataset=config.dataset, split="test", limit=config.test_limit,
                          workers=config.workers, seed=config.seed)


def evaluate_test(config: OptimizeConfig, world: World, run_dir: Path, best: str,
                  sink: EventSink | None) -> dict[str, Any]:
    """Seed (A) vs best (B) on TEST with ``compare_prompts`` (base paid once, outputs cached).

    The set-up is the one GEPA's rollouts ran (``config.setup``: models, mechanism, reviewer inputs
    and call options), with the seed's and the best's prompt files in turn, so the test measures the
    prompts the way they were tuned. On a multi-turn dataset the compare runs conversations (its
    passes are multi-turn evaluate runs on the TEST entries), paired per entry.

    Returns ``{"seed", "best", "compare_run", "comparison", "stopped"}``; ``comparison`` is the
    compare run's ``CompareSummary``. The compare run's rows are copied into this run's
    ``records.jsonl``. The run's spend cap covers the comparison: when it stops it, ``stopped`` says
    why and ``comparison`` covers the examples both versions finished (None when there are none).
    """
    seed = world.seed.version
    emit(sink, "evaluating", f"comparing {world.seed.program}@{seed} and @{best} on test", seed=seed, best=best)
    ref = {v: str(world.store.path_of(world.seed.program, v)) for v in (seed, best)}  # own file or built-in seed
    evaluation = holdout_settings(config, ref[seed])
    try:
        compared = compare_prompts(CompareConfig(versions=[ref[seed], ref[best]], evaluation=evaluation,
                                                 runs_dir=run_dir / "test", seed=config.seed), [ref[seed], ref[best]],
                                   ledger=world.ledger)  # the run's cap covers the test phase
    except CostCapReached as exc:
        emit(sink, "stopped", f"test comparison skipped: {exc}")
        return {"seed": seed, "best": best, "compare_run": None, "comparison": None, "stopped": str(exc)}
    # a resumed run re-evaluates; keep one copy (a conversation's rows whole: every turn, the checker's verdict)
    rows = read_rows(compared.run_dir / "records.jsonl", world.work.record)
    atomic_write_jsonl(run_dir / "records.jsonl",
                       [r.model_copy(update={"run_id": run_dir.name}).model_dump(mode="json") for r in rows])
    if compared.summary.stopped:
        emit(sink, "stopped", f"test comparison incomplete: {compared.summary.stopped}")
    return {"seed": seed, "best": best, "compare_run": str(compared.run_dir),
            "comparison": compared.summary.model_dump(mode="json"), "stopped": compared.summary.stopped}


__all__ = ["evaluate_test", "holdout_settings"]
