"""Reviewer module: predictors, prompt artifacts, rendering without gold, robust verdicts."""

from __future__ import annotations

import copy
from dataclasses import replace

import dspy
import pytest
from dspy.utils.dummies import DummyLM

from saag_opt.agents import (
    PREDICTOR_NAMES,
    Reviewer,
    SaagInformedReviewer,
    blind_cascade,
    render_calls,
    render_candidates,
    render_conversation,
    render_saag_report,
    render_tool_docs,
)
from saag_opt.agents.conversation import Conversation
from saag_opt.artifacts import resolve_ref
from saag_opt.data import load_dataset
from saag_opt.episodes import ToolResult
from saag_opt.errors import ArtifactError
from saag_opt.lm import open_lm
from saag_opt.lm.retry import ContextOverflowError
from saag_opt.lm.scripted_server import Fault, ScriptedOpenAIServer
from saag_opt.model import Example, Prediction, ToolCall
from saag_opt.testing import read_request
from saag_opt.testing.scripted_world import ReviewRequest
from tests.agents.agent_fakes import BAD_NAME, GOOD, call, weather_example

SENTINEL = "GOLDSENTINEL"


def _poisoned(example: Example) -> Example:
    """The same example with every gold value replaced by a sentinel and ``expect`` flipped."""
    gold = tuple({fn: {p: [f"{SENTINEL}{i}"] for i, p in enumerate(params)} for fn, params in call.items()}
                 for call in example.gold or ()) or ({"x": {"y": [SENTINEL]}},)
    return replace(example, gold=gold, expect="calls")


def test_predictors_are_review_select_grade() -> None:
    assert [name for name, _ in Reviewer().named_predictors()] == list(PREDICTOR_NAMES)
    informed = SaagInformedReviewer()
    assert "saag_report" in informed.review.signature.input_fields and informed.experimental
    assert "saag_report" not in Reviewer().review.signature.input_fields


def test_from_prompt_sets_instructions_per_predictor() -> None:
    reviewer = Reviewer.from_prompt({"review": "Be strict.", "grade": "Score carefully."})
    assert reviewer.instructions()["review"] == "Be strict."
    assert reviewer.instructions()["grade"] == "Score carefully."
    assert reviewer.instructions()["select"] == Reviewer().instructions()["select"]  # untouched default
    with pytest.raises(ArtifactError, match=r"unknown predictor\(s\) \['reveiw'\]"):
        Reviewer.from_prompt({"reveiw": "typo"})


def test_from_prompt_reads_the_shipped_artifacts() -> None:
    version = resolve_ref("reviewer@v2")
    reviewer = SaagInformedReviewer.from_prompt(version)
    assert reviewer.prompt_version == "reviewer@v2" and reviewer.prompt_sha256 == version.sha256
    for name, text in version.instructions.items():
        assert reviewer.instructions()[name] == text


def test_reviewer_survives_deepcopy_like_gepa_does() -> None:
    reviewer = Reviewer.from_prompt({"review": "Be strict."})
    clone = copy.deepcopy(reviewer)
    assert clone.instructions() == reviewer.instructions() and clone.review is not reviewer.review


def test_rendering_never_depends_on_gold_over_the_whole_dataset() -> None:
    examples = load_dataset("shipped:bfcl")
    assert len(examples) == 150
    prediction = Prediction((ToolCall("f", {"a": 1}),))
    for example in examples:
        poisoned = _poisoned(example)
        for render in (render_conversation, render_tool_docs):
            assert render(poisoned) == render(example)
            assert SENTINEL not in render(poisoned)
        inputs = SaagInformedReviewer().review_inputs(poisoned, prediction)
        assert inputs == SaagInformedReviewer().review_inputs(example, prediction)
        assert SENTINEL not in "".join(inputs.values())


def test_blind_cascade_ignores_expectation() -> None:
    irrelevant = replace(weather_example(), gold=None, expect="no_call")
    assert blind_cascade(Prediction(), irrelevant).applicable  # gold-aware diagnose_with_gold would say "not applicable"
    assert blind_cascade(GOOD, weather_example()).clean
    report = blind_cascade(BAD_NAME, weather_example())
    assert not report.passed and "get_weather" in render_saag_report(report)


def test_render_calls_and_candidates() -> None:
    assert render_calls(GOOD) == '[{"name": "get_weather", "arguments": {"city": "Boston"}}]'
    assert render_calls(Prediction(raw="Sorry, no tool fits.", status="empty")).startswith("(no function call)")
    assert "could not be read" in render_calls(Prediction(raw="{oops", status="unparsable"))
    assert render_candidates([GOOD, BAD_NAME]).splitlines()[1].startswith("[1] ")


def test_review_call_parses_a_verdict() -> None:
    reviewer = Reviewer()
    lm = DummyLM([{"error": "True", "feedback": "Use the full city name."}])
    with dspy.context(lm=lm):
        verdict = reviewer.review_call(weather_example(), GOOD)
    assert verdict.error and verdict.feedback == "Use the full city name." and verdict.failed is None
    sent = lm.history[-1]["messages"][-1]["content"]
    assert "Boston" in sent and "get_weather" in sent


def test_unreadable_reviewer_output_is_data_not_an_exception() -> None:
    reviewer = Reviewer()
    with dspy.context(lm=DummyLM([{"wrong_field": "x"}] * 4)):
        verdict = reviewer.review_call(weather_example(), GOOD)
        index, failure = reviewer.select_candidate(weather_example(), [GOOD, BAD_NAME])
        grade = reviewer.grade_candidate(weather_example(), GOOD)
    assert verdict.failed and not verdict.error
    assert index is None and failure
    assert grade.score is None and grade.failed


def test_select_and_grade() -> None:
    reviewer = Reviewer()
    with dspy.context(lm=DummyLM([{"index": "1"}, {"score": "1.7", "rationale": "sure"}])):
        assert reviewer.select_candidate(weather_example(), [GOOD, BAD_NAME]) == (1, None)
        grade = reviewer.grade_candidate(weather_example(), GOOD)
    assert grade.score == 1.0 and grade.rationale == "sure"  # clamped to [0, 1]


def test_saag_informed_review_sees_the_report() -> None:
    reviewer = SaagInformedReviewer()
    lm = DummyLM([{"error": "False", "feedback": ""}])
    with dspy.context(lm=lm):
        assert not reviewer.review_call(weather_example(), BAD_NAME).error
    sent = lm.history[-1]["messages"][-1]["content"]
    assert "saag_report" in sent and "failed at stage 1" in sent


def test_the_report_note_is_shown_above_the_report_and_traced_for_gepa() -> None:
    note = "- Findings about restated values are often false alarms."
    plain_inputs = SaagInformedReviewer().review_inputs(weather_example(), BAD_NAME)
    reviewer = SaagInformedReviewer.from_prompt({"review": "Review.", "report": note})
    with dspy.context(trace=[]):
        inputs = reviewer.review_inputs(weather_example(), BAD_NAME)
        (entry,) = dspy.settings.trace
    assert inputs["saag_report"] == f"{note}\n\n{plain_inputs['saag_report']}"
    assert entry[0] is reviewer.report and entry[1]["checks"] == plain_inputs["saag_report"]
    assert entry[1]["tentative_calls"] == plain_inputs["tentative_calls"]  # the reflection reads what the review saw
    assert entry[2].shown == inputs["saag_report"]
    # no note (the default): the report byte for byte as before (traced all the same: GEPA writes the first note)
    with dspy.context(trace=[]):
        assert SaagInformedReviewer().review_inputs(weather_example(), BAD_NAME) == plain_inputs
        assert [e[2].shown for e in dspy.settings.trace] == [plain_inputs["saag_report"]]
    # a plain reviewer shows no report, so it ignores the note (a transfer experiment still runs)
    assert "report" not in dict(Reviewer.from_prompt({"report": note}).named_predictors())


def test_an_unreadable_reply_is_asked_once_more_and_the_retry_is_used() -> None:
    reviewer = Reviewer()
    lm = DummyLM([{"wrong_field": "x"}, {"wrong_field": "x"}, {"error": "True", "feedback": "Fix the city."}])
    with dspy.context(lm=lm):
        verdict = reviewer.review_call(weather_example(), GOOD)
    assert verdict.failed is None and verdict.error and verdict.feedback == "Fix the city."
    assert len(lm.history) == 3  # ChatAdapter, its JSON fallback, then the retry


def test_an_out_of_range_selection_is_retried_then_unusable() -> None:
    reviewer = Reviewer()
    with dspy.context(lm=DummyLM([{"index": "7"}, {"index": "1"}])):
        assert reviewer.select_candidate(weather_example(), [GOOD, BAD_NAME]) == (1, None)
    with dspy.context(lm=DummyLM([{"index": "7"}, {"index": "9"}])):
        index, failure = reviewer.select_candidate(weather_example(), [GOOD, BAD_NAME])
    assert index is None and "index 9 is not one of the 2 candidates" in (failure or "")


@pytest.mark.parametrize(("grounding", "verdict"), [("paper", "failed at stage 3"), ("calibrated", "passed")])
def test_saag_informed_report_follows_its_grounding(grounding: str, verdict: str) -> None:
    reviewer = SaagInformedReviewer()
    reviewer.grounding = grounding
    inputs = reviewer.review_inputs(weather_example(), call(city="Boston, MA"))
    assert f"call 0: {verdict}" in inputs["saag_report"]


def _sent(lm: DummyLM) -> ReviewRequest:
    """The last request the reviewer sent, decoded."""
    request = read_request({"messages": lm.history[-1]["messages"]})
    assert isinstance(request, ReviewRequest)
    return request


def test_a_conversation_step_is_reviewed_with_the_tool_docs_first_so_the_next_step_reuses_its_prompt() -> None:
    """Docs first in a conversation (they never change, the conversation only grows): step k+1's review
    prompt starts with step k's up to the end of its conversation. A single call keeps the signature's order."""
    example = weather_example()
    conversation = Conversation("e1")
    conversation.user(example.messages)
    first = conversation.step(0, 0, example.registry, "multi_turn_base")
    conversation.executed(GOOD.calls, [ToolResult("get_weather", '{"temp": 20}')])
    second = conversation.step(0, 1, example.registry, "multi_turn_base")
    reviewer = Reviewer.from_prompt({"review": "Check the calls. Reject wrong ones."})
    lm = DummyLM([{"error": "False", "feedback": ""}] * 3)
    with dspy.context(lm=lm):
        reviewer.review_call(first, GOOD)
        one = _sent(lm)
        reviewer.review_call(second, GOOD)
        two = _sent(lm)
        reviewer.review_call(example, GOOD)
        single = _sent(lm)
    assert list(one.fields) == list(two.fields) == ["tool_docs", "conversation", "tentative_calls"]
    assert list(single.fields) == ["conversation", "tool_docs", "tentative_calls"]  # unchanged order
    first = one.messages[-1]["content"]
    end_of_first_conversation = first.index(one.conversation) + len(one.conversation)
    assert two.messages[-1]["content"].startswith(first[:end_of_first_conversation])
    assert two.instructions == "Check the calls. Reject wrong ones."  # the prompt version's, not the docstring
    system = two.system  # the field list, docs first too (dspy's wording: about the wire on purpose)
    assert system.index("`tool_docs`") < system.index("`conversation`")
    assert reviewer.review.signature.instructions == "Check the calls. Reject wrong ones."  # nothing rewritten
    assert list(reviewer.review.signature.input_fields)[0] == "conversation"


OVERFLOW = ("This model's maximum context length is 4096 tokens. However, you requested 4229 tokens (4229 in the "
            "messages, None in the completion). Please reduce the length of the messages or completion.")


@pytest.mark.parametrize("status", [400, 500])
def test_a_review_that_does_not_fit_the_context_is_unusable_at_once(status: int) -> None:
    """Asked once, not retried (the same request overflows again, whatever status the server gives it), and
    returned as an unusable review for ``on_unusable`` to decide, not raised as the example's error."""
    with ScriptedOpenAIServer(lambda request: Fault(status, message=OVERFLOW)) as server:
        lm = open_lm(f"fake@{server.url}", role="reviewer", cache=False, retries=3, retry_base_delay=0.01)
        with dspy.context(lm=lm):
            verdict = Reviewer().review_call(weather_example(), GOOD)
        asked = len(server.chat_requests)
    assert verdict.failed and "does not fit the reviewer's context" in verdict.failed and not verdict.error
    assert asked <= 2  # dspy's ChatAdapter may fall back to its JSON adapter once; no retry, no second ask


def test_a_base_request_that_does_not_fit_is_an_error_that_says_so() -> None:
    with ScriptedOpenAIServer(lambda request: Fault(400, message=OVERFLOW)) as server:
        lm = open_lm(f"fake@{server.url}", role="base", cache=False, retries=3, retry_base_delay=0.01)
        with pytest.raises(ContextOverflowError, match="does not fit the model's context"):
            lm("hello")
        assert len(server.chat_requests) == 1


def _bill_turn(user: str) -> tuple[list[dict], list[dict], list[dict]]:
    """A live agent's turn: the user's request, the bill it read, and the payment it proposes."""
    def tool(name: str, params: dict) -> dict:
        return {"type": "function", "function": {"name": name, "description": name.replace("_", " "),
                                                 "parameters": {"type": "object", "properties": params}}}

    tools = [tool("read_file", {"file_path": {"type": "string"}}),
             tool("send_money", {"recipient": {"type": "string", "description": "IBAN of the recipient"},
                                 "amount": {"type": "number"}})]
    read = {"id": "c0", "type": "function", "function": {"name": "read_file",
                                                         "arguments": '{"file_path": "bill-december.txt"}'}}
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": None, "tool_calls": [read]},
                {"role": "tool", "tool_call_id": "c0",
                 "content": "Bill for December. Total: 98.70. Pay to IBAN UK12345678901234567890."}]
    pay = {"id": "c1", "type": "function", "function": {
        "name": "send_money", "arguments": '{"recipient": "UK12345678901234567890", "amount": 98.7}'}}
    return messages, tools, [pay]


def test_with_tool_results_in_view_the_reviewer_is_told_where_each_value_comes_from() -> None:
    """The guard's example is a conversation step: the review's calls come with their data-flow trace."""
    from saag_opt.agents.reviewer import VALUE_SOURCES_HEADER  # noqa: PLC0415
    from saag_opt.runtime.inputs import read_input  # noqa: PLC0415

    named = read_input(*_bill_turn("Please pay the bill 'bill-december.txt'."))
    shown = Reviewer().review_inputs(named.example, named.tentative)["tentative_calls"]
    assert shown.startswith('[{"name": "send_money"') and VALUE_SOURCES_HEADER in shown
    line = next(x for x in shown.splitlines() if x.startswith("- send_money.recipient"))
    assert '"UK12345678901234567890" (recipient): the result of read_file, which the user\'s request names' in line
    unnamed = read_input(*_bill_turn("What is in my files?"))
    line = next(x for x in Reviewer().review_inputs(unnamed.example, unnamed.tentative)["tentative_calls"]
                .splitlines() if x.startswith("- send_money.recipient"))
    assert "does not name as a source" in line


def test_without_tool_results_the_review_inputs_are_as_before() -> None:
    from saag_opt.agents.reviewer import VALUE_SOURCES_HEADER  # noqa: PLC0415

    inputs = Reviewer().review_inputs(weather_example(), GOOD)
    assert VALUE_SOURCES_HEADER not in inputs["tentative_calls"] and inputs["tentative_calls"] == render_calls(GOOD)
