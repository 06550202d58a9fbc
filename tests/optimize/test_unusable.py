"""Reviewer replies that could not be read are counted per phase of optimize: GEPA rollouts and TEST."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.report.optimize_tables import print_optimize_report
from saag_opt.testing.scripted_server import Reply, ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration

GARBLED = {"Rome", "Prague", "Riga"}
"""The reviewer never answers readably about these: Rome is in train, Prague in val, Riga in test."""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))


def _garbling(request: dict) -> Reply:
    messages = request.get("messages") or []
    user = "\n".join(world._text(m.get("content")) for m in messages if m.get("role") == "user")
    if not request.get("tools") and not world.is_reflection(request) and world._asked_city(user) in GARBLED:
        return Reply(text="I would rather not say.")
    return world.handler(request)


def _run(tmp_path: Path, handler: object) -> tuple[dict, list]:
    dataset, prompts = world.write_world(tmp_path)
    with ScriptedOpenAIServer(handler) as server:
        spec = f"fake@{server.url}"
        result = run_optimize(OptimizeConfig(base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts,
                                             runs_dir=str(tmp_path / "runs"), max_metric_calls=30, workers=2,
                                             mechanism="r1", reflection_max_tokens=1000))
        return result.to_dict(), server.chat_requests


def test_unreadable_reviews_in_gepa_rollouts_and_on_test_are_in_the_summary_and_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary, requests = _run(tmp_path, _garbling)
    counts = summary["reviewer_unusable"]
    gepa = counts["gepa_rollouts"]
    garbled_reviews = [r for r in requests if not r.body.get("tools") and any(
        f"weather in {city}" in json.dumps(r.body) for city in GARBLED - {"Riga"})]
    assert garbled_reviews, "the world never garbled a rollout's review"
    assert gepa["rollouts"] == summary["metric_calls"]  # one count per rollout GEPA ran
    assert 0 < gepa["reviewer_unusable"] == gepa["rollouts_with_unusable"] < gepa["rollouts"]  # r1: one review each
    # Each unreadable reply is asked twice, each time through ChatAdapter and its JSON fallback (4 requests);
    # repeated rollouts are answered by the LM cache, so the server sees at most 4 per counted reply.
    assert len(garbled_reviews) <= 4 * gepa["reviewer_unusable"]
    assert counts["test"] == {"seed": 1, "best": 1}  # Riga, the one garbled TEST example, under both prompts
    saved = json.loads((Path(summary["run_dir"]) / "rollouts.json").read_text())
    assert saved == gepa and json.loads((Path(summary["run_dir"]) / "summary.json").read_text())[
        "reviewer_unusable"] == counts

    print_optimize_report(Console(width=200), summary)
    printed = capsys.readouterr().out
    assert "Reviewer replies unusable (after a retry), per phase" in printed
    row = next(line for line in printed.splitlines() if "GEPA rollouts (train + val)" in line)
    assert [cell.strip() for cell in row.split("│")[2:5]] == [
        str(gepa[k]) for k in ("reviewer_unusable", "rollouts_with_unusable", "rollouts")]
    assert [cell.strip() for cell in next(line for line in printed.splitlines() if "TEST best" in line).split(
        "│")[2:5]] == ["1", "-", "4"]


def test_a_readable_reviewer_counts_zero_in_every_phase(tmp_path: Path) -> None:
    summary, _ = _run(tmp_path, world.handler)
    counts = summary["reviewer_unusable"]
    assert counts["gepa_rollouts"]["reviewer_unusable"] == 0 and counts["gepa_rollouts"]["rollouts"] > 0
    assert counts["test"] == {"seed": 0, "best": 0}


def test_a_resumed_run_reports_the_counts_of_every_attempt(tmp_path: Path) -> None:
    first, _ = _run(tmp_path, _garbling)
    before = first["reviewer_unusable"]["gepa_rollouts"]
    (Path(first["run_dir"]) / "summary.json").unlink()
    config = OptimizeConfig(resume=first["run_dir"], max_metric_calls=30, evaluate_test=False)
    # The server is gone: the resume replays from the LM cache (a seed re-evaluation on val, counted again).
    resumed = run_optimize(config, overrides={"max_metric_calls", "evaluate_test"}).to_dict()
    after = resumed["reviewer_unusable"]["gepa_rollouts"]
    assert after["rollouts"] > before["rollouts"] and after["reviewer_unusable"] >= before["reviewer_unusable"]
    assert resumed["reviewer_unusable"]["test"] is None  # --no-test on the resume
