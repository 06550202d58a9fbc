"""Abstention end to end on the scripted server, for every mechanism: on BFCL irrelevance the base agent
calls a tool, the reviewer (dspy, real prompts) finds that no function fits, and the run ends in no call,
which the truth check scores correct; on the relevant examples of the same run nothing changes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from saag_opt.agents.base import REVISION_INSTRUCTION
from saag_opt.agents.mechanisms.verified import verified
from saag_opt.data import load_dataset
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.results import ExampleRecord, read_run
from saag_opt.model import Example, ToolCall
from saag_opt.saag import check_calls
from saag_opt.saag.modes import INTERVENTION_GROUNDING
from saag_opt.testing import Reply, ScriptedOpenAIServer, ScriptedWorld
from saag_opt.testing.scripted_world import BaseRequest, GradeRequest, Request, ReviewRequest, SelectRequest
from tests.evaluate.scripted_replies import right

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 16
NO_FIT = "No available function fits the request; do not call any function."
MECHANISMS = ("saag", "binary", "r1", "r2", "s2", "g2", "guard+r1", "guard+r2", "saag+s2", "saag+abstain", "gate+r1",
              "gate+g2")


def invented_arguments(example: Example) -> dict[str, Any]:
    """A value the request does not state for every parameter of the first tool."""
    return {param: "zzz-invented" for param in example.registry[0].properties}


def invented(example: Example) -> Reply:
    tool = example.registry[0]
    return Reply(tool_calls=[{"name": tool.safe_name, "arguments": invented_arguments(example)}])


def vouched(example: Example) -> bool:
    """The cascade vouches for the invented call: a gate passes it, ``saag+s<N>`` trusts it (none here, we check)."""
    call = ToolCall(example.registry[0].name, invented_arguments(example))
    return check_calls([call], example.registry, example.query, grounding=INTERVENTION_GROUNDING).vouched


class World(ScriptedWorld):
    """Base agent: right on relevant examples; on irrelevance an invented call, no call once it has feedback.
    Reviewer: approves calls on relevant examples and, on irrelevance, finds that no function fits."""

    def __init__(self, examples: list[Example]) -> None:
        super().__init__()
        self.examples = examples

    def _example(self, request: Request) -> Example:
        return max((ex for ex in self.examples if ex.query in request.text), key=lambda ex: len(ex.query))

    def base(self, request: BaseRequest) -> Reply:
        example = self._example(request)
        if example.expect != "no_call":
            return right(example)
        return Reply(text="No function applies.") if request.revising else invented(example)

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        no_fit = self._example(request).expect == "no_call"
        calls = "(no function call)" not in request.tentative_calls
        return no_fit and calls, NO_FIT if no_fit and calls else "Fine."

    def select(self, request: SelectRequest) -> int:
        option = re.search(r"\[(\d+)\] \(no function call\)", request.candidates)
        return int(option.group(1)) if self._example(request).expect == "no_call" and option else 0

    def grade(self, request: GradeRequest) -> tuple[float, str]:
        calls = "(no function call)" not in request.candidate
        return (0.0 if calls == (self._example(request).expect == "no_call") else 1.0), "scripted"


@dataclass
class Runs:
    """Mechanism -> condition (``base``, the mechanism) -> example id -> record; the revision requests' bodies."""

    records: dict[str, dict[str, dict[str, ExampleRecord]]]
    revisions: list[str]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("abstention")
    examples = load_dataset(DATASET, split=SPLIT, limit=LIMIT)
    records: dict[str, dict[str, dict[str, ExampleRecord]]] = {}
    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer(World(examples)) as server:
        patch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
        patch.setenv("OPENAI_API_KEY", "sk-test")
        for mechanism in MECHANISMS:
            config = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v2",
                                    mechanism=mechanism, dataset=DATASET, split=SPLIT, limit=LIMIT, workers=2,
                                    runs_dir=tmp / "runs", cache_dir=tmp / "cache", retry_base_delay=0.01)
            run = read_run(run_evaluation(config).run_dir)
            records[mechanism] = {cond: {r.example_id: r for r in run.records if r.condition == cond}
                                  for cond in ("base", mechanism)}
        bodies = [json.dumps(request.body) for request in server.chat_requests]
    return Runs(records, [body for body in bodies if "Reviewer feedback" in body])


def _irrelevant() -> list[Example]:
    found = [ex for ex in load_dataset(DATASET, split=SPLIT, limit=LIMIT) if ex.expect == "no_call"]
    assert len(found) >= 2 and not any(vouched(ex) for ex in found)
    return found


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_mechanism_turns_the_call_into_a_correct_abstention(runs: Runs, mechanism: str) -> None:
    records = runs.records[mechanism]
    for example in _irrelevant():
        base, final = records["base"][example.id], records[mechanism][example.id]
        assert base.final.calls and not base.correct  # the base agent called a tool
        assert not final.final.calls and final.correct, (mechanism, example.id, final.notes)


@pytest.mark.parametrize("mechanism", [m for m in MECHANISMS if m != "saag+abstain"])
def test_no_relevant_example_is_broken(runs: Runs, mechanism: str) -> None:
    records = runs.records[mechanism]
    relevant = [key for key in records["base"] if key not in {ex.id for ex in _irrelevant()}]
    assert len(relevant) >= 8
    assert all(records[mechanism][key].correct == records["base"][key].correct for key in relevant)
    assert all(records[mechanism][key].final.calls for key in relevant)


def test_abstain_breaks_exactly_the_right_calls_the_cascade_cannot_verify(runs: Runs) -> None:
    """Its price, counted as harm: a right call with a value not written as the request writes it is withheld."""
    records = runs.records["saag+abstain"]
    relevant = [ex for ex in load_dataset(DATASET, split=SPLIT, limit=LIMIT) if ex.expect != "no_call"]
    unverified = {ex.id for ex in relevant if not verified(check_calls(
        records["base"][ex.id].final.calls, ex.registry, ex.query, grounding=INTERVENTION_GROUNDING))}
    assert unverified  # this sample holds one (parallel_multiple_55: "homemade_spaghetti" for "healthy spaghetti")
    broken = {ex.id for ex in relevant if records["base"][ex.id].correct and not records["saag+abstain"][ex.id].correct}
    assert broken == unverified
    assert all(not records["saag+abstain"][key].final.calls for key in broken)


def test_the_loops_stop_at_the_abstention(runs: Runs) -> None:
    for example in _irrelevant():
        final = {mechanism: runs.records[mechanism][mechanism][example.id] for mechanism in MECHANISMS}
        assert final["guard+r2"].reviewer_calls == 1  # not re-reviewed as a stage-1 failure
        assert final["saag"].agent_calls == 2  # psi, then the abstention is asked about once
        assert final["r2"].reviewer_calls == 2  # the abstaining revision is reviewed and approved
        assert final["g2"].reviewer_calls == 3  # two candidates and the no-call option
        assert final["s2"].selected is None and "chose no call" in final["s2"].notes[0]
        assert final["saag+abstain"].reviewer_calls == final["saag+abstain"].agent_calls == 0
        assert list(final["saag+abstain"].notes) == ["withheld: failed SAAG stage 3"]  # "zzz-invented" is in no request
    assert runs.revisions and all(json.dumps(REVISION_INSTRUCTION)[1:-1] in body for body in runs.revisions)
