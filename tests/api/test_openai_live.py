"""The live suite: each verb once against the real OpenAI API, each capped at a few cents.

Opt-in: ``OPENAI_API_KEY=... pytest -m api tests/api``. Without ``-m api`` or without a key every test
here is skipped with that reason; CI has no key. What it checks is what no scripted server can: that
OpenAI takes every request the project builds for gpt-4o-mini (base) and gpt-5-mini (reviewer, a
reasoning model), that real usage is priced, and that ``--max-cost`` holds against real bills.
The caps add up to $0.27 (plus one guard review); a pass usually spends cents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from saag_opt.cli import main
from saag_opt.data.tau2_package import missing as tau2_missing
from tests.conftest import requires

pytestmark = pytest.mark.api

BASE, REVIEWER = "gpt-4o-mini", "gpt-5-mini"
REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
        raise SystemExit(0)
    assert stop.value.code in (0, None)


def _only_run(runs: Path) -> Path:
    found = [header.parent for header in runs.rglob("run.json")
             if not any((parent / "run.json").is_file() for parent in header.parent.parents if parent != runs)]
    assert len(found) == 1, found
    return found[0]


def _spent(costs: dict[str, Any]) -> float:
    if "roles" in costs:
        return float(costs["roles"]["total"]["dollars"] or 0.0)
    return sum(_spent(part) for part in (costs.get("parts") or {}).values())


def _finished_within(run: Path, cap: float) -> float:
    header = json.loads((run / "run.json").read_text())
    assert header["status"] == "success", header.get("error")
    spent = _spent(json.loads((run / "costs.json").read_text()))
    assert 0.0 < spent <= cap
    return spent


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


def test_evaluate(tmp_path: Path) -> None:
    _run(["evaluate", "--base", BASE, "--reviewer", REVIEWER, "--reasoning-effort", "minimal", "--mechanism", "r2",
          "--dataset", "shipped:bfcl", "--limit", "3", "--max-cost", "0.05", "--runs-dir", str(tmp_path)])
    run = _only_run(tmp_path)
    _finished_within(run, 0.05)
    rows = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert len({row["example_id"] for row in rows}) == 3 and not any(row["error"] for row in rows)


def test_compare(tmp_path: Path) -> None:
    _run(["compare", "reviewer@v1", "reviewer@v2", "--base", BASE, "--reviewer", REVIEWER, "--mechanism", "r1",
          "--dataset", "shipped:bfcl", "--limit", "2", "--max-cost", "0.05", "--runs-dir", str(tmp_path)])
    _finished_within(_only_run(tmp_path), 0.05)


def test_optimize_at_the_smallest_budget(tmp_path: Path) -> None:
    _run(["optimize", "--base", BASE, "--reviewer", REVIEWER, "--dataset", "shipped:bfcl", "--train-limit", "2",
          "--val-limit", "2", "--test-limit", "2", "--minibatch", "1", "--max-metric-calls", "6", "--accept", "equal",
          "--max-cost", "0.10", "--store", str(tmp_path / "prompts"), "--runs-dir", str(tmp_path / "runs")])
    _finished_within(_only_run(tmp_path / "runs"), 0.10)


def test_evaluate_through_the_batch_api(tmp_path: Path) -> None:
    _run(["evaluate", "--base", BASE, "--reviewer", BASE, "--mechanism", "r1", "--dataset", "shipped:bfcl",
          "--limit", "1", "--batch", "--max-cost", "0.02", "--runs-dir", str(tmp_path)])
    _finished_within(_only_run(tmp_path), 0.02)


@requires(tau2_missing())
def test_one_tau2_task(tmp_path: Path) -> None:
    _run(["evaluate", "--dataset", "tau2:mock", "--base", BASE, "--reviewer", BASE, "--mechanism", "r1",
          "--limit", "1", "--max-steps", "12", "--max-cost", "0.05", "--runs-dir", str(tmp_path)])
    _finished_within(_only_run(tmp_path), 0.05)


def test_one_guard_decision() -> None:
    from saag_opt.runtime import Guard  # noqa: PLC0415 - the runtime layer only for this test

    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    guard = Guard.load("reviewer@v2", reviewer=REVIEWER, mechanism="r1", timeout=60.0, on_error="block")
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}
    decision = guard.review([{"role": "user", "content": "What's the weather in Paris?"}], tools, [call])
    assert decision.error is None and decision.reviewed
    assert decision.action in ("revise", "block") and 0.0 < decision.cost_usd < 0.02
