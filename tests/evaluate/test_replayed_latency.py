"""Reported latency does not depend on what an earlier run left in the LM cache: a re-run, or
``gate+r2`` after ``r2`` (same reviewer requests, all replayed), reports the latency of the original
calls, while the cost ledger books the replayed calls at the ~0 s they took."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import saag_opt.lm.client as client
from saag_opt.data import load_dataset
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import EvaluationResult, run_evaluation
from saag_opt.model import Example
from saag_opt.testing import Reply, ScriptedOpenAIServer, tentative_calls
from tests.evaluate.scripted_replies import chat, right, wrong

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 6
LATENCY = 0.3
"""Seconds the scripted server waits before every answer: each LM call costs at least this."""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))


class World:
    """Base wrong on every 3rd example (a text answer: the SAAG gate never passes it); the reviewer
    rejects wrong calls and approves right ones; a revision is right."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __call__(self, request: dict[str, Any]) -> Reply:
        text = "\n".join(str(m.get("content")) for m in request["messages"])
        i = max((i for i, ex in enumerate(self.examples) if ex.query and ex.query in text),
                key=lambda i: len(self.examples[i].query))
        example = self.examples[i]
        if "tools" in request:
            return right(example) if "Reviewer feedback" in text or i % 3 else wrong(example)
        tentative = tentative_calls(request)
        looks_wrong = ("cannot help" in tentative) if example.expect != "no_call" else ("no function call" not in tentative)
        return chat({"error": str(looks_wrong), "feedback": "Please fix the call."})


def _run(server: ScriptedOpenAIServer, tmp_path: Path, mechanism: str) -> EvaluationResult:
    return run_evaluation(EvaluateConfig(
        base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1", mechanism=mechanism,
        dataset=DATASET, split=SPLIT, limit=LIMIT, workers=3, runs_dir=tmp_path / "runs",
        cache_dir=tmp_path / "base-cache", retry_base_delay=0.01))


def _seconds(result: EvaluationResult) -> dict[tuple[str, str], float]:
    return {(r.example_id, r.condition): r.seconds for r in result.records}


def _ledger_seconds(result: EvaluationResult, role: str) -> float:
    return float(result.summary.costs["roles"].get(role, {}).get("seconds", 0.0))


def test_a_rerun_served_from_the_cache_reports_the_latency_of_the_original_calls(tmp_path: Path) -> None:
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    with ScriptedOpenAIServer(World(examples), latency=LATENCY) as server:
        first = _run(server, tmp_path, "r2")
        made = len(server.chat_requests)
        again = _run(server, tmp_path, "r2")
        assert len(server.chat_requests) == made  # every call replayed from the LM cache
    reviewed = {k: s for k, s in _seconds(first).items() if k[1] == "r2"}
    assert all(s >= 2 * LATENCY for s in reviewed.values())  # a base call and at least one review each
    replayed = _seconds(again)
    for key, seconds in _seconds(first).items():  # tolerances for load; a lost replay loses >= LATENCY
        assert replayed[key] == pytest.approx(seconds, rel=0.25, abs=0.1), key
        assert replayed[key] >= (2 * LATENCY if key[1] == "r2" else LATENCY), key
    overhead, overhead_again = first.summary.latency.overhead_x, again.summary.latency.overhead_x
    assert overhead is not None and overhead > 1.5
    assert overhead_again is not None and overhead_again > 1.5
    assert overhead_again == pytest.approx(overhead, rel=0.2)
    # The ledger is spend: the re-run's reviewer calls were cache hits and took ~0 s.
    assert _ledger_seconds(first, "reviewer") >= LIMIT * LATENCY
    assert _ledger_seconds(again, "reviewer") < 0.5


def test_gate_after_the_ungated_run_reports_the_reviewer_time_of_the_reviewed_examples(tmp_path: Path) -> None:
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    with ScriptedOpenAIServer(World(examples), latency=LATENCY) as server:
        ungated = _run(server, tmp_path, "r2")
        made = len(server.chat_requests)
        gated = _run(server, tmp_path, "gate+r2")
        assert len(server.chat_requests) == made  # the gate's reviewer calls are the r2 run's
    r2 = {r.example_id: r for r in ungated.records if r.condition == "r2"}
    rows = [r for r in gated.records if r.condition == "gate+r2"]
    reviewed = [r for r in rows if not r.gated]
    assert reviewed and len(reviewed) < len(rows)
    for row in reviewed:  # a base call and 1-2 reviews (and a revision): as long as in the r2 run
        assert row.seconds >= (2 if row.rounds[0].verdict == "approve" else 4) * LATENCY
        assert row.seconds == pytest.approx(r2[row.example_id].seconds, rel=0.25, abs=0.1)
    base_mean = gated.summary.latency.base_mean_seconds
    expected = 1 + sum(r.seconds - base_mean for r in reviewed) / len(rows) / base_mean
    assert gated.summary.latency.overhead_x == pytest.approx(expected, rel=0.1)
    assert gated.summary.latency.overhead_x > 1.5
    assert _ledger_seconds(gated, "reviewer") < 0.5


def test_replays_of_unknown_time_are_counted_so_the_summary_says_latency_is_incomplete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    with ScriptedOpenAIServer(World(examples), latency=LATENCY) as server:
        first = _run(server, tmp_path, "r2")
        made = len(server.chat_requests)
        # As with an LM cache filled before the time store existed: the replies replay, their times are gone.
        monkeypatch.setattr(client, "_CALL_TIMES", {})
        for path in [p for p in (tmp_path / "lm-cache" / "saag-call-seconds").rglob("*") if p.is_file()]:
            path.unlink()
        again = _run(server, tmp_path, "r2")
        assert len(server.chat_requests) == made
    assert first.summary.latency.untimed_replays == 0
    reviews = sum(r.reviewer_calls for r in again.records if r.condition == "r2")
    agent = sum(r.agent_calls for r in again.records if r.condition == "r2")
    assert again.summary.latency.untimed_replays >= reviews + agent  # ChatAdapter may ask more than once
    assert all(r.untimed_replays == 0 for r in again.records if r.condition == "base")  # base-prediction cache
    assert again.summary.latency.overhead_x < first.summary.latency.overhead_x  # what the count warns about


def test_a_base_proposal_timed_from_an_untimed_replay_is_not_stored_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    with ScriptedOpenAIServer(World(examples), latency=LATENCY) as server:
        _run(server, tmp_path, "none")
        made = len(server.chat_requests)
        monkeypatch.setattr(client, "_CALL_TIMES", {})
        for path in [*(p for p in (tmp_path / "lm-cache" / "saag-call-seconds").rglob("*") if p.is_file()),
                     *(tmp_path / "base-cache").rglob("*.json")]:
            path.unlink()
        again = _run(server, tmp_path, "none")
        assert len(server.chat_requests) == made
    base_rows = [r for r in again.records if r.condition == "base"]
    assert all(r.untimed_replays >= 1 and r.seconds < LATENCY for r in base_rows)
    assert again.summary.latency.untimed_replays >= 2 * len(base_rows)  # both rows carry the base call's count
    assert not list((tmp_path / "base-cache").rglob("*.json"))  # a later run times them again, or counts them
