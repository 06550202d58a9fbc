"""``saag-opt evaluate --resume RUN_DIR``: the same run directory continues, finished examples are not asked again.

Every resume here runs against empty LM and base-prediction caches, so a request for a finished
example would reach the scripted server and be counted: skipping is proven by the request log, not
hidden by a cache hit.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.cli import main
from saag_opt.data import load_dataset
from saag_opt.errors import ConfigError, RunError
from saag_opt.evaluate.config import EvaluateConfig, resume_config
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.results import read_records, read_run
from saag_opt.model import Example
from saag_opt.testing import ScriptedOpenAIServer
from tests.evaluate.test_runner import World

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 8


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy-1"))


@pytest.fixture
def examples() -> list[Example]:
    return load_dataset(DATASET, split=SPLIT, limit=LIMIT)


@pytest.fixture
def world(examples: list[Example]) -> Iterator[tuple[World, ScriptedOpenAIServer]]:
    w = World(examples)
    with ScriptedOpenAIServer(w) as server:
        yield w, server


def _config(server: ScriptedOpenAIServer, tmp_path: Path, **overrides: Any) -> EvaluateConfig:
    values: dict[str, Any] = dict(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                  mechanism="r1", dataset=DATASET, split=SPLIT, limit=LIMIT, workers=2,
                                  runs_dir=tmp_path / "runs", cache_dir=tmp_path / "base-cache",
                                  retry_base_delay=0.01)
    return EvaluateConfig(**(values | overrides))


def _forget_every_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    shutil.rmtree(tmp_path / "base-cache", ignore_errors=True)
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / f"dspy-{n}"))


def _asked(w: World, server: ScriptedOpenAIServer) -> list[str]:
    return [w.examples[w._which("\n".join(str(m.get("content")) for m in r.body["messages"]))].id
            for r in server.chat_requests]


def test_resume_redoes_only_unfinished_examples_and_ends_like_an_uninterrupted_run(
        world, tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    w, server = world
    full = run_evaluation(_config(server, tmp_path))
    requests_per_example = {i: _asked(w, server).count(i) for i in {e.id for e in examples}}
    run_dir = full.run_dir
    costs_before = json.loads((run_dir / "costs.json").read_text())["roles"]["total"]["calls"]

    # A crash: the last two examples lost (one of them half-written, its second row torn mid-line).
    lines = (run_dir / "records.jsonl").read_text().splitlines(keepends=True)
    rows = [json.loads(line) for line in lines]
    lost = {rows[-1]["example_id"], rows[-3]["example_id"]}
    kept = [line for line, row in zip(lines, rows) if row["example_id"] not in lost]
    half = next(line for line, row in zip(lines, rows) if row["example_id"] == rows[-1]["example_id"]
                and row["condition"] == "base")
    (run_dir / "records.jsonl").write_text("".join(kept) + half + half[: len(half) // 2])
    header = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(header | {"status": "started", "finished": None}))
    (run_dir / "summary.json").unlink()

    _forget_every_cache(tmp_path, monkeypatch, 2)
    server.reset()
    events: list[Any] = []
    resumed = run_evaluation(resume_config(run_dir), resume=run_dir, on_event=events.append)

    assert resumed.run_dir == run_dir and sorted(p.parent for p in (tmp_path / "runs").glob("*/run.json")) == [run_dir]
    asked = _asked(w, server)
    assert set(asked) == lost, "a finished example was asked again"
    assert len(asked) == sum(requests_per_example[i] for i in lost)
    records = read_records(run_dir / "records.jsonl")
    assert sorted((r.example_id, r.condition) for r in records) == sorted(
        (e.id, c) for e in examples for c in ("base", "r1")), "an example is missing or appears twice"
    run = read_run(run_dir)
    assert run.header.status == "success" and run.header.finished is not None
    resume = run.header.model_extra and run.header.model_extra["resumes"][0]
    assert resume and resume["finished_before"] == LIMIT - 2
    assert resume["previous_end"] is None  # the attempt before was killed: it never wrote its end
    assert run.summary is not None and run.summary.help_harm == full.summary.help_harm
    assert run.summary.reviewed.model_dump(exclude={"mean_seconds"}) == full.summary.reviewed.model_dump(
        exclude={"mean_seconds"}) and run.summary.n_examples == LIMIT  # latency: the redone examples were timed again
    costs_after = json.loads((run_dir / "costs.json").read_text())["roles"]["total"]["calls"]
    assert costs_after == costs_before + len(asked), "costs.json must sum both attempts"
    assert [e.kind for e in events][0] == "resumed" and events[0].data["done"] == LIMIT - 2
    assert [e.data["done"] for e in events if e.kind == "example_finished"] == [LIMIT - 1, LIMIT]

    server.reset()  # resuming a finished run asks nothing and keeps it whole
    again = run_evaluation(resume_config(run_dir), resume=run_dir)
    assert server.chat_requests == [] and len(again.records) == 2 * LIMIT
    assert len(read_records(run_dir / "records.jsonl")) == 2 * LIMIT


def test_resume_keeps_the_recorded_configuration_and_allows_only_run_options(world, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    run_dir = run_evaluation(_config(server, tmp_path, limit=2)).run_dir
    recorded = json.loads((run_dir / "run.json").read_text())["config"]
    same = resume_config(run_dir, {"mechanism": "R1", "limit": 2, "split": SPLIT, "runs_dir": "elsewhere"})
    assert same.model_dump(mode="json") == recorded
    changed = resume_config(run_dir, {"workers": 1, "max_cost": 2.5, "fail_on_error": 0.5})
    assert (changed.workers, changed.max_cost, changed.fail_on_error) == (1, 2.5, 0.5)
    with pytest.raises(ConfigError, match=r"--mechanism 'r2' \(the run has 'r1'\); --limit 5 \(the run has 2\): a "
                                          r"resumed run keeps its recorded configuration"):
        resume_config(run_dir, {"mechanism": "r2", "limit": 5, "workers": 3})
    with pytest.raises(ConfigError, match=r"--store '/nowhere' \(the run has None\)"):
        resume_config(run_dir, {"prompts_dir": "/nowhere"})
    with pytest.raises(RunError, match="cannot read run.json"):
        resume_config(tmp_path)


def test_resume_refuses_a_run_whose_dataset_changed(world, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    run_dir = run_evaluation(_config(server, tmp_path, limit=2)).run_dir
    header = json.loads((run_dir / "run.json").read_text())
    header["dataset"]["ids_hash"] = "0" * 16
    (run_dir / "run.json").write_text(json.dumps(header))
    with pytest.raises(RunError, match="no longer gives the run's examples"):
        run_evaluation(resume_config(run_dir), resume=run_dir)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "success"  # a refused resume changes nothing


def test_cli_resume_with_a_contradicting_option_is_one_line_and_exit_2(
        world, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001

    _, server = world
    run_dir = run_evaluation(_config(server, tmp_path, limit=2)).run_dir
    server.reset()
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--resume", str(run_dir), "--mechanism", "r2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert re.match(rf"error: --resume {re.escape(str(run_dir))}: --mechanism 'r2' \(the run has 'r1'\)", err)
    assert server.chat_requests == []
    with pytest.raises(SystemExit) as info:  # repeating recorded values is fine; env defaults are not options
        main(["evaluate", "--resume", str(run_dir), "--mechanism", "r1", "--workers", "1"])
    assert info.value.code == 0 and server.chat_requests == []
    assert "Accuracy: base vs r1" in capsys.readouterr().out


def test_resume_refuses_a_prompt_that_now_means_other_words(world, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    prompt = tmp_path / "mine.json"
    seed = json.loads((REPO / "prompts" / "reviewer" / "v1.json").read_text())
    seed.pop("sha256", None)
    prompt.write_text(json.dumps(seed))
    run_dir = run_evaluation(_config(server, tmp_path, limit=2, prompt=str(prompt))).run_dir
    assert json.loads((run_dir / "run.json").read_text())["plugins"]["reviewer"]["sha256"]
    seed["instructions"]["review"] += " Be strict."
    prompt.write_text(json.dumps(seed))
    server.reset()
    with pytest.raises(RunError, match=r"now resolves to other instructions .*; start a new run"):
        run_evaluation(resume_config(run_dir), resume=run_dir)
    assert server.chat_requests == []


def test_resume_tries_again_the_examples_that_ended_in_an_error(world, tmp_path: Path, examples: list[Example]) -> None:  # noqa: ANN001
    # A provider outage for two examples: their calls failed after the retries. Resuming after the outage
    # must ask for them again (and only them); the rest are kept.
    w, server = world
    w.failing = {examples[1].id, examples[5].id}
    first = run_evaluation(_config(server, tmp_path, retries=1))
    assert sorted({r.example_id for r in first.records if r.error is not None}) == sorted(w.failing)
    w.failing = set()
    server.reset()
    resumed = run_evaluation(resume_config(first.run_dir), resume=first.run_dir)
    assert set(_asked(w, server)) == {examples[1].id, examples[5].id}
    records = read_records(first.run_dir / "records.jsonl")
    assert all(r.error is None for r in records) and len(records) == 2 * LIMIT
    assert sorted((r.example_id, r.condition) for r in records) == sorted(
        (e.id, c) for e in examples for c in ("base", "r1")), "an example is missing or appears twice"
    assert resumed.summary.errors == 0


def test_skip_runs_fresh_examples_records_it_and_a_resume_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--skip N``: the next examples of the stratified order; run.json says so; a default run's run.json is unchanged."""
    known = load_dataset(DATASET, split=SPLIT, limit=2 * LIMIT)
    seen, fresh = (load_dataset(DATASET, split=SPLIT, limit=LIMIT),
                   load_dataset(DATASET, split=SPLIT, limit=LIMIT, skip=LIMIT))
    with ScriptedOpenAIServer(World(known)) as server:
        plain = run_evaluation(_config(server, tmp_path))
        skipped = run_evaluation(_config(server, tmp_path, skip=LIMIT))
        header = json.loads((skipped.run_dir / "run.json").read_text())
        assert header["config"]["skip"] == LIMIT and header["dataset"]["skip"] == LIMIT
        assert {r.example_id for r in read_run(skipped.run_dir).records} == {e.id for e in fresh}
        assert not {e.id for e in seen} & {e.id for e in fresh}
        untouched = json.loads((plain.run_dir / "run.json").read_text())
        assert "skip" not in untouched["config"] and "skip" not in untouched["dataset"]
        assert resume_config(skipped.run_dir).skip == LIMIT
        for run_dir, other in ((skipped.run_dir, "0"), (plain.run_dir, "3")):  # nor which examples a run holds,
            with pytest.raises(SystemExit) as exit_info:  # even from a run whose run.json leaves skip out
                main(["evaluate", "--resume", str(run_dir), "--skip", other])
            assert exit_info.value.code == 2
        with pytest.raises(ConfigError, match=r"--skip 3 \(the run has 0\)"):
            resume_config(plain.run_dir, {"skip": 3})
