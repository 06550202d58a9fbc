"""``saag+s<N>`` end to end on the scripted server: the cascade picks without the reviewer when it can,
the selector decides when no candidate passes, and the mechanism can end in an abstention."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from saag_opt.compare.run import CompareConfig, run_compare
from saag_opt.data import load_dataset
from saag_opt.data.perturb import gold_calls
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.results import ExampleRecord, read_run
from saag_opt.model import Example
from saag_opt.report.html import render_report
from saag_opt.saag import check_calls
from saag_opt.saag.modes import INTERVENTION_GROUNDING
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.evaluate.scripted_replies import chat, right, wrong

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET = "shipped:bfcl"
UNKNOWN = Reply(tool_calls=[{"name": "no_such_function", "arguments": {}}])
"""A call SAAG stage 1 fails (no such function in any registry)."""


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


SPLIT, LIMIT = "test", 16


def _verifiable(ex: Example) -> bool:
    """The right answer is a call the blind cascade passes (calibrated grounding, as the mechanism checks it)."""
    return ex.expect != "no_call" and bool(check_calls(gold_calls(ex), ex.registry, ex.query,
                                                       grounding=INTERVENTION_GROUNDING).passed)


Base = Callable[[Example, float], Reply]


def _run(tmp_path: Path, base: Base, select: str) -> tuple[dict[str, ExampleRecord], dict[str, list[str]]]:
    """Evaluate ``saag+s2``: ``base(example, temperature)`` is the agent, ``select`` every selector reply.

    Returns the mechanism's records and the selector requests' texts, by example id.
    """
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    asked: defaultdict[str, list[str]] = defaultdict(list)

    def world(request: dict) -> Reply:
        text = "\n".join(str(m.get("content")) for m in request["messages"])
        example = max((ex for ex in examples if ex.query in text), key=lambda ex: len(ex.query))
        if "tools" in request:
            return base(example, float(request.get("temperature") or 0.0))
        asked[example.id].append(request["messages"][-1]["content"])
        return chat({"index": select})

    with ScriptedOpenAIServer(world) as server:
        config = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                mechanism="saag+s2", dataset=DATASET, split=SPLIT, limit=LIMIT, workers=2,
                                runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache", retry_base_delay=0.01)
        run_dir = run_evaluation(config).run_dir
    run = read_run(run_dir)
    assert run.header.plugins["mechanism"]["spec"] == "saag+s2"
    records = {r.example_id: r for r in run.records if r.condition == "saag+s2"}
    assert len(records) == len(examples)
    return records, asked


def _ids(keep: Callable[[Example], bool]) -> list[str]:
    out = [ex.id for ex in load_dataset(DATASET, split=SPLIT, limit=LIMIT) if keep(ex)]
    assert len(out) >= 2
    return out


def test_a_wrong_first_candidate_and_a_right_second_the_second_wins_without_the_reviewer(tmp_path: Path) -> None:
    records, asked = _run(tmp_path, lambda ex, t: right(ex) if t > 0.5 else UNKNOWN, select="0")
    for key in _ids(_verifiable):
        record = records[key]
        assert key not in asked and record.reviewer_calls == 0
        assert record.correct and record.selected == 1
        assert [(c.temperature, c.passed) for c in record.candidates] == [(0.3, False), (1.0, True)]
        assert "first the SAAG cascade passes" in record.notes[0]
    html = render_report([next((tmp_path / "runs").iterdir())])  # the report's candidate list shows them
    assert '"score":null,"passed":false' in html and '"score":null,"passed":true' in html


def test_none_passes_the_selector_picks(tmp_path: Path) -> None:
    records, asked = _run(tmp_path, lambda ex, t: UNKNOWN if t < 0.5 else wrong(ex), select="1")
    for key in _ids(lambda ex: ex.expect != "no_call"):  # candidate 1 answers in text: an abstention
        record = records[key]
        assert len(asked[key]) == 1 and record.reviewer_calls == 1 and record.selected == 1
        assert [c.passed for c in record.candidates] == [False, False] and not record.final.calls


def test_the_selector_is_offered_no_call_and_choosing_it_ends_in_an_abstention(tmp_path: Path) -> None:
    records, asked = _run(tmp_path, lambda ex, t: UNKNOWN, select="2")  # index 2 = "(no function call)"
    for key in _ids(lambda ex: ex.expect == "no_call"):  # irrelevance: no call is correct
        record = records[key]
        assert len(asked[key]) == 1 and record.correct and record.selected is None and not record.final.calls
        assert "chose no call" in record.notes[0]
        assert "[1] " in asked[key][0] and "[2] (no function call)" in asked[key][0]
    assert not any(r.correct for r in records.values() if r.example_id not in _ids(lambda ex: ex.expect == "no_call"))


def test_every_candidate_abstaining_is_an_abstention_without_the_reviewer(tmp_path: Path) -> None:
    records, asked = _run(tmp_path, lambda ex, t: Reply(text="No function applies."), select="0")
    assert not asked
    assert all(r.selected == 0 and r.reviewer_calls == 0 and not r.final.calls for r in records.values())
    assert all(records[key].correct for key in _ids(lambda ex: ex.expect == "no_call"))



def test_compare_s2_with_saag_s2_shares_the_candidates_and_pairs_the_runs(tmp_path: Path) -> None:
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)

    def world(request: dict) -> Reply:  # the selector always picks candidate 0: the stage-1 failure
        text = "\n".join(str(m.get("content")) for m in request["messages"])
        example = max((ex for ex in examples if ex.query in text), key=lambda ex: len(ex.query))
        if "tools" in request:
            return right(example) if float(request.get("temperature") or 0.0) > 0.5 else UNKNOWN
        return chat({"index": "0"})

    with ScriptedOpenAIServer(world) as server:
        runs = []
        for mechanism in ("s2", "saag+s2"):
            config = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                    mechanism=mechanism, dataset=DATASET, split=SPLIT, limit=LIMIT, workers=2,
                                    runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache", retry_base_delay=0.01)
            before = sum("tools" in r.body for r in server.chat_requests)
            runs.append(run_evaluation(config).run_dir)
            agent_requests = sum("tools" in r.body for r in server.chat_requests) - before
        assert agent_requests == 0  # saag+s2 replays s2's candidates from the base-prediction cache
    summary = run_compare(CompareConfig(a=str(runs[0]), b=str(runs[1]), runs_dir=tmp_path / "runs")).summary
    verifiable = sum(_verifiable(ex) for ex in examples)
    assert summary.matched == len(examples) and summary.paired.b_only_right == verifiable >= 2
    assert summary.paired.a_only_right == 0
