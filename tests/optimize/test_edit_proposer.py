"""The edit proposer against the scripted server: the schema it sends, retries, memory; the failure-first sampler."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dspy
import pytest

from saag_opt.lm import open_lm, parse_model_spec
from saag_opt.optimize.acceptance import ReviewerAcceptance
from saag_opt.optimize.edit_proposer import EditMemory, EditProposer, pick_cases
from saag_opt.optimize.feedback import GOLD_LABEL
from saag_opt.optimize.sampler import FailureFirstSampler
from saag_opt.testing.scripted_server import Reply, ScriptedOpenAIServer

PARENT = "You review tool calls and reject a wrong one.\n\nGuidelines:\n- Defaults are fine.\n- Do not be pedantic."
COMPONENT = "reviewer.review"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))


def _item(outcome: str, gold: str = 'get_weather(city=["Paris"])') -> dict[str, Any]:
    feedback = (f"Outcome: {outcome}. Advice.\nBase call: get_weather(city=\"Atlantis\")\n"
                f"Expected (gold, {GOLD_LABEL}): {gold}")
    return {"Inputs": {"conversation": "user: weather in Paris?", "tool_docs": json.dumps([{"name": "get_weather",
            "description": "Weather for a city. Returns JSON."}]), "tentative_calls": '[{"get_weather": {}}]'},
            "Generated Outputs": {"error": False, "feedback": ""}, "Feedback": feedback}


def _proposer(server: ScriptedOpenAIServer, memory: EditMemory | None = None) -> EditProposer:
    lm = open_lm(parse_model_spec(f"fake@{server.url}"), role="reflection")
    return EditProposer(lm, memory)


def _replies(*texts: str) -> Any:
    queue = list(texts)
    return lambda request: Reply(text=queue.pop(0) if len(queue) > 1 else queue[0])


def test_the_request_carries_the_rules_the_failures_and_the_edit_schema() -> None:
    edit = {"op": "add", "rule": 0, "text": "Reject a value the request does not contain."}
    with ScriptedOpenAIServer(_replies(json.dumps(edit))) as server:
        out = _proposer(server)({COMPONENT: PARENT}, {COMPONENT: [_item("kept right"), _item("missed error")]},
                                [COMPONENT])
        (request,) = server.chat_requests
    assert out == {COMPONENT: PARENT + "\n\nAdditional rules:\n- Reject a value the request does not contain."}
    body = request.body
    assert body["response_format"]["json_schema"]["name"] == "rule_edit"
    assert body["response_format"]["json_schema"]["schema"]["properties"]["op"]["enum"] == ["add", "replace", "delete"]
    user = body["messages"][-1]["content"]
    assert "[2] Defaults are fine." in user and "[3] Do not be pedantic." in user
    assert user.index("Outcome: missed error") < user.index("Outcome: kept right")  # failures first
    gold_lines = [line for line in user.splitlines() if '["Paris"]' in line]
    assert gold_lines and all(GOLD_LABEL in line for line in gold_lines)


def test_an_unusable_reply_is_asked_again_and_two_give_no_proposal() -> None:
    good = json.dumps({"op": "replace", "rule": 2, "text": "Defaults for unstated optional parameters are fine."})
    with ScriptedOpenAIServer(_replies("Please provide instructions.", good)) as server:
        out = _proposer(server)({COMPONENT: PARENT}, {COMPONENT: [_item("broken")]}, [COMPONENT])
        assert len(server.chat_requests) == 2
        retry = server.chat_requests[1].body["messages"][-1]["content"]
        assert "- Please provide instructions. (refused: no JSON object in the reply" in retry
    assert out[COMPONENT].splitlines()[3] == "- Defaults for unstated optional parameters are fine."
    with ScriptedOpenAIServer(_replies('{"op": "replace", "rule": 99, "text": "x y z"}')) as server:
        assert _proposer(server)({COMPONENT: PARENT}, {COMPONENT: [_item("broken")]}, [COMPONENT]) == {}


def test_a_refused_edit_is_remembered_shown_and_not_proposed_again(tmp_path: Path) -> None:
    memory = EditMemory(tmp_path / "edit_memory.json")
    same = json.dumps({"op": "delete", "rule": 3, "text": ""})
    other = json.dumps({"op": "add", "rule": 0, "text": "Approve restated values."})
    with ScriptedOpenAIServer(_replies(same)) as server:
        first = _proposer(server, memory)({COMPONENT: PARENT}, {COMPONENT: [_item("broken")]}, [COMPONENT])
    # the acceptance criterion refuses it (here: not better on the minibatch) and tells the memory
    proposal = SimpleNamespace(candidate=first, parent_program_ids=[0], subsample_scores_before=[1.0],
                               subsample_scores_after=[0.0], eval_before=None, eval_after=None)
    state = SimpleNamespace(program_candidates=[{COMPONENT: PARENT}], i=0)
    assert not ReviewerAcceptance("strict", None, memory).should_accept(proposal, state)
    reloaded = EditMemory(tmp_path / "edit_memory.json")  # a resumed run remembers it
    assert [r.changes for r in reloaded.refused(COMPONENT, PARENT)] == [["rule 3 deleted: Do not be pedantic."]]
    with ScriptedOpenAIServer(_replies(same, other)) as server:
        second = _proposer(server, reloaded)({COMPONENT: PARENT}, {COMPONENT: [_item("broken")]}, [COMPONENT])
        prompts = [r.body["messages"][-1]["content"] for r in server.chat_requests]
    assert second == {COMPONENT: PARENT + "\n\nAdditional rules:\n- Approve restated values."}
    assert "rule 3 deleted: Do not be pedantic. (refused: New subsample score" in prompts[0]


def test_a_degenerate_rule_is_asked_again_then_handed_on_for_the_quarantine() -> None:
    bad = json.dumps({"op": "add", "rule": 0, "text": "Please provide more detailed instructions for the reviewer."})
    with ScriptedOpenAIServer(_replies(bad)) as server:
        out = _proposer(server)({COMPONENT: PARENT}, {COMPONENT: [_item("broken")]}, [COMPONENT])
        prompts = [r.body["messages"][-1]["content"] for r in server.chat_requests]
    assert len(prompts) == 2 and "not_a_rule" in prompts[1]  # the second request says why the first was refused
    assert out == {COMPONENT: PARENT + "\n\nAdditional rules:\n- Please provide more detailed instructions for the reviewer."}


def test_cases_put_failures_first_and_keep_at_most_four() -> None:
    items = [_item("kept right"), _item("fixed"), _item("broken"), _item("false alarm"), _item("kept right"),
             _item("missed error")]
    assert [c["Feedback"].split(".")[0] for c in pick_cases(items)] == [
        "Outcome: broken", "Outcome: false alarm", "Outcome: missed error", "Outcome: kept right"]


class _Loader:
    def __init__(self, n: int) -> None:
        self.examples = [dspy.Example(item=SimpleNamespace(id=f"t{i}")).with_inputs("item") for i in range(n)]

    def all_ids(self) -> list[int]:
        return list(range(len(self.examples)))

    def fetch(self, ids: list[int]) -> list[Any]:
        return [self.examples[i] for i in ids]


def _evaluated(loader: _Loader, classes: dict[int, str]) -> dict[str, Any]:
    return {"candidate_idx": 0, "trajectories": [
        {"example": loader.examples[i], "score": dspy.Prediction(score=0.0, outcome_class=cls)}
        for i, cls in classes.items()]}


def test_the_sampler_puts_known_failures_in_every_minibatch_least_recently_shown_first() -> None:
    loader, sampler = _Loader(10), FailureFirstSampler(minibatch_size=4, seed=0)
    state = SimpleNamespace(i=0)
    first = sampler.next_minibatch_ids(loader, state)
    assert len(set(first)) == 4
    sampler.on_evaluation_end(_evaluated(loader, {first[0]: "broken", first[1]: "kept right", first[2]: "missed error"}))
    assert set(sampler.failing) == {first[0], first[2]}
    second = sampler.next_minibatch_ids(loader, state)
    assert set(second[:2]) == {first[0], first[2]} and len(set(second)) == 4
    sampler.on_evaluation_end(_evaluated(loader, {first[0]: "fixed"}))  # a later review got it right
    sampler.on_evaluation_end({**_evaluated(loader, {first[1]: "broken"}), "candidate_idx": None})  # a proposal's
    assert set(sampler.failing) == {first[2]}
    again = FailureFirstSampler(minibatch_size=4, seed=0)
    assert again.next_minibatch_ids(loader, state) == first  # deterministic for a seed


@pytest.mark.e2e
def test_the_embedded_model_answers_an_edit_request_with_a_schema_valid_edit(local_spec: str) -> None:
    """The grammar holds on the real server: whatever the 0.5B writes parses as an edit of the schema."""
    from saag_opt.optimize.edits import EDIT_SCHEMA  # noqa: PLC0415 - only this test needs it

    lm = open_lm(parse_model_spec(local_spec), role="reflection", cache=False)
    proposer = EditProposer(lm, attempts=1)
    items = [_item("missed error"), _item("broken")]
    replies: list[str] = []
    ask = proposer._ask
    proposer._ask = lambda *args: replies.append(ask(*args)) or replies[-1]  # type: ignore[method-assign]
    proposer({COMPONENT: PARENT}, {COMPONENT: items}, [COMPONENT])
    (reply,) = replies
    data = json.loads(reply)
    assert set(data) == set(EDIT_SCHEMA["required"]) and data["op"] in ("add", "replace", "delete")
    assert isinstance(data["rule"], int) and isinstance(data["text"], str)


def test_an_empty_report_note_can_only_get_a_rule_added() -> None:
    edit = {"op": "add", "rule": 0, "text": "Findings about restated values are often false alarms."}
    with ScriptedOpenAIServer(_replies(json.dumps(edit))) as server:
        out = _proposer(server)({"reviewer.report": "(no note)"}, {"reviewer.report": [_item("broken")]},
                                ["reviewer.report"])
        (request,) = server.chat_requests
    assert out == {"reviewer.report": f"- {edit['text']}"}
    assert request.body["response_format"]["json_schema"]["schema"]["properties"]["op"]["enum"] == ["add"]
    assert request.body["messages"][0]["content"].startswith("You maintain the numbered rules of a NOTE")
    assert "(none yet: the report is shown without a note" in request.body["messages"][-1]["content"]


def test_add_only_offers_the_model_nothing_but_a_new_rule() -> None:
    edit = {"op": "add", "rule": 0, "text": "Reject a call that covers only part of a request for several things."}
    with ScriptedOpenAIServer(_replies(json.dumps(edit))) as server:
        lm = open_lm(parse_model_spec(f"fake@{server.url}"), role="reflection")
        out = EditProposer(lm, add_only=True)({COMPONENT: PARENT}, {COMPONENT: [_item("missed error")]}, [COMPONENT])
        (request,) = server.chat_requests
    assert out == {COMPONENT: f"{PARENT}\n\nAdditional rules:\n- {edit['text']}"}
    assert request.body["response_format"]["json_schema"]["schema"]["properties"]["op"]["enum"] == ["add"]
    assert "The existing rules stay as they are." in request.body["messages"][-1]["content"]


def test_a_rule_quoting_a_gold_value_is_refused_before_the_reviewer_could_see_it() -> None:
    leaking = {"op": "add", "rule": 0, "text": "Reject a city that is not Paris."}
    with ScriptedOpenAIServer(_replies(json.dumps(leaking))) as server:
        out = _proposer(server)({COMPONENT: PARENT}, {COMPONENT: [_item("missed error")]}, [COMPONENT])
        prompts = [r.body["messages"][-1]["content"] for r in server.chat_requests]
    assert len(prompts) == 2 and "copies_gold: gold values: 'Paris'" in prompts[1]
    assert "Paris" in out[COMPONENT]  # handed on after the second try: the acceptance criterion quarantines it


def test_a_note_case_shows_the_request_the_call_and_the_report_not_a_verdict() -> None:
    from saag_opt.optimize.edit_proposer import REPORT_LABEL, render_case  # noqa: PLC0415

    item = {"Inputs": {"conversation": "user: weather in Paris?", "tentative_calls": '[{"name": "get_weather"}]',
                       "checks": "call 0: failed at stage 3"},
            "Generated Outputs": {"shown": "- Trust it.\n\ncall 0: failed at stage 3"}, "Feedback": "Outcome: broken."}
    text = render_case(1, item)
    assert "Request: user: weather in Paris?" in text and "Proposed call:" in text
    assert f"{REPORT_LABEL}: call 0: failed at stage 3" in text and "Reviewer answered" not in text
    assert text.startswith("Case 1: the reviewer REJECTED a RIGHT call")


def test_a_resumed_sampler_starts_from_the_failures_gepas_trace_records() -> None:
    loader = _Loader(8)
    ids = list(loader.all_ids())
    trace = [{"i": 0, "tasks": [{"parent_idx": 0, "subsample_ids": [ids[0], ids[2]], "subsample_scores": [0.0, 0.0]}]},
             {"i": 1, "tasks": [{"parent_idx": 0, "subsample_ids": [ids[1]], "subsample_scores": [0.0]}]},
             {"i": 2, "tasks": [{"parent_idx": 1, "subsample_ids": [ids[0], ids[3]], "subsample_scores": [1.0, 1.0]}]}]
    resumed = FailureFirstSampler(minibatch_size=4, seed=0)
    batch = resumed.next_minibatch_ids(loader, SimpleNamespace(i=3, full_program_trace=trace))
    assert resumed.failing == {ids[2]: "wrong", ids[1]: "wrong"}  # ids[0] was right when last seen
    assert batch[:2] == [ids[2], ids[1]]  # half the minibatch: the known failures, least recently shown first
    assert len(set(batch)) == 4  # the rest fresh from the epoch order
    blind = FailureFirstSampler(minibatch_size=4, seed=0)
    blind.next_minibatch_ids(loader, SimpleNamespace(i=3))
    assert blind.failing == {}  # without gepa's trace nothing is known


def test_a_minibatch_of_one_alternates_a_known_failure_with_a_fresh_example_and_a_resume_goes_on() -> None:
    loader = _Loader(6)
    sampler = FailureFirstSampler(minibatch_size=1, seed=0)
    first = sampler.next_minibatch_ids(loader, SimpleNamespace(i=0))
    sampler.on_evaluation_end(_evaluated(loader, {first[0]: "broken"}))
    batches = [sampler.next_minibatch_ids(loader, SimpleNamespace(i=i)) for i in range(1, 5)]
    assert [b == first for b in batches] == [False, True, False, True]  # every other one: the known failure
    fresh = FailureFirstSampler(minibatch_size=3, seed=0)
    order = [fresh.next_minibatch_ids(loader, SimpleNamespace(i=i)) for i in range(2)]
    resumed = FailureFirstSampler(minibatch_size=3, seed=0)
    assert resumed.next_minibatch_ids(loader, SimpleNamespace(i=1)) == order[1]  # not the first minibatch again


def test_the_acceptance_refuses_a_text_already_in_the_pool() -> None:
    proposal = SimpleNamespace(candidate={COMPONENT: PARENT}, parent_program_ids=[0], subsample_scores_before=[0.0],
                               subsample_scores_after=[1.0], eval_before=None, eval_after=None)
    state = SimpleNamespace(program_candidates=[{COMPONENT: "Other rules."}, {COMPONENT: PARENT}], i=3)
    acceptance = ReviewerAcceptance("strict")
    assert not acceptance.should_accept(proposal, state)
    assert acceptance.reject_reason(proposal, state).startswith("already in the pool")
