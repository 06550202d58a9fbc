"""run_optimize end to end against the scripted server: accept, artifacts, stops, test table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from saag_opt.artifacts.store import PromptStore
from saag_opt.errors import ConfigError, ModelUnavailableError, RunError
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.optimize.edits import rule_changes
from saag_opt.report.optimize_tables import print_optimize_report
from saag_opt.testing.scripted_server import Fault, ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration


@pytest.fixture()
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(world.handler) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))


def _config(tmp_path: Path, server: ScriptedOpenAIServer, **extra: object) -> OptimizeConfig:
    return world.config(tmp_path, server, **extra)


def test_optimize_accepts_better_prompt_saves_lineage_and_compares_on_test(tmp_path: Path, server) -> None:
    events = []
    result = run_optimize(_config(tmp_path, server), on_event=events.append)
    store = PromptStore(tmp_path / "prompts")
    best = store.get("reviewer", result.best_version)
    assert result.best_version == "v3-gepa" and best.parents == ["v2"] and best.source == "gepa"
    assert world.KEYWORD in best.instructions["review"]
    assert best.instructions["select"] == "Pick the best candidate."  # untouched components carried over
    assert best.scores["val_accuracy"] == 1.0 and result.val_scores[0] == 0.5
    assert store.aliases("reviewer")["reviewer"]["best"] == "v3-gepa"
    kinds = [e.kind for e in events]
    assert kinds.index("estimate") < kinds.index("candidate") < kinds.index("run_finished")
    test = result.test
    assert (test.seed, test.best) == ("v2", "v3-gepa")
    comparison = test.comparison  # the test phase is a compare run: A = seed, B = best
    assert comparison.a.accuracy.accuracy == 0.5 and comparison.b.accuracy.accuracy == 1.0
    assert comparison.paired.b_only_right == 2 and comparison.paired.a_only_right == 0
    assert json.loads((Path(test.compare_run) / "run.json").read_text())["verb"] == "compare"
    header = json.loads((result.run_dir / "run.json").read_text())
    assert header["status"] == "success" and header["verb"] == "optimize"
    assert (result.run_dir / "gepa" / "gepa_state.bin").is_file()
    assert json.loads((result.run_dir / "summary.json").read_text())["best_version"] == "v3-gepa"
    assert "reflection" in json.loads((result.run_dir / "costs.json").read_text())["roles"]
    rows = [json.loads(line) for line in (result.run_dir / "records.jsonl").read_text().splitlines()]
    assert sorted({r["condition"] for r in rows}) == ["base", "r1@v2", "r1@v3-gepa"] and len(rows) == 12


def test_alias_seed_is_pinned_in_run_json_for_resume(tmp_path: Path, server) -> None:
    config = _config(tmp_path, server, evaluate_test=False)
    PromptStore(config.setup.prompts_dir).alias("reviewer", "production", "v2")
    result = run_optimize(config.with_setup(prompt="reviewer@production"))
    header = json.loads((result.run_dir / "run.json").read_text())
    assert header["config"]["prompt"] == "reviewer@v2"
    assert header["plugins"]["seed_prompt_given"] == "reviewer@production"


def test_metric_call_budget_stops_the_run(tmp_path: Path, server) -> None:
    result = run_optimize(_config(tmp_path, server, max_metric_calls=14, evaluate_test=False))
    assert result.stopped_by == "max_metric_calls"
    assert result.metric_calls <= 14 + 3  # gepa checks the cap at iteration boundaries


def test_budget_too_small_is_a_config_error(tmp_path: Path, server) -> None:
    with pytest.raises(ConfigError, match="cannot test a single candidate"):
        run_optimize(_config(tmp_path, server, max_metric_calls=5))


def test_missing_key_points_to_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    dataset, prompts = world.write_world(tmp_path)
    config = OptimizeConfig(dataset=dataset, prompts_dir=prompts, runs_dir=str(tmp_path / "runs"))
    with pytest.raises(ModelUnavailableError, match="--base local --reviewer local"):
        run_optimize(config)
    assert not (tmp_path / "runs").exists(), "a run that could not start leaves no run directory"


def test_a_reviewer_whose_key_is_rejected_stops_with_that_message(tmp_path: Path, server) -> None:
    """Every seed rollout failing used to end in gepa's "requires objective_scores" ValueError."""
    with ScriptedOpenAIServer(lambda request: Fault(401, message="invalid key")) as rejecting:
        config = _config(tmp_path, server, reviewer=f"fake@{rejecting.url}", max_metric_calls=14,
                         evaluate_test=False)
        with pytest.raises(ModelUnavailableError, match=r"rejected the API key"):
            run_optimize(config)
    header = json.loads(next((tmp_path / "runs").iterdir()).joinpath("run.json").read_text())
    assert header["status"] == "error" and "rejected the API key" in header["error"]["message"]


def test_resume_after_the_gepa_checkpoint_was_damaged_starts_over_and_keeps_the_file(tmp_path: Path, server) -> None:
    """A truncated gepa_state.bin used to make every resume fail with an UnpicklingError traceback."""
    first = run_optimize(_config(tmp_path, server, max_metric_calls=20, evaluate_test=False))
    state = first.run_dir / "gepa" / "gepa_state.bin"
    state.write_bytes(state.read_bytes()[:100])
    events = []
    second = run_optimize(OptimizeConfig(resume=str(first.run_dir), max_metric_calls=20, base="gpt-4o-mini"),
                          on_event=events.append)
    assert second.status == "success" and second.best_version == first.best_version
    (kept,) = (first.run_dir / "gepa").glob("gepa_state.bin.unreadable-*")
    assert kept.stat().st_size == 100 and state.stat().st_size > 100  # a fresh checkpoint beside it
    assert any(e.kind == "warning" and "could not be read" in e.message for e in events)


def test_resume_extends_a_finished_run_cumulatively(tmp_path: Path, server) -> None:
    first = run_optimize(_config(tmp_path, server, max_metric_calls=20, evaluate_test=False))
    more = OptimizeConfig(resume=str(first.run_dir), max_metric_calls=45, base="gpt-4o-mini")
    second = run_optimize(more, overrides={"max_metric_calls"})
    assert second.run_dir == first.run_dir and second.metric_calls >= 45 > first.metric_calls
    header = json.loads((first.run_dir / "run.json").read_text())
    assert header["config"]["max_metric_calls"] == 45 and header["config"]["base"].startswith("fake@")
    assert [v.version for v in PromptStore(tmp_path / "prompts").list("reviewer") if v.source == "gepa"] == ["v3-gepa"]


def test_resume_of_a_non_optimize_dir_is_a_run_error(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="cannot read run.json"):
        run_optimize(OptimizeConfig(resume=str(tmp_path)))


NEUTRAL_INSTRUCTION = "Review the tentative calls carefully and approve them when they look right."


def _neutral_reflection(request: dict) -> object:
    """The world, except that reflection proposes an instruction that changes no verdict (a tie)."""
    if world.is_edit_request(request):
        return world.edit_reply(NEUTRAL_INSTRUCTION)
    if world.is_rewrite(request):
        return world.rewrite_reply(request, NEUTRAL_INSTRUCTION)
    return world.handler(request)


@pytest.mark.parametrize(("accept", "new_version"), [("strict", False), ("equal", True)])
def test_a_tie_enters_the_pool_only_with_accept_equal(tmp_path: Path, accept: str, new_version: bool) -> None:
    with ScriptedOpenAIServer(_neutral_reflection) as srv:
        result = run_optimize(_config(tmp_path, srv, accept=accept, evaluate_test=False))
    store = PromptStore(tmp_path / "prompts", seeds=None)  # the run's own versions only
    versions = store.version_names("reviewer")
    if new_version:
        assert "v3-gepa" in versions
        tied = store.get("reviewer", "v3-gepa")
        # one edit of the seed: the neutral rule added, every seed rule kept
        assert rule_changes(world.SEED_INSTRUCTION, tied.instructions["review"]) == [
            f"added as rule 2: {NEUTRAL_INSTRUCTION}"] and tied.parents == ["v2"]
        # best needs the val margin (optimize/rails.py pick_best); a tie never displaces the seed
        assert result.best_version == "v2"
    else:
        assert versions == ["v2"] and result.best_version == "v2"


def test_a_run_that_kept_the_seed_says_so_instead_of_comparing_it_with_itself(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(_neutral_reflection) as srv:
        result = run_optimize(_config(tmp_path, srv, accept="strict"))
    assert result.best_version == "v2" and result.test is not None and result.test.comparison is not None
    console = Console(width=220, record=True)
    print_optimize_report(console, result)
    text = console.export_text()
    assert "best is the seed (v2): no candidate cleared the val margin" in text
    assert "best (v2) vs seed (v2)" not in text and "TEST: help / harm vs the base agent alone" in text


def test_several_proposals_per_iteration_come_from_one_parent_on_their_own_minibatches(tmp_path: Path,
                                                                                      server) -> None:
    """--proposals 2: gepa's SameParentSampling; each iteration reflects twice on the same parent."""
    from saag_opt.optimize.reflections import REFLECTIONS_FILE, read_reflections  # noqa: PLC0415

    result = run_optimize(_config(tmp_path, server, max_metric_calls=30, evaluate_test=False, proposals=2))
    rows = list(read_reflections(result.run_dir / REFLECTIONS_FILE))
    by_iteration: dict[int, list[dict]] = {}
    for row in rows:
        by_iteration.setdefault(row["iteration"], []).append(row)
    assert by_iteration and all(len(group) == 2 for group in by_iteration.values()), [len(g) for g in by_iteration.values()]
    first = next(iter(by_iteration.values()))
    assert first[0]["parent"] == first[1]["parent"]
    assert json.loads((result.run_dir / "run.json").read_text())["config"]["proposals"] == 2
    with pytest.raises(ValueError, match="proposals"):
        OptimizeConfig(proposals=9)
