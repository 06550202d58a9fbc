"""optimize from a built-in seed in an empty store: the new version lands in the store, the seed stays
built in, and the test phase finds both (the seed is not a file in the store root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.artifacts.store import PromptStore, load_version_file
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.paths import shipped
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration


def _extends_the_seed(request: dict) -> object:
    """The world, except that reflection keeps the built-in v2 and adds the keyword line.

    Why: the world's one-line proposal in place of v2's 1661 characters is what the rails quarantine
    (optimize/rails.py LENGTH_RATIO); a real rewrite of v2 keeps its criteria.
    """
    if world.is_edit_request(request):  # the edit proposer adds the keyword as one rule of v2
        return world.edit_reply(world.PROPOSED_INSTRUCTION)
    if world.is_rewrite(request):
        v2 = load_version_file(shipped("prompts") / "reviewer" / "v2.json").instructions["review"]
        return world.rewrite_reply(request, f"{v2}\n{world.PROPOSED_INSTRUCTION}")
    return world.handler(request)


def test_optimize_from_the_built_in_seed_into_an_empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    dataset, _ = world.write_world(tmp_path)
    store = tmp_path / "empty-store"
    with ScriptedOpenAIServer(_extends_the_seed) as server:
        spec = f"fake@{server.url}"
        result = run_optimize(OptimizeConfig(base=spec, reviewer=spec, dataset=dataset, prompt="reviewer@production",
                                             prompts_dir=str(store), runs_dir=str(tmp_path / "runs"),
                                             max_metric_calls=40, workers=2, mechanism="r1"))
    assert (result.seed_version, result.best_version) == ("v2", "v3-gepa")
    prompts = PromptStore(store)
    assert prompts.is_seed("reviewer", "v2") and prompts.get("reviewer", "v3-gepa").parents == ["v2"]
    assert sorted(p.name for p in (store / "reviewer").iterdir()) == ["v3-gepa.json", "v3-gepa.md"]
    assert not (shipped("prompts") / "reviewer" / "v3-gepa.json").exists()
    assert result.test is not None and result.test.seed == "v2" and result.test.best == "v3-gepa"
