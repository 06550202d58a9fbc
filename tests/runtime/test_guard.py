"""Guard decisions against a scripted reviewer/reviser server: the gate, the stage 1-2 rule,
revisions, on_error, timeouts, bad input and the review cache."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletionMessage

from saag_opt.artifacts import PromptStore, export_version
from saag_opt.errors import ArtifactError, ConfigError
from saag_opt.lm import parse_model_spec
from saag_opt.lm.retry import LMCallError
from saag_opt.runtime import Decision, Guard
from saag_opt.runtime.guard import _is_timeout
from saag_opt.runtime.prompt import load_prompt
from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer
from tests.runtime.world import MESSAGES, TOOLS, ReviewWorld, openai_call

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


@pytest.fixture
def world() -> Iterator[tuple[ReviewWorld, ScriptedOpenAIServer]]:
    w = ReviewWorld()
    with ScriptedOpenAIServer(w) as server:
        yield w, server


def guard_for(server: ScriptedOpenAIServer, **options: object) -> Guard:
    options = {"cache": False, "retries": 0, **options}
    return Guard.load("reviewer@v2", reviewer=f"fake@{server.url}", **options)  # type: ignore[arg-type]


def test_gate_allows_a_clean_call_without_an_llm_call(world) -> None:
    w, server = world
    decision = guard_for(server).review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Paris"})])
    assert decision.action == "allow" and not decision.reviewed
    assert decision.calls == [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert decision.report["passed"] is True and "gate" in decision.reason
    assert server.chat_requests == []
    assert Decision.from_dict(json.loads(decision.to_json())) == decision


def test_the_gate_reviews_a_call_with_nothing_from_the_request(world) -> None:
    """Invented numbers for a request without digits pass stage 3 as assumptions; the gate wants a value it found."""
    w, server = world
    volume = {"type": "function", "function": {"name": "set_volume", "parameters": {
        "type": "object", "properties": {"level": {"type": "integer"}}, "required": ["level"]}}}
    listing = {"type": "function", "function": {"name": "list_cities", "parameters": {"type": "object", "properties": {}}}}
    decision = guard_for(server).review(MESSAGES, [*TOOLS, volume, listing], [openai_call("set_volume", {"level": 7})])
    assert decision.report["passed"] is True and decision.reviewed and w.reviews == 1
    decision = guard_for(server).review(MESSAGES, [*TOOLS, volume, listing], [openai_call("list_cities", {})])
    assert decision.action == "allow" and not decision.reviewed and "gate" in decision.reason  # nothing to find
    assert w.reviews == 1


def test_without_the_gate_the_reviewer_judges_clean_calls_too(world) -> None:
    w, server = world
    decision = guard_for(server, gate=False).review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Paris"})])
    assert decision.action == "allow" and decision.reviewed and w.reviews == 1


def test_stage_two_failure_is_revised_even_when_the_reviewer_approves(world) -> None:
    w, server = world
    w.error = False  # the reviewer misses it; the structure rule does not
    decision = guard_for(server).review(MESSAGES, TOOLS, [openai_call("get_weather", {"citty": "Paris"}, "c7")])
    assert decision.action == "revise"
    assert decision.calls == [{"id": "c7", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert "`city` for `citty`" in decision.feedback
    assert decision.report["stage_reached"] == 2 and decision.revision_report["passed"] is True
    assert w.reviews == 1 and w.revisions == 1
    revision_request = [r.body for r in server.chat_requests if "tools" in r.body][0]
    system = [m["content"] for m in revision_request["messages"] if m["role"] == "system"]
    assert any("Reviewer feedback" in s and "`city` for `citty`" in s for s in system)


def test_reviewer_rejection_of_a_well_formed_call_is_revised(world) -> None:
    w, server = world
    w.error, w.feedback = True, "The user asked about Paris, not London."
    decision = guard_for(server).review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "London"})])
    assert decision.action == "revise" and decision.reviewed
    assert decision.calls[0]["arguments"] == {"city": "Paris"}
    assert decision.feedback == "The user asked about Paris, not London."
    assert [r["verdict"] for r in decision.rounds] == ["reject"]


def test_reviewer_approval_of_an_ungrounded_call_allows_it(world) -> None:
    w, server = world
    decision = guard_for(server).review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "London"})])
    assert decision.action == "allow" and decision.reviewed and decision.report["stage_reached"] == 3


def test_a_revision_that_still_fails_stage_one_or_two_is_blocked(world) -> None:
    w, server = world
    w.revision = [{"name": "get_weather", "arguments": {"town": "Paris"}}]
    decision = guard_for(server).review(MESSAGES, TOOLS, [openai_call("get_wether", {"city": "Paris"})])
    assert decision.action == "block" and decision.calls is None
    assert "revision failed SAAG stage 2" in decision.reason
    assert "`get_weather`" in decision.feedback  # psi1 of the proposal: the nearest registered name


def test_a_revision_without_a_call_is_blocked(world) -> None:
    w, server = world
    w.error, w.revision = True, None
    decision = guard_for(server).review(MESSAGES, TOOLS, [openai_call("send_email", {"to": "a@b.c", "body": "hi"})])
    assert decision.action == "block" and "makes no call" in decision.reason


def test_revise_false_blocks_with_the_feedback(world) -> None:
    w, server = world
    w.error, w.feedback = True, "Wrong city."
    decision = guard_for(server, revise=False).review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Rome"})])
    assert decision.action == "block" and decision.feedback == "Wrong city." and w.revisions == 0


def test_r2_reviews_the_revision_again(world) -> None:
    w, server = world
    w.error = True
    decision = guard_for(server, mechanism="r2").review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Rome"})])
    assert w.reviews == 2 and w.revisions == 2
    assert decision.action == "revise" and [r["verdict"] for r in decision.rounds] == ["reject", "reject"]


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("on_error", ["allow", "block"])
def test_dead_reviewer_server_follows_on_error(on_error: str) -> None:
    guard = Guard.load("reviewer@v2", reviewer=f"fake@{_dead_url()}", on_error=on_error, cache=False, retries=0)
    decision = guard.review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "London"})])
    assert decision.action == on_error and not decision.reviewed
    assert "connection refused" in decision.error and f"on_error={on_error}" in decision.reason


def test_dead_server_never_lets_a_stage_two_failure_through() -> None:
    guard = Guard.load("reviewer@v2", reviewer=f"fake@{_dead_url()}", on_error="allow", cache=False, retries=0)
    decision = guard.review(MESSAGES, TOOLS, [openai_call("get_weather", {"town": "Paris"})])
    assert decision.action == "block" and "failed SAAG stage 2" in decision.reason
    assert "Missing required" in decision.feedback


def test_reviewer_timeout_follows_on_error(world) -> None:
    w, server = world
    w.reviewer_reply = Reply(text="late", delay=5.0)
    guard = guard_for(server, timeout=0.5, on_error="block")
    start = time.perf_counter()
    decision = guard.review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "London"})])
    assert time.perf_counter() - start < 2.0
    assert decision.action == "block" and "timed out after 0.5 s" in decision.error
    guard.close()


def test_unusable_reviewer_reply_follows_on_error(world) -> None:
    w, server = world
    w.reviewer_reply = Reply(text="I think it is probably fine?")
    decision = guard_for(server, on_error="allow").review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Rome"})])
    assert decision.action == "allow" and decision.error and "unusable reviewer reply" in decision.error


def test_malformed_arguments_never_run() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    decision = guard.review(MESSAGES, TOOLS, [openai_call("get_weather", '{"city": "Paris"')])
    assert decision.action == "block" and "stage 2" in decision.reason
    assert "JSON object" in decision.feedback


def test_unknown_tool_is_blocked_by_a_cascade_only_guard() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    decision = guard.review(MESSAGES, TOOLS, [{"name": "get_wheather", "arguments": {"city": "Paris"}}])
    assert decision.action == "block" and "`get_weather`" in decision.feedback


@pytest.mark.parametrize(("tools", "calls", "expected"), [
    ("not a list", [openai_call("get_weather", {"city": "Paris"})], "tools must be a list"),
    ([{"type": "function", "function": {"description": "x"}}], [], "tools[0] has no function name"),
    (TOOLS, [{"id": "x", "function": {"arguments": "{}"}}], "tool_calls[0] has no function name"),
    (TOOLS, [42], "tool_calls[0] is not an object"),
    ([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                                                                             "properties": ["city"]}}}],
     [openai_call("get_weather", {"city": "Paris"})], "'properties' must be an object of parameter schemas"),
    ([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                                                                             "properties": {"city": "string"}}}}],
     [openai_call("get_weather", {"city": "Paris"})], "parameter 'city' must be a schema object"),
    ([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city", "country"]}}}],
     [openai_call("get_weather", {"city": "Paris"})], "required parameter(s) 'country' not declared"),
])
def test_bad_input_is_a_block_with_a_clear_reason(tools, calls, expected) -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    decision = guard.review(MESSAGES, tools, calls)
    assert decision.action == "block" and expected in decision.reason and expected in decision.feedback


def test_no_calls_is_allowed_without_review(world) -> None:
    w, server = world
    decision = guard_for(server).review(MESSAGES, TOOLS, [])
    assert decision.action == "allow" and decision.calls == [] and server.chat_requests == []


def test_reviews_are_cached_by_prompt_messages_and_calls(world, tmp_path: Path) -> None:
    w, server = world
    w.error = True
    call = [openai_call("get_weather", {"city": "Rome"})]
    first = guard_for(server, cache=tmp_path).review(MESSAGES, TOOLS, call)
    again = guard_for(server, cache=tmp_path).review(MESSAGES, TOOLS, call)  # a new process would do the same
    assert w.reviews == 1 and again.cached and again.cost_usd == 0.0
    assert (again.action, again.calls, again.feedback) == (first.action, first.calls, first.feedback)
    other = guard_for(server, cache=tmp_path).review(MESSAGES + [{"role": "user", "content": "Quickly please."}], TOOLS, call)
    assert not other.cached and w.reviews == 2


def test_errors_are_not_cached(world) -> None:
    w, server = world
    guard = guard_for(server, on_error="allow")
    server.inject([Fault(500)])
    call = [openai_call("get_weather", {"city": "Rome"})]
    assert guard.review(MESSAGES, TOOLS, call).error
    retry = guard.review(MESSAGES, TOOLS, call)
    assert retry.error is None and retry.reviewed and not retry.cached


def test_areview_matches_review(world) -> None:
    w, server = world
    w.error = True
    guard = guard_for(server)
    decision = asyncio.run(guard.areview(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Rome"})]))
    assert decision.action == "revise" and decision.calls[0]["arguments"] == {"city": "Paris"}


def test_openai_client_objects_are_accepted(world) -> None:
    w, server = world
    message = ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [
        openai_call("get_weather", {"city": "Paris"})]})
    decision = guard_for(server).review(MESSAGES, TOOLS, message.tool_calls)
    assert decision.action == "allow" and decision.calls[0]["id"] == "call_1"


def test_tool_results_ground_arguments(world) -> None:
    w, server = world
    history = [{"role": "user", "content": "Email my manager that I am late."},
               {"role": "assistant", "content": None, "tool_calls": [openai_call("lookup", {}, "c0")]},
               {"role": "tool", "tool_call_id": "c0", "content": "manager: ann@example.com"}]
    tools = TOOLS + [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    call = [openai_call("send_email", {"to": "ann@example.com", "body": "I am late"})]
    decision = guard_for(server).review(history, tools, call)
    assert decision.action == "allow" and not decision.reviewed


def test_cost_is_priced_per_decision_from_the_usage_of_its_calls() -> None:
    guard = Guard(models={"openai/gpt-4o-mini": parse_model_spec("gpt-4o-mini")})
    assert guard._dollars({"openai/gpt-4o-mini": {"prompt_tokens": 1000, "completion_tokens": 100}}) > 0
    assert guard._dollars({"openai/unknown": {"prompt_tokens": 1000}}) == 0


@pytest.mark.parametrize("name", ["prompt.txt", "v9.json"])
def test_a_prompt_file_that_is_not_utf8_is_an_artifact_error(name: str, tmp_path: Path) -> None:
    """It used to escape as a UnicodeDecodeError."""
    path = tmp_path / name
    path.write_bytes("Review the call. Réponse: ".encode("latin-1"))

    with pytest.raises(ArtifactError, match=rf"{name}: cannot read prompt"):
        load_prompt(path)


@pytest.mark.parametrize(("fmt", "name"), [("txt", "p.txt"), ("dspy", "p.json"), ("openai", "p.json"),
                                           ("mlflow", "p.json"), ("json", "p.json")])
def test_an_exported_prompt_file_works(fmt: str, name: str, tmp_path: Path) -> None:
    version = PromptStore(REPO / "prompts").resolve("reviewer@v2")
    path = tmp_path / name
    path.write_text(export_version(version, fmt), encoding="utf-8")
    loaded = load_prompt(path)
    assert loaded.instructions == dict(version.instructions)
    assert loaded.sha256 == version.sha256


def test_prompt_and_mechanism_errors_are_clear(tmp_path: Path) -> None:
    md = tmp_path / "p.md"
    md.write_text("# reviewer\n", encoding="utf-8")
    with pytest.raises(ArtifactError, match="md export is for reading"):
        Guard.load(md, reviewer="fake")
    with pytest.raises(ArtifactError, match="reviewer@nope"):
        Guard.load("reviewer@nope", reviewer="fake")
    with pytest.raises(ConfigError, match="r<N>, gate\\+r<N>, none or saag\\+abstain"):
        Guard.load(reviewer="fake", mechanism="s3")
    with pytest.raises(ConfigError, match="on_error"):
        Guard.load(reviewer=None, mechanism="none", on_error="maybe")  # type: ignore[arg-type]


def test_gate_decisions_read_and_serialise_as_if_built_eagerly() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    decision = guard.review(MESSAGES, TOOLS, [openai_call("get_weather", {"town": "Paris"})])
    clone = pickle.loads(pickle.dumps(decision))
    assert clone == decision == copy.deepcopy(decision)
    assert clone.feedback and "Missing required" in clone.feedback and clone.report["stage_reached"] == 2
    assert json.loads(decision.to_json())["report"]["calls"][0]["missing_required"] == ["city"]


def test_a_tools_list_is_converted_once_until_it_changes() -> None:
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    tools = [dict(t) for t in TOOLS]
    call = [openai_call("get_weather", {"city": "Paris"})]
    guard.review(MESSAGES, tools, call)
    first = guard.registries.get(tools)[1]
    guard.review(MESSAGES, tools, call)
    assert guard.registries.get(tools)[1] is first
    tools[0] = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"town": {"type": "string"}}, "required": ["town"]}}}
    decision = guard.review(MESSAGES, tools, call)  # a replaced definition is seen
    assert decision.action == "block" and "`town`" in decision.feedback


def test_grounding_defaults_to_calibrated_and_decides_the_gate() -> None:
    """A schema default not spelled in the request is a false alarm for the paper's stage 3 only."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "default": "celsius"}}}}}]
    call = [openai_call("get_weather", {"city": "Paris", "unit": "celsius"})]
    default = Guard.load(reviewer=None, mechanism="none", cache=False)
    paper = Guard.load(reviewer=None, mechanism="none", grounding="paper", cache=False)
    assert default.config["grounding"] == "calibrated" and paper.config["grounding"] == "paper"
    assert default.review(MESSAGES, tools, call).report["passed"] is True
    assert paper.review(MESSAGES, tools, call).report["passed"] is False
    with pytest.raises(ConfigError, match="grounding must be one of paper, calibrated"):
        Guard.load(reviewer=None, mechanism="none", grounding="verbatim")


def test_saag_informed_reviewer_sees_the_cascade_report(world) -> None:
    w, server = world
    guard_for(server, saag_informed=True).review(MESSAGES, TOOLS, [openai_call("get_weather", {"city": "London"})])
    review = next(r.body for r in server.chat_requests if "tools" not in r.body)
    assert "saag_report" in json.dumps(review["messages"]) and "failed at stage 3" in json.dumps(review["messages"])


@pytest.mark.parametrize(("grounding", "shown"), [("paper", "failed at stage 3"), ("calibrated", "call 0: passed")])
def test_the_informed_reviewer_sees_the_report_of_the_guards_grounding(world, grounding: str, shown: str) -> None:
    """It used to see the calibrated report whatever ``grounding`` said (the paper test fails this call)."""
    w, server = world
    guard_for(server, saag_informed=True, grounding=grounding, gate=False).review(
        MESSAGES, TOOLS, [openai_call("get_weather", {"city": "Paris, France"})])
    review = json.dumps(next(r.body for r in server.chat_requests if "tools" not in r.body)["messages"])
    assert "saag_report" in review and shown in review


def test_a_client_timeout_reads_as_the_decision_timeout() -> None:
    """The LM client's own bound equals the guard's, so either may fire first: one message for both."""
    try:
        try:
            raise TimeoutError("read timed out")
        except TimeoutError as inner:
            raise LMCallError("reviewer: gave up after 3 attempts", attempts=3) from inner
    except LMCallError as exc:
        wrapped = exc
    guard = Guard.load(reviewer=None, mechanism="none", timeout=0.5, cache=False)
    assert _is_timeout(wrapped) and not _is_timeout(ValueError("bad reply"))
    assert guard._why(wrapped) == "review timed out after 0.5 s"
    assert guard._why(ValueError("bad reply")) == "ValueError: bad reply"


@pytest.mark.parametrize("path", ["inline", "pool", "async"])
def test_latency_counts_a_review_replayed_from_the_lm_cache_at_its_original_time(world, path: str) -> None:
    w, server = world
    server.latency = 0.3
    call = [openai_call("get_weather", {"city": f"Paris-{path}"})]
    options = {"gate": False, **({} if path == "inline" else {"timeout": 10.0})}

    def decide() -> Decision:
        guard = guard_for(server, **options)  # no decision cache: only the LM cache replays
        return asyncio.run(guard.areview(MESSAGES, TOOLS, call)) if path == "async" else guard.review(
            MESSAGES, TOOLS, call)

    first = decide()
    made = len(server.chat_requests)
    again = decide()
    assert made >= 1 and len(server.chat_requests) == made and not again.cached
    assert first.latency_s >= 0.3
    # The replay counts the review's original time (>= the server latency; ~0 s before), and only once.
    assert 0.3 <= again.latency_s <= first.latency_s + 0.3
