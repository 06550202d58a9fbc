"""``evaluate --batch`` end to end on the scripted server: rounds become Batch API jobs, nothing else changes.

Each run gets empty LM and base-prediction caches unless the test says otherwise, so every request
is counted where it went: a batch line (``server.batch_line_bodies``) or a direct call
(``server.chat_requests``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from saag_opt import stopping
from saag_opt.cli import main
from saag_opt.compare.run import CompareConfig, run_compare
from saag_opt.data import load_dataset
from saag_opt.errors import ModelUnavailableError
from saag_opt.evaluate.config import EvaluateConfig, resume_config
from saag_opt.evaluate.run import EvaluationResult, run_evaluation
from saag_opt.evaluation.results import read_run
from saag_opt.lm.batch.api import BatchClient
from saag_opt.lm.batch.rounds import BATCHES_FILE
from saag_opt.lm.spend.accounting import BATCH_PRICE_FACTOR, ModelPrice
from saag_opt.model import Example
from saag_opt.testing import ScriptedOpenAIServer
from tests.evaluate.test_runner import World

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 8
PRICE = ModelPrice(input=2.5e-6, output=1e-5, cached_input=1.25e-6, max_output_tokens=400)
SECRET = "sk-proj-batch-secret-0123456789"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)


@pytest.fixture
def examples() -> list[Example]:
    return load_dataset(DATASET, split=SPLIT, limit=LIMIT)


def _config(server: ScriptedOpenAIServer, tmp_path: Path, name: str, **overrides: Any) -> EvaluateConfig:
    values: dict[str, Any] = dict(base=f"openai/scripted@{server.url}", reviewer=f"openai/scripted@{server.url}",
                                  prompt="reviewer@v1", mechanism="r2", dataset=DATASET, split=SPLIT, limit=LIMIT,
                                  workers=3, runs_dir=tmp_path / f"runs-{name}", cache_dir=tmp_path / f"base-{name}",
                                  retry_base_delay=0.01)
    return EvaluateConfig(**(values | overrides))


def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / f"dspy-{name}"))


def _rows(result: EvaluationResult) -> list[tuple[Any, ...]]:
    return [(r.example_id, r.condition, r.final, r.correct, r.error is None,
             [(x.verdict, x.revised) for x in r.rounds]) for r in result.records]


def _bodies(bodies: list[dict]) -> Counter[str]:
    return Counter(json.dumps(b, sort_keys=True) for b in bodies)


def test_replies_are_identical_with_and_without_batch_at_half_the_price(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(examples)
    with ScriptedOpenAIServer(world, batch_delay=0.5) as server:  # each stage outlasts the first polls
        _fresh_cache(monkeypatch, tmp_path, "direct")
        direct = run_evaluation(_config(server, tmp_path, "direct"))
        sent = _bodies([r.body for r in server.chat_requests])
        server.reset()
        _fresh_cache(monkeypatch, tmp_path, "batch")
        events: list[Any] = []
        batched = run_evaluation(_config(server, tmp_path, "batch", batch=True), on_event=events.append)
        assert server.chat_requests == [], "every call went through a batch"
        assert _bodies(server.batch_line_bodies) == sent, "the batches asked exactly what the direct run asked"
        batches = server.batches
    assert _rows(batched) == _rows(direct)
    assert batched.summary.help_harm == direct.summary.help_harm
    assert 3 <= len(batches) <= 6  # base proposals, first reviews, revisions, second reviews (+ their stragglers)
    assert batches[0]["request_counts"]["total"] == LIMIT  # every example's base proposal in the first round
    one, half = direct.summary.costs["roles"]["total"], batched.summary.costs["roles"]["total"]
    assert half["batch_calls"] == half["calls"] == one["calls"] and one["batch_calls"] == 0
    assert (half["prompt_tokens"], half["completion_tokens"]) == (one["prompt_tokens"], one["completion_tokens"])
    assert half["dollars"] == pytest.approx(one["dollars"] * BATCH_PRICE_FACTOR)
    statuses = [e.data.get("status") for e in events if e.kind == "batch"]
    assert {"submitted", "validating", "completed"} <= set(statuses), "polls are visible"
    assert any("/8 done" in e.message for e in events if e.data.get("status") == "validating")
    recorded = json.loads((batched.run_dir / BATCHES_FILE).read_text())["batches"]
    assert [row["id"] for row in recorded] == [b["id"] for b in batches]
    assert all(row["status"] == "completed" for row in recorded)


def test_a_stop_mid_batch_then_resume_polls_that_batch_and_does_not_pay_twice(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(examples)
    _fresh_cache(monkeypatch, tmp_path, "stop")
    with ScriptedOpenAIServer(world, batch_delay=1.5) as server:
        def stop_once_a_batch_runs() -> None:
            deadline = time.monotonic() + 60
            while not server.batches and time.monotonic() < deadline:
                time.sleep(0.02)
            stopping.request_stop()

        watcher = threading.Thread(target=stop_once_a_batch_runs, daemon=True)
        watcher.start()
        try:
            with pytest.raises(stopping.RunInterrupted):
                run_evaluation(_config(server, tmp_path, "stop", batch=True))
        finally:
            watcher.join(60)
            stopping.reset()
        [first] = server.batches
        assert first["status"] in ("validating", "in_progress"), "stopped while the batch was in flight"
        run_dir = next((tmp_path / "runs-stop").iterdir())
        assert read_run(run_dir, header_only=True).header.status == "interrupted"
        recorded = json.loads((run_dir / BATCHES_FILE).read_text())["batches"]
        assert [row["id"] for row in recorded] == [first["id"]]
        first_lines = set(recorded[0]["custom_ids"])

        server.batch_desk.delay = 0.05
        resumed = run_evaluation(resume_config(run_dir), resume=run_dir)
        after = server.batches
        polled_again = [r for r in server.requests if r.method == "GET" and r.path.endswith(f"/batches/{first['id']}")]
    assert resumed.summary.n_examples == LIMIT and resumed.summary.errors == 0
    assert after[0]["id"] == first["id"] and after[0]["status"] == "completed" and polled_again
    rows = json.loads((run_dir / BATCHES_FILE).read_text())["batches"]
    later = {cid for row in rows[1:] for cid in row["custom_ids"]}
    assert later and not later & first_lines, "a request of the first batch was submitted again"
    assert server.chat_requests == [], "nothing fell back to a direct call"
    assert len({b["id"] for b in after}) == len(after) == len(rows)


def test_an_expired_batch_sends_its_unanswered_requests_directly(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(examples)
    with ScriptedOpenAIServer(world, batch_delay=0.05) as server:
        _fresh_cache(monkeypatch, tmp_path, "reference")
        reference = run_evaluation(_config(server, tmp_path, "reference"))
        server.reset()
        server.script_batches(["expire"])
        _fresh_cache(monkeypatch, tmp_path, "expired")
        expired = run_evaluation(_config(server, tmp_path, "expired", batch=True))
        first = server.batches[0]
        direct = [r.body for r in server.chat_requests]
    assert first["status"] == "expired" and first["request_counts"] == {"total": LIMIT, "completed": LIMIT // 2,
                                                                         "failed": LIMIT - LIMIT // 2}
    assert len(direct) == LIMIT - LIMIT // 2 and all("tools" in b for b in direct), \
        "exactly the base proposals the expired batch left unanswered are sent directly"
    assert _rows(expired) == _rows(reference)
    total = expired.summary.costs["roles"]["total"]
    assert total["batch_calls"] == total["calls"] - len(direct) and total["retries"] == 0


def test_cli_batch_run_keeps_the_key_out_of_the_batch_files_and_the_run_dir(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    world = World(examples)
    world.failing = {examples[2].id}  # its lines fail in the batch, then directly: an error record, the rest fine
    _fresh_cache(monkeypatch, tmp_path, "cli")
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    with ScriptedOpenAIServer(world, batch_delay=0.05) as server:
        with pytest.raises(SystemExit) as exit_info:
            main(["evaluate", "--base", f"openai/scripted@{server.url}", "--reviewer", f"openai/scripted@{server.url}",
                  "--prompt", "reviewer@v1", "--mechanism", "r1", "--dataset", DATASET, "--limit", str(LIMIT),
                  "--retries", "1", "--batch", "--runs-dir", str(tmp_path / "runs")])
        uploads = [server.batch_desk.file_text(b["input_file_id"]) for b in server.batches]
        direct = [r.body for r in server.chat_requests]
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out
    assert "batch_" in out and "completed" in out, "the batch status is printed"
    assert uploads and all(SECRET not in text for text in uploads)
    assert direct and all(examples[2].query in json.dumps(b) for b in direct), "only the failing example fell back"
    run_dir = next((tmp_path / "runs").iterdir())
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"the API key leaked into {path.name}"
    header = read_run(run_dir, header_only=True).header
    assert header.config["batch"] is True and header.status == "success"


def test_compare_batch_gives_the_comparison_of_direct_calls_with_each_pass_in_batches(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(examples)

    def compare(name: str, **overrides: Any) -> Any:
        _fresh_cache(monkeypatch, tmp_path, name)
        settings = _config(server, tmp_path, name, **overrides)
        return run_compare(CompareConfig(a="reviewer@v1", b="reviewer@v2", evaluation=settings,
                                         runs_dir=tmp_path / f"compare-{name}"))

    with ScriptedOpenAIServer(world, batch_delay=0.05) as server:
        direct = compare("direct")
        server.reset()
        batched = compare("batch", batch=True)
        assert server.chat_requests == [] and server.batches
    one, two = batched.summary, direct.summary
    assert (one.matched, one.base_disagreements, one.pairs) == (two.matched, two.base_disagreements, two.pairs)
    assert [side.help_harm for side in one.sides] == [side.help_harm for side in two.sides]
    passes = sorted(p.parent.parent.name for p in (tmp_path / "compare-batch").rglob(BATCHES_FILE))
    assert passes, "each pass that called a model keeps its own batches.json"



def test_a_run_that_died_right_after_creating_a_batch_resumes_into_that_batch(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch exists, its id was never written: resume finds it by the intent written before it was created."""
    world = World(examples)
    _fresh_cache(monkeypatch, tmp_path, "died")
    real = BatchClient.submit

    def submit_then_die(self: BatchClient, lines: list[dict[str, Any]], **kwargs: Any) -> str:
        real(self, lines, **kwargs)
        raise RuntimeError("the process was killed")

    with ScriptedOpenAIServer(world, batch_delay=0.05) as server:
        with monkeypatch.context() as patch:
            patch.setattr(BatchClient, "submit", submit_then_die)
            with pytest.raises(ModelUnavailableError, match="--resume looks for it on the server"):
                run_evaluation(_config(server, tmp_path, "died", batch=True))
        [first] = server.batches
        run_dir = next((tmp_path / "runs-died").iterdir())
        [intent] = json.loads((run_dir / BATCHES_FILE).read_text())["batches"]
        assert intent["id"] is None and first["metadata"]["saag_intent"] == intent["intent"]

        resumed = run_evaluation(resume_config(run_dir), resume=run_dir)
        after = server.batches
        direct = server.chat_requests
    assert resumed.summary.n_examples == LIMIT and resumed.summary.errors == 0 and direct == []
    rows = json.loads((run_dir / BATCHES_FILE).read_text())["batches"]
    assert rows[0]["id"] == first["id"] and rows[0]["status"] == "completed"
    assert [b["id"] for b in after] == [row["id"] for row in rows], "one batch per row, none made twice"
    later = {cid for row in rows[1:] for cid in row["custom_ids"]}
    assert not later & set(rows[0]["custom_ids"]), "a request of the found batch was submitted again"
