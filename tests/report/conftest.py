"""Session fixtures: real evaluate/compare/optimize runs against the scripted server, made once.

Each runner finishes through ``runfiles.finish_header``, with the report writer registered as the
CLI registers it, so these runs also show that a finished run writes its own report.html.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from saag_opt.artifacts import PromptStore
from saag_opt.compare.run import CompareConfig, run_compare
from saag_opt.data import load_dataset
from saag_opt.data.catalog import load_episodes
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.report.html import write_report
from saag_opt.runfiles import on_run_finished
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.compare.test_compare import DATASET, LIMIT, MARKER, SPLIT, World
from tests.compare.test_compare_n import ThreeWorld, add_v3
from tests.evaluate.test_multiturn_flips import REPO, WRONG, _gold
from tests.evaluate.test_multiturn_flips import World as EpisodeWorld
from tests.optimize import optimize_world
from tests.report import runs


@contextmanager
def reporting() -> Iterator[None]:
    """``write_report`` registered as a run-finished hook while the runs are made, as the CLI does for
    one command (kept short: other tests' run directories must not get a report.html)."""
    remove = on_run_finished(write_report)
    try:
        yield
    finally:
        remove()


@pytest.fixture(scope="session")
def eval_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An r2 evaluate run and a prompts-mode compare run (v1 approves everything, v2 fixes and breaks)."""
    root = tmp_path_factory.mktemp("eval-runs")
    v1, v2 = runs.prompt_files(root / "prompts", MARKER)
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    with ScriptedOpenAIServer(World(examples)) as server, reporting():
        settings = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2",
                                  prompt=v2, dataset=DATASET, split=SPLIT, limit=LIMIT, workers=4,
                                  runs_dir=root / "runs", cache_dir=root / "cache", retry_base_delay=0.01)
        evaluate = run_evaluation(settings).run_dir
        compare = run_compare(CompareConfig(a=v1, b=v2, evaluation=settings, runs_dir=root / "runs")).run_dir
    return {"evaluate": evaluate, "compare": compare}


@pytest.fixture(scope="session")
def three_way_compare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prompts-mode compare of three versions (v1 approves, v2 fixes and breaks, v3-gepa only fixes)."""
    root = tmp_path_factory.mktemp("three-way")
    v1, v2 = runs.prompt_files(root / "prompts", MARKER)
    add_v3(PromptStore(root / "prompts"))
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    with ScriptedOpenAIServer(ThreeWorld(examples)) as server, reporting():
        settings = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2",
                                  dataset=DATASET, split=SPLIT, limit=LIMIT, workers=4, runs_dir=root / "unused",
                                  cache_dir=root / "cache", retry_base_delay=0.01)
        versions = [v1, v2, str(root / "prompts" / "reviewer" / "v3-gepa.json")]
        return run_compare(CompareConfig(versions=versions, evaluation=settings, runs_dir=root / "runs")).run_dir


@pytest.fixture(scope="session")
def optimize_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GEPA run over the scripted weather world (seed v2 -> v3-gepa, compared on TEST)."""
    root = tmp_path_factory.mktemp("optimize-run")
    dataset, prompts = optimize_world.write_world(root)
    with ScriptedOpenAIServer(optimize_world.handler) as server, reporting():
        spec = f"fake@{server.url}"
        result = run_optimize(OptimizeConfig(base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts,
                                             runs_dir=str(root / "runs"), max_metric_calls=40, workers=2,
                                             mechanism="r1"))
    return result.run_dir


@pytest.fixture(scope="session")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic 1,000-example evaluate run (size budget)."""
    return runs.synthetic_evaluate_run(tmp_path_factory.mktemp("big-run"))


@pytest.fixture(scope="session")
def tune_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded tune fixture."""
    return runs.tune_run(tmp_path_factory.mktemp("tune-run"))


@pytest.fixture(scope="session")
def multiturn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A multi-turn evaluate run (r2) of three BFCL entries on the scripted server, through the CLI's runner.

    The agent replays each entry's gold calls, except at entry 0's first step, where it makes
    ``mkdir(dir_name='tmp')``; the reviewer rejects that call, the agent revises it, and the entry
    flips from invalid to valid under BFCL's checker (``tests/evaluate/test_multiturn_flips.py``).
    """
    root = tmp_path_factory.mktemp("multiturn-run")
    dataset = "bfcl:multi_turn_base"
    entries = load_episodes(dataset, split=None, limit=3)
    worlds = {str(e.turns[0].messages[0]["content"]): EpisodeWorld(_gold(e), agent_wrong=i == 0, reject=WRONG)
              for i, e in enumerate(entries)}

    def handler(request: dict) -> Reply:
        if "tools" not in request:
            return next(iter(worlds.values())).review(request)
        first = next(m for m in request["messages"] if m["role"] == "user")
        return worlds[str(first["content"])](request)

    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer(handler) as server, reporting():
        patch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
        config = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2",
                                dataset=dataset, split=None, limit=3, workers=2, runs_dir=root / "runs",
                                cache_dir=root / "cache", retry_base_delay=0.01, retries=0)
        return run_evaluation(config).run_dir
