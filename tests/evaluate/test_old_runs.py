"""Runs written before the review set-up became one model still load and resume.

The fixtures under tests/fixtures/runs/main-2be60be are the run.json files (and an interrupted
evaluate run's first records) that main wrote at 2be60be, with the scripted server's URL and the
machine's paths replaced. Only the URL is pointed at a live server here; the shape is left as is.
tests/fixtures/runs/main-c9d713e/compare is a finished two-version compare run main wrote at c9d713e
(before compare took N versions), its paths made relative and its URL replaced.
tests/fixtures/runs/main-aa6f730/evaluate-multiturn is a conversation run the separate multi-turn runner
wrote at aa6f730, cut back to its first finished entry and marked interrupted, its URL replaced.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from saag_opt.atomic import atomic_write_json
from saag_opt.compare.comparison import CompareSummary
from saag_opt.compare.run import resume_compare_config
from saag_opt.data import load_dataset
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import resume_config
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.conversation_records import EpisodeSummary
from saag_opt.evaluation.results import read_records, read_run
from saag_opt.optimize import OptimizeConfig
from saag_opt.optimize.run import open_run
from saag_opt.report.html import render_report
from saag_opt.testing import ScriptedOpenAIServer
from tests.compare.test_multiturn_compare import Scripted
from tests.episodes.world import needs_bfcl
from tests.evaluate.test_runner import World

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OLD = REPO / "tests" / "fixtures" / "runs" / "main-2be60be"
TWO_VERSIONS = REPO / "tests" / "fixtures" / "runs" / "main-c9d713e" / "compare"
RECORDED_URL = "fake@http://127.0.0.1:9/v1"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))


def _copy(verb: str, tmp_path: Path, url: str = RECORDED_URL) -> tuple[Path, dict[str, Any]]:
    """The old run in a scratch directory, its recorded model URL replaced by ``url``."""
    run_dir = tmp_path / f"old-{verb}"
    shutil.copytree(OLD / verb, run_dir)
    text = (run_dir / "run.json").read_text(encoding="utf-8").replace(RECORDED_URL, url)
    (run_dir / "run.json").write_text(text, encoding="utf-8")
    return run_dir, json.loads(text)["config"]


def test_an_interrupted_evaluate_run_of_main_resumes_and_asks_only_the_unfinished_examples(tmp_path: Path) -> None:
    examples = load_dataset("shipped:bfcl", split="test", limit=4)
    world = World(examples)
    with ScriptedOpenAIServer(world) as server:
        run_dir, recorded = _copy("evaluate", tmp_path, f"fake@{server.url}")
        config = resume_config(run_dir)
        assert config.model_dump(mode="json") == recorded  # the same options, written the same way
        result = run_evaluation(config, resume=run_dir)
        asked = {world._which("\n".join(str(m.get("content")) for m in r.body["messages"]))
                 for r in server.chat_requests}
    assert {examples[i].id for i in asked} == {e.id for e in examples[2:]}  # the first two were finished
    assert len(read_records(run_dir / "records.jsonl")) == 8 and len(result.records) == 8
    run = read_run(run_dir)
    assert run.header.status == "success" and run.header.config == recorded


def test_a_compare_run_of_main_loads_and_keeps_its_recorded_configuration(tmp_path: Path) -> None:
    run_dir, recorded = _copy("compare", tmp_path)
    config = resume_compare_config(run_dir, {"max_cost": 5.0})
    assert config.model_dump(mode="json") | {"mode": "prompts"} == recorded | {
        "evaluation": recorded["evaluation"] | {"max_cost": 5.0}}
    with pytest.raises(ConfigError, match=r"--mechanism 'r2' \(the run has 'r1'\): a resumed run keeps its recorded"):
        resume_compare_config(run_dir, {"mechanism": "r2"})


def test_an_optimize_run_of_main_reopens_with_its_recorded_configuration(tmp_path: Path) -> None:
    run_dir, recorded = _copy("optimize", tmp_path)
    _, effective, header = open_run(OptimizeConfig(resume=str(run_dir), max_metric_calls=60),
                                    overrides={"max_metric_calls"})
    assert {k: header.config[k] for k in recorded} == recorded | {"max_metric_calls": 60}
    # optimize did not record these set-up options: its LMs were opened with the values they now default to,
    # and it wrote whole rewrites, one per iteration (a run recorded before --proposer and --proposals existed)
    assert {k: v for k, v in header.config.items() if k not in recorded} == {
        "max_repairs": 5, "reviewer_temperature": 0.0, "reasoning_effort": None, "retries": 4, "retry_base_delay": 1.0,
        "proposer": "rewrite", "proposals": 1}
    assert effective.model_dump(mode="json", exclude={"resume"}) == header.config
    with pytest.raises(ConfigError, match=r"--grounding 'paper' \(the run has 'calibrated'\)"):
        open_run(OptimizeConfig(resume=str(run_dir), grounding="paper"), overrides={"grounding"})


def test_a_two_version_compare_of_main_reads_back_and_writes_the_same_bytes(tmp_path: Path) -> None:
    run = read_run(TWO_VERSIONS)
    summary = run.summary
    assert isinstance(summary, CompareSummary) and summary.keys == ["a", "b"] and len(summary.pairs) == 1
    assert (summary.a.label, summary.b.label, summary.only_a, summary.only_b) == ("v1", "v2", 0, 0)
    assert summary.paired.holm_p == summary.paired.mcnemar_p and (summary.paired.ref, summary.paired.target) == ("a", "b")
    out = tmp_path / "summary.json"
    atomic_write_json(out, summary.model_dump(mode="json"))
    assert out.read_bytes() == (TWO_VERSIONS / "summary.json").read_bytes()
    assert len(run.records) == 36 and {r.condition for r in run.records} == {"base", "r2@v1", "r2@v2"}
    recorded = json.loads((TWO_VERSIONS / "run.json").read_text())["config"]
    assert resume_compare_config(TWO_VERSIONS).model_dump(mode="json") | {"mode": "prompts"} == recorded
    html = render_report([TWO_VERSIONS])
    assert f"Compare {run.header.run_id}: A = v1 vs B = v2" in html and "Every pair of versions" not in html


MULTI_TURN = REPO / "tests" / "fixtures" / "runs" / "main-aa6f730" / "evaluate-multiturn"


@needs_bfcl
def test_an_interrupted_multi_turn_run_of_main_resumes_with_the_one_evaluate_run(tmp_path: Path) -> None:
    """A conversation run the separate multi-turn runner wrote (main at aa6f730, its first entry finished)
    continues under ``run_evaluation``: only the unfinished entries are asked, and it reads back typed."""
    scripted = Scripted()
    asked: list[str] = []

    def world(request: dict[str, Any]) -> Any:
        if "tools" in request:
            asked.append(str(next(m for m in request["messages"] if m["role"] == "user")["content"]))
        return scripted(request)

    with ScriptedOpenAIServer(world) as server:
        run_dir = tmp_path / "old-multi-turn"
        shutil.copytree(MULTI_TURN, run_dir)
        text = (run_dir / "run.json").read_text(encoding="utf-8").replace(RECORDED_URL, f"fake@{server.url}")
        (run_dir / "run.json").write_text(text, encoding="utf-8")
        recorded = json.loads(text)["config"]
        config = resume_config(run_dir)
        assert config.model_dump(mode="json") == recorded
        result = run_evaluation(config, resume=run_dir)
    first = next(iter(scripted.worlds))  # multi_turn_base_0's first user message: finished before
    assert asked and first not in asked
    run = read_run(run_dir)
    assert run.header.status == "success" and run.header.verb == "evaluate-multiturn"
    assert isinstance(run.summary, EpisodeSummary) and run.summary.n_episodes == 3
    assert [(r.example_id, r.condition) for r in result.records] == [
        (f"multi_turn_base_{i}", c) for i in range(3) for c in ("base", "r2")]
