"""What is deployed is what is measured: ``Guard`` and ``evaluate --mechanism guard.spec`` run one loop.

The same requests go to a scripted server twice, once through ``evaluate`` (the base agent proposes)
and once through a live ``Guard`` (the host agent proposed the same calls): the review and revision
requests and the calls that finally run must be the same.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from saag_opt.data.jsonl import write_examples
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.model import Example, Registry
from saag_opt.runtime import Guard
from saag_opt.runtime.inputs import read_tools
from saag_opt.testing import Reply, ScriptedOpenAIServer, tentative_calls
from tests.runtime.world import TOOLS, openai_call, verdict

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

PROPOSED = {  # city the user asks about -> what the agent proposes; the comment says what the loop does
    "Paris": {"name": "get_weather", "arguments": {"citty": "Paris"}},  # stage 2, the reviewer approves: revised
    "Rome": {"name": "get_weather", "arguments": {"city": "London"}},  # the reviewer rejects: revised
    "Oslo": {"name": "get_wether", "arguments": {"city": "Oslo"}},  # stage 1, every revision fails stage 2: blocked
    "Lima": {"name": "get_weather", "arguments": {"city": "Lima"}},  # clean: gated, or approved
}
REVISED = {"Paris": {"city": "Paris"}, "Rome": {"city": "Rome"}, "Oslo": {"town": "Oslo"}, "Lima": {"city": "Lima"}}


def _city(request: dict[str, Any]) -> str:
    asked = [m["content"] for m in request["messages"] if m["role"] == "user"]
    return next(c for c in PROPOSED if c in json.dumps(asked))


def _kind(request: dict[str, Any]) -> str:
    if "tools" not in request and "response_format" not in request:
        return "review"
    revising = any(m["role"] == "system" and "Reviewer feedback" in str(m["content"]) for m in request["messages"])
    return "revision" if revising else "base"


def _reply(request: dict[str, Any]) -> Reply:
    city, kind = _city(request), _kind(request)
    if kind == "review":
        tentative = tentative_calls(request)
        return verdict("London" in tentative, f"The user asked about {city}.")
    if kind == "base":
        return Reply(tool_calls=[PROPOSED[city]])
    return Reply(tool_calls=[{"name": "get_weather", "arguments": REVISED[city]}])


def _messages(city: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": f"What's the weather in {city}?"}]


def _dataset(path: Path) -> Path:
    registry = Registry.from_dicts(read_tools(TOOLS))
    write_examples(path, [Example(id=city.lower(), category="runtime", messages=tuple(_messages(city)),
                                  registry=registry, gold=({"get_weather": {"city": [city]}},))
                          for city in PROPOSED])
    return path


def _requests(server: ScriptedOpenAIServer) -> list[tuple[str, str]]:
    """Review and revision requests (what the loop asked), without the server address."""
    out = []
    for request in server.chat_requests:
        body = request.body or {}
        if _kind(body) != "base":
            text = json.dumps({"messages": body.get("messages"), "tools": body.get("tools")}, sort_keys=True)
            out.append((_kind(body), re.sub(r"127\.0\.0\.1[-:]\d+", "HOST", text)))
    return sorted(out)


def _calls(calls: list[dict[str, Any]] | None) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["arguments"]) for c in calls or []]


@pytest.mark.parametrize(("spec", "gate"), [("guard+r2", False), ("gate+guard+r2", True)])
def test_the_guard_runs_the_loop_evaluate_measures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   spec: str, gate: bool) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(_reply) as server:
        result = run_evaluation(EvaluateConfig(
            base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism=spec, retries=0, workers=1,
            dataset=str(_dataset(tmp_path / "weather.jsonl")), runs_dir=tmp_path / "runs", cache_dir=tmp_path / "c"))
        measured = _requests(server)
    finals = {r.example_id: _calls(r.final.calls) for r in result.records if r.condition == spec}

    with ScriptedOpenAIServer(_reply) as server:
        guard = Guard.load("reviewer@v2", reviewer=f"fake@{server.url}", mechanism="guard+r2", gate=gate,
                           cache=False, retries=0)
        assert guard.spec == spec
        decisions = {city.lower(): guard.review(_messages(city), TOOLS, [openai_call(**PROPOSED[city])])
                     for city in PROPOSED}
        deployed = _requests(server)

    assert measured == deployed and {kind for kind, _ in measured} == {"review", "revision"}
    assert finals == {example: _calls(d.calls) for example, d in decisions.items()}
    assert {example: d.action for example, d in decisions.items()} == {
        "paris": "revise", "rome": "revise", "oslo": "block", "lima": "allow"}
    assert finals["paris"] == [("get_weather", {"city": "Paris"})]  # the stage-2 call never ran as proposed
    assert finals["oslo"] == []  # a block is scored as an abstention


def test_plain_r2_executes_the_stage_two_failure_the_guard_never_runs(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(_reply) as server:
        result = run_evaluation(EvaluateConfig(
            base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2", retries=0, workers=1,
            dataset=str(_dataset(tmp_path / "weather.jsonl")), runs_dir=tmp_path / "runs", cache_dir=tmp_path / "c"))
    finals = {r.example_id: _calls(r.final.calls) for r in result.records if r.condition == "r2"}
    assert finals["paris"] == [("get_weather", {"citty": "Paris"})]  # r<N> has no stage 1-2 rule


def test_the_saag_abstain_guard_decides_as_evaluate_scores_it_with_no_llm_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(_reply) as server:
        result = run_evaluation(EvaluateConfig(
            base=f"fake@{server.url}", mechanism="saag+abstain", retries=0, workers=1,
            dataset=str(_dataset(tmp_path / "weather.jsonl")), runs_dir=tmp_path / "runs", cache_dir=tmp_path / "c"))
        assert {_kind(r.body or {}) for r in server.chat_requests} == {"base"}
    finals = {r.example_id: _calls(r.final.calls) for r in result.records if r.condition == "saag+abstain"}

    guard = Guard.load(mechanism="saag+abstain", reviewer="gpt-5-mini", cache=False)  # never opened: no LLM
    assert guard.spec == "saag+abstain" and guard.reviewer is None and guard.reviser is None
    decisions = {city.lower(): guard.review(_messages(city), TOOLS, [openai_call(**PROPOSED[city])])
                 for city in PROPOSED}
    assert finals == {example: _calls(d.calls) for example, d in decisions.items()}
    assert {example: d.action for example, d in decisions.items()} == {
        "paris": "block", "rome": "block", "oslo": "block", "lima": "allow"}
    assert decisions["rome"].reason == "saag+abstain: failed SAAG stage 3" and "London" in decisions["rome"].feedback
    assert decisions["oslo"].reason == "saag+abstain: failed SAAG stage 1"
