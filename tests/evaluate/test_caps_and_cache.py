"""Numbers a user trusts without reading the code: unreadable reviews are counted and decided by an
explicit policy, --max-cost is never passed, and a re-run costs nothing (counted at the server)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from saag_opt.data import load_dataset
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.results import read_run
from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.model import Example
from saag_opt.testing import Reply, ScriptedOpenAIServer, tentative_calls
from tests.evaluate.scripted_replies import chat, right, wrong

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 12
PRICE = ModelPrice(input=2.5e-6, output=1e-5, cached_input=1.25e-6, max_output_tokens=400)
"""gpt-4o's rates with a small output limit, given to the scripted model in the cost tests."""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))  # a private LM cache: counts are exact


@pytest.fixture
def examples() -> list[Example]:
    return load_dataset(DATASET, split=SPLIT, limit=LIMIT)


class World:
    """Base wrong on every 3rd example; the reviewer rejects wrong calls. Examples in ``garbled``
    get an unreadable review every time; those in ``garbled_once`` only on the first ask."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples
        self.garbled: set[int] = set()
        self.garbled_once: set[int] = set()
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _which(self, text: str) -> int:
        hits = [i for i, ex in enumerate(self.examples) if ex.query and ex.query in text]
        return max(hits, key=lambda i: len(self.examples[i].query))

    def __call__(self, request: dict) -> Reply:
        text = "\n".join(str(m.get("content")) for m in request["messages"])
        i = self._which(text)
        example = self.examples[i]
        if "tools" in request:
            revised = "Reviewer feedback" in text
            return right(example) if revised or i % 3 else wrong(example)
        with self._lock:
            self.seen[example.id] += 1
            asks = self.seen[example.id]
        if i in self.garbled or (i in self.garbled_once and asks <= 2):  # ChatAdapter + its JSON fallback
            return Reply(text="Looks fine to me!")
        tentative = tentative_calls(request)
        looks_wrong = ("cannot help" in tentative) if example.expect != "no_call" else ("no function call" not in tentative)
        return chat({"error": str(looks_wrong), "feedback": "Please fix the call."})


def _config(server: ScriptedOpenAIServer, tmp_path: Path, **overrides: Any) -> EvaluateConfig:
    values: dict[str, Any] = dict(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                  mechanism="r1", dataset=DATASET, split=SPLIT, limit=LIMIT, workers=3,
                                  runs_dir=tmp_path / "runs", cache_dir=tmp_path / "base-cache", retry_base_delay=0.01)
    values.update(overrides)
    return EvaluateConfig(**values)


def _bodies(server: ScriptedOpenAIServer) -> list[str]:
    return [json.dumps(r.body, sort_keys=True) for r in server.chat_requests]


@pytest.mark.parametrize("policy", ["approve", "reject"])
def test_unreadable_reviews_are_retried_once_counted_and_decided_by_the_policy(
        tmp_path: Path, examples: list[Example], policy: str) -> None:
    world = World(examples)
    world.garbled = {0, 1}  # 0: base wrong (i % 3 == 0); 1: base right
    world.garbled_once = {2}
    with ScriptedOpenAIServer(world) as server:
        result = run_evaluation(_config(server, tmp_path, on_unusable=policy))
    rows = {r.example_id: r for r in result.records if r.condition == "r1"}
    first, second, third = (rows[examples[i].id] for i in (0, 1, 2))
    assert (first.reviewer_unusable, second.reviewer_unusable, third.reviewer_unusable) == (1, 1, 0)
    assert world.seen[examples[0].id] == 4  # asked twice, each through ChatAdapter and its JSON fallback
    assert world.seen[examples[2].id] == 3 and third.rounds[0].verdict == "approve"  # the retry was read
    assert first.rounds[0].verdict == "reviewer_failed" and "AdapterParseError" in (first.rounds[0].note or "")
    if policy == "approve":  # the calls run as the base agent proposed
        assert first.final == first.base and not first.correct and second.correct
    else:  # a rejection: the agent revises (this world's revisions are right)
        assert first.rounds[0].revised is not None and first.correct and second.correct
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["reviewed"]["reviewer_unusable"] == 2 and summary["base"]["reviewer_unusable"] == 0
    assert read_run(result.run_dir).header.config["on_unusable"] == policy


def test_an_identical_rerun_makes_zero_requests(tmp_path: Path, examples: list[Example]) -> None:
    world = World(examples)
    world.garbled, world.garbled_once = {1}, {2}  # retries too must replay from the cache
    with ScriptedOpenAIServer(world) as server:
        first = run_evaluation(_config(server, tmp_path))
        made = len(server.chat_requests)
        again = run_evaluation(_config(server, tmp_path))
        assert made > LIMIT and len(server.chat_requests) == made  # zero new requests
    def rows(result: Any) -> list[tuple[Any, ...]]:
        return [(r.example_id, r.condition, r.final, r.correct, r.reviewer_unusable) for r in result.records]

    assert rows(again) == rows(first)
    assert again.summary.reviewed.reviewer_unusable == first.summary.reviewed.reviewer_unusable == 1


def test_max_cost_is_never_passed_and_the_run_resumes_from_the_cache(
        tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)
    cap = 0.03
    with ScriptedOpenAIServer(World(examples)) as server:
        stopped = run_evaluation(_config(server, tmp_path, max_cost=cap))
        first_bodies = set(_bodies(server))
        costs = json.loads((stopped.run_dir / "costs.json").read_text())
        spent = costs["roles"]["total"]["dollars"]
        assert 0 < spent <= cap  # zero overshoot
        header = read_run(stopped.run_dir, header_only=True).header
        assert header.status == "stopped" and "--max-cost $0.03 reached" in header.error.message
        assert stopped.summary.stopped and "--max-cost" in stopped.summary.stopped
        finished = {r.example_id for r in stopped.records}
        assert 0 < stopped.summary.n_examples == len(finished) < LIMIT
        assert all(r.error is None for r in stopped.records)  # an unfinished example is not an error row
        server.reset()
        resumed = run_evaluation(_config(server, tmp_path, max_cost=1.0))
        assert resumed.summary.stopped is None and resumed.summary.n_examples == LIMIT
        assert not first_bodies & set(_bodies(server))  # finished work is replayed, not re-bought
    by_id = {(r.example_id, r.condition): r.final for r in stopped.records}
    assert all(by_id[(r.example_id, r.condition)] == r.final for r in resumed.records if r.example_id in finished)
