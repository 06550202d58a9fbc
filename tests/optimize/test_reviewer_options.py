"""optimize runs the review set-up evaluate measures: the reviewer's temperature and reasoning effort
and every role's retries reach GEPA's rollouts and the seed-vs-best test phase.

Proved from the scripted server's request log. Before the set-up was one model, optimize had no
such options and opened its LMs with the client defaults, so a reviewer tuned at temperature 0.7
was tuned (and tested) at 0.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from saag_opt.cli import main
from saag_opt.events import RunEvent
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.runfiles import read_header
from saag_opt.testing.scripted_server import Fault, RecordedRequest, Reply, ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration

FAILING = ("Prague", "Sofia")
"""A val city (GEPA scores it on every val pass) and a test city (both test passes): their reviews always fail."""


@pytest.fixture(autouse=True)
def _private_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))


def _is_reflection(request: RecordedRequest) -> bool:
    return world.is_reflection(request.body or {})


def _reviewer(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if not (r.body or {}).get("tools") and not _is_reflection(r)]


def _failing_reviews(request: dict) -> Reply | Fault:
    """The world, but a review of a FAILING city gets a 500 every time (the base agent and reflection answer)."""
    messages = json.dumps(request.get("messages") or [])
    if not request.get("tools") and not world.is_reflection(request) and any(c in messages for c in FAILING):
        return Fault(500)
    return world.handler(request)


def test_rollouts_and_the_test_phase_send_the_reviewer_options_and_retry_as_configured(tmp_path: Path) -> None:
    dataset, prompts = world.write_world(tmp_path)
    marks: list[int] = []
    with ScriptedOpenAIServer(_failing_reviews) as server:
        def on_event(event: RunEvent) -> None:
            if event.kind == "evaluating" and not marks:
                marks.append(len(server.chat_requests))

        spec = f"fake@{server.url}"
        result = run_optimize(OptimizeConfig(
            base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts, mechanism="r1",
            runs_dir=tmp_path / "runs", max_metric_calls=40, workers=2, reviewer_temperature=0.7,
            reasoning_effort="low", retries=2, retry_base_delay=0.0), on_event=on_event)
        log = server.chat_requests
    assert marks and result.test is not None, "the test phase ran"
    for phase in (log[:marks[0]], log[marks[0]:]):
        reviews = _reviewer(phase)
        assert reviews
        assert all((r.body or {}).get("temperature") == 0.7 and r.body.get("reasoning_effort") == "low"
                   for r in reviews)
        attempts = Counter(json.dumps(r.body, sort_keys=True) for r in reviews if r.outcome == "500")
        assert attempts and all(n % 3 == 0 for n in attempts.values()), attempts  # retries=2: three attempts
    base = [r for r in log if (r.body or {}).get("tools")]
    assert base and all(r.body.get("temperature") == 0.0 and "reasoning_effort" not in r.body for r in base)
    reflection = [r for r in log if _is_reflection(r)]
    assert reflection and all("reasoning_effort" not in (r.body or {}) for r in reflection)
    assert result.test is not None and result.test.compare_run is not None
    test_run = Path(result.test.compare_run)
    for side in ("a", "b"):  # the test phase's evaluate passes recorded the set-up GEPA ran
        (side_run,) = (test_run / side).glob("*-evaluate")
        config = read_header(side_run).config
        assert (config["reviewer_temperature"], config["reasoning_effort"], config["retries"]) == (0.7, "low", 2)


def test_the_cli_offers_the_reviewer_options_and_records_them(tmp_path: Path) -> None:
    dataset, prompts = world.write_world(tmp_path, 6, 4, 2)
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        with pytest.raises(SystemExit) as info:
            main(["optimize", "--base", spec, "--reviewer", spec, "--mechanism", "r1", "--dataset", dataset,
                  "--store", prompts, "--max-metric-calls", "20", "--workers", "1", "--no-test",
                  "--reviewer-temperature", "0.4", "--reasoning-effort", "minimal", "--retries", "1",
                  "--runs-dir", str(tmp_path / "runs")])
        assert info.value.code in (0, None)
        reviews = _reviewer(server.chat_requests)
    (run_dir,) = (tmp_path / "runs").glob("*-optimize")
    config = read_header(run_dir).config
    assert (config["reviewer_temperature"], config["reasoning_effort"], config["retries"]) == (0.4, "minimal", 1)
    assert reviews and all(r.body.get("temperature") == 0.4 and r.body.get("reasoning_effort") == "minimal"
                           for r in reviews)
