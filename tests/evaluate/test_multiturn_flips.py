"""The reviewer inside a running BFCL conversation flips entries, both ways, under BFCL's own checkers.

A real ``BaseAgent`` and a real ``Reviewer`` (prompt reviewer@v2) talk to a scripted OpenAI-compatible
server that plays both models: the agent makes each turn's gold calls at step 0 and then answers,
except at a chosen step, where it goes wrong (``mkdir(dir_name='tmp')`` for ``'temp'``); after reviewer
feedback it makes the calls the world says. The environment is BFCL's, so every verdict is
``multi_turn_checker``'s. No LM reply is cached, so every request reaches the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from saag_opt import stopping
from saag_opt.agents import BaseAgent, BasePredictionCache, MechanismContext, make_reviewer, parse_mechanism
from saag_opt.agents.conversation import Conversation
from saag_opt.artifacts import resolve_ref
from saag_opt.cli import app
from saag_opt.data.bfcl_environment import BfclEnvironment, gold_calls
from saag_opt.episodes import Episode, ToolResult
from saag_opt.evaluation.estimate import STEPS_PER_TURN, estimate_episodes, prompt_tokens
from saag_opt.lm import open_lm
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.model import ToolCall
from saag_opt.runfiles import read_run
from saag_opt.testing import Reply, ScriptedOpenAIServer, tentative_calls
from tests.episodes.world import episodes, needs_bfcl
from tests.evaluate.conversation_parts import EntriesRun, run_entries
from tests.runtime.world import verdict

pytestmark = [pytest.mark.integration, needs_bfcl]

REPO = Path(__file__).resolve().parents[2]
WRONG = ToolCall("mkdir", {"dir_name": "tmp"})
RIGHT = ToolCall("mkdir", {"dir_name": "temp"})


def _entry() -> Episode:
    entry = episodes("multi_turn_base")[0]
    assert "mkdir(dir_name='temp')" in entry.gold[0]  # the step this file breaks
    return entry


def _gold(entry: Episode) -> tuple[tuple[ToolCall, ...], ...]:
    return gold_calls(entry)


def _after_last_user(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return list(messages[last + 1:])


@dataclass
class World:
    """What the scripted agent and reviewer do (module docstring)."""

    gold: tuple[tuple[ToolCall, ...], ...]
    agent_wrong: bool = False
    """At turn 0, step 0 the agent proposes WRONG in place of RIGHT."""
    revise_to: ToolCall = RIGHT
    """What the agent puts in place of mkdir after feedback."""
    reject: ToolCall | None = None
    """The reviewer rejects a proposal making this call (and approves everything else)."""
    unknown_function: bool = False
    """At turn 0, step 0 the agent calls a function no backend has, every time (a stage-1 failure)."""
    reviews: int = 0
    proposals: list[tuple[int, int, bool]] = field(default_factory=list)

    def __call__(self, request: dict[str, Any]) -> Reply:
        if "tools" not in request:
            return self.review(request)
        messages = request["messages"]
        turn = sum(m["role"] == "user" for m in messages) - 1
        after = _after_last_user(messages)
        step = sum(m["role"] == "assistant" and str(m["content"]).startswith("Called:") for m in after)
        revising = any(m["role"] == "system" and "Reviewer feedback" in str(m["content"]) for m in after)
        self.proposals.append((turn, step, revising))
        if step > 0 or not self.gold[turn]:
            return Reply(text="Done.")
        calls = list(self.gold[turn])
        if turn == 0 and self.unknown_function:
            calls = [ToolCall("make_directory", {"dir_name": "temp"})]
        elif turn == 0 and (revising or self.agent_wrong):
            swap = self.revise_to if revising else WRONG
            calls = [swap if c == RIGHT else c for c in calls]
        return Reply(tool_calls=[{"name": c.name, "arguments": dict(c.arguments)} for c in calls])

    def review(self, request: dict[str, Any]) -> Reply:
        self.reviews += 1
        tentative = tentative_calls(request)
        hit = self.reject is not None and json.dumps(dict(self.reject.arguments)) in tentative
        return verdict(hit, "The user asked for the directory 'temp'." if hit else "")


class SpyEnvironment:
    """BFCL's environment, recording every call handed to ``execute``."""

    ran: list[ToolCall] = []

    def __init__(self) -> None:
        self.inner = BfclEnvironment()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def execute(self, calls: Sequence[ToolCall]) -> tuple[ToolResult, ...]:
        SpyEnvironment.ran.extend(calls)
        return self.inner.execute(calls)


def _run(world: World, spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
         records: Path | None = None) -> tuple[EntriesRun, ScriptedOpenAIServer]:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    SpyEnvironment.ran = []
    with ScriptedOpenAIServer(world) as server:
        agent = BaseAgent(open_lm(f"fake@{server.url}", role="base", retries=0, cache=False))
        reviewer_lm = open_lm(f"fake@{server.url}", role="reviewer", retries=0, cache=False)
        reviewer = make_reviewer(resolve_ref("reviewer@v2"))
        reviewer.set_lm(reviewer_lm)
        run = run_entries([_entry()], agent=agent, reviewer=reviewer, mechanism=parse_mechanism(spec),
                                ctx=MechanismContext(cache=BasePredictionCache()), reviewer_lm=reviewer_lm,
                                run_id="flip", records_path=records,
                                environment=lambda name: SpyEnvironment())  # type: ignore[arg-type, return-value]
    return run, server


def test_a_reviewer_that_rejects_the_wrong_step_flips_the_entry_to_valid(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _entry()
    world = World(_gold(entry), agent_wrong=True, reject=WRONG)
    run, _ = _run(world, "r2", tmp_path, monkeypatch)
    base, reviewed = run.records
    assert not base.correct and base.judgement is not None
    assert base.judgement.error_type == "multi_turn:instance_state_mismatch" and base.judgement.failed_turn == 0
    assert reviewed.correct and reviewed.judgement is not None and reviewed.judgement.checks["multi_turn_checker"]
    hh = run.summary.help_harm
    assert (hh.fixed, hh.broken, hh.both_right, hh.both_wrong) == (1, 0, 0, 0)
    step = reviewed.turns[0].steps[0]
    assert [r.verdict for r in step.rounds] == ["reject", "approve"] and step.revised
    assert {"name": "mkdir", "arguments": {"dir_name": "temp"}} in step.executed
    assert {"name": "mkdir", "arguments": {"dir_name": "tmp"}} in base.turns[0].steps[0].executed
    counts = run.summary.conversation["r2"]
    assert counts.revised_steps == 1 and counts.withheld_steps == 0 and counts.per_turn[0].revised_steps == 1
    assert (0, 0, True) in world.proposals  # the agent revised with the feedback at the step that went wrong


def test_a_reviewer_that_breaks_a_right_step_flips_it_back_and_harm_is_counted(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(_gold(_entry()), reject=RIGHT, revise_to=WRONG)
    run, _ = _run(world, "r1", tmp_path, monkeypatch)  # r1: the revision after the one rejection runs unreviewed
    base, reviewed = run.records
    assert base.correct and not reviewed.correct
    assert reviewed.judgement is not None and reviewed.judgement.failed_turn == 0
    hh = run.summary.help_harm
    assert (hh.fixed, hh.broken) == (0, 1) and hh.harmfulness == 1.0
    assert WRONG in SpyEnvironment.ran  # the reviewed run executed the broken revision


def test_a_call_the_guard_blocks_is_never_executed_and_never_reaches_the_checker(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(_gold(_entry()), unknown_function=True)
    run, _ = _run(world, "guard+r2", tmp_path, monkeypatch)
    base, reviewed = run.records
    blocked = reviewed.turns[0].steps[0]
    assert blocked.withheld and blocked.ruling is not None and blocked.ruling.startswith("block")
    assert blocked.executed == [] and blocked.results == []
    assert len(reviewed.turns[0].steps) == 1  # the block ended the turn
    proposed = base.turns[0].steps[0]  # the base run handed it to the environment, which refused it (no such
    assert proposed.final.calls == [{"name": "make_directory", "arguments": {"dir_name": "temp"}}]  # function)
    assert [r.executed for r in proposed.results] == [False] and proposed.executed == []
    assert SpyEnvironment.ran.count(ToolCall("make_directory", {"dir_name": "temp"})) == 1  # base only
    assert run.summary.conversation["guard+r2"].withheld_calls == 1
    assert not reviewed.correct and reviewed.judgement is not None
    assert reviewed.judgement.error_type == "multi_turn:empty_turn_model_response"


def test_a_resumed_run_keeps_finished_entries_and_asks_no_model(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    records = tmp_path / "records.jsonl"
    entry = _entry()
    first, _ = _run(World(_gold(entry), agent_wrong=True, reject=WRONG), "r2", tmp_path, monkeypatch,
                    records=records)
    again, server = _run(World(_gold(entry), agent_wrong=True, reject=WRONG), "r2", tmp_path, monkeypatch,
                         records=records)
    assert server.chat_requests == [] and SpyEnvironment.ran == []
    assert again.records == first.records and len(records.read_text().splitlines()) == 2
    assert again.summary.help_harm == first.summary.help_harm


def test_the_cli_evaluates_a_multi_turn_dataset_and_resumes_it_per_entry(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    world = World(_gold(_entry()), agent_wrong=True, reject=WRONG)
    with ScriptedOpenAIServer(world) as server:
        args = ["evaluate", "--dataset", "bfcl:multi_turn_base", "--split", "all", "--limit", "1",
                "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--mechanism", "r2",
                "--retries", "0", "--runs-dir", str(tmp_path / "runs")]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        asked = len(server.chat_requests)
        assert "Valid conversations" in result.output and "Inside the conversations" in result.output
        (run_dir,) = (tmp_path / "runs").iterdir()
        assert run_dir.name.endswith("-evaluate-multiturn")
        run = read_run(run_dir)
        assert run.header.status == "success" and run.summary.help_harm.fixed == 1
        assert [r.condition for r in run.records] == ["base", "r2"] and run.records[1].turns
        assert "Inside the conversations" in (run_dir / "report.html").read_text(encoding="utf-8")
        again = CliRunner().invoke(app, ["evaluate", "--resume", str(run_dir)], env={"COLUMNS": "200"})
        assert again.exit_code == 0, again.output
        assert len(server.chat_requests) == asked  # the finished entry is kept, nothing is asked again
    assert read_run(run_dir).summary == run.summary


def test_dry_run_estimates_conversations_with_their_long_prompts_and_calls_nothing() -> None:
    args = ["evaluate", "--dataset", "bfcl:multi_turn_base", "--split", "all", "--limit", "4", "--base", "gpt-4o",
            "--reviewer", "gpt-4o-mini", "--mechanism", "r2", "--dry-run"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "tool docs" in result.output and "agent steps per user turn" in result.output


def test_the_estimate_grows_with_the_conversation_and_counts_both_runs() -> None:
    entries = episodes("multi_turn_base")[:3]
    r2 = estimate_episodes(entries, base="gpt-4o", reviewer="gpt-4o-mini", mechanism=parse_mechanism("r2"))
    none = estimate_episodes(entries, base="gpt-4o", reviewer=None, mechanism=parse_mechanism("none"))
    steps = sum(len(e.turns) for e in entries) * STEPS_PER_TURN
    assert none.roles["base"].calls == steps  # the `none` run's steps are the base run's, from the cache
    assert r2.roles["base"].calls >= 2 * steps  # a base run and a reviewed run of every step, plus revisions
    assert r2.roles["base"].calls > none.roles["base"].calls and r2.roles["reviewer"].calls >= steps
    one = estimate_episodes(entries[:1], base="gpt-4o", reviewer=None, mechanism=parse_mechanism("none"))
    per_call = one.roles["base"].prompt_tokens / one.roles["base"].calls
    first_step = prompt_tokens([_first_step(entries[0])])
    assert per_call > first_step > 1000  # the tool docs alone are long; the history makes later steps longer
    assert r2.roles["base"].dollars > 0 and r2.roles["reviewer"].dollars > 0


def _first_step(entry: Episode) -> Any:
    conversation = Conversation(entry.id)
    conversation.user(entry.turns[0].messages)
    return conversation.step(0, 0, entry.tools_at(0), entry.category)


def per_entry_handler(entries: Sequence[Episode]) -> Callable[[dict[str, Any]], Reply]:
    """One flips World per entry (told apart by its first user message): entry 0 starts wrong, the reviewer rejects that."""
    worlds = {str(e.turns[0].messages[0]["content"]): World(_gold(e), agent_wrong=i == 0, reject=WRONG)
              for i, e in enumerate(entries)}

    def handler(request: dict[str, Any]) -> Reply:
        if "tools" not in request:
            return next(iter(worlds.values())).review(request)
        first = next(m for m in request["messages"] if m["role"] == "user")
        return worlds[str(first["content"])](request)

    return handler


def test_entries_run_in_parallel_and_records_keep_episode_order(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    entries = episodes("multi_turn_base")[:4]
    handler = per_entry_handler(entries)
    records = tmp_path / "records.jsonl"
    with ScriptedOpenAIServer(handler) as server:
        agent = BaseAgent(open_lm(f"fake@{server.url}", role="base", retries=0, cache=False))
        reviewer_lm = open_lm(f"fake@{server.url}", role="reviewer", retries=0, cache=False)
        reviewer = make_reviewer(resolve_ref("reviewer@v2"))
        reviewer.set_lm(reviewer_lm)
        run = run_entries(entries, agent=agent, reviewer=reviewer, mechanism=parse_mechanism("r2"),
                                ctx=MechanismContext(cache=BasePredictionCache()), reviewer_lm=reviewer_lm,
                                run_id="par", records_path=records, workers=3)
    assert [(r.example_id, r.condition) for r in run.records] == [(e.id, c) for e in entries for c in ("base", "r2")]
    written = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["example_id"], r["condition"]) for r in written] == [(r.example_id, r.condition) for r in run.records]
    assert run.summary.help_harm.fixed == 1 and run.summary.n_episodes == 4
    assert all(r.correct for r in run.records[2:])  # the other entries replay their gold in both conditions


def test_a_spent_cost_cap_starts_no_further_entry(tmp_path: Path) -> None:
    spent = SpendCap(0.01, spent=0.01)  # an earlier attempt spent it all
    world = World(_gold(_entry()))
    with ScriptedOpenAIServer(world) as server:
        agent = BaseAgent(f"fake@{server.url}")
        run = run_entries([_entry()], agent=agent, reviewer=None, mechanism=parse_mechanism("none"),
                                ctx=MechanismContext(cache=BasePredictionCache()), run_id="cap",
                                records_path=tmp_path / "records.jsonl", cap=spent)
        assert server.chat_requests == []
    assert run.records == [] and run.stopped_by is not None and run.summary.stopped == spent.message()
    assert "--max-cost $0.01 reached" in run.summary.stopped


def test_a_requested_stop_starts_no_further_entry(tmp_path: Path) -> None:
    world = World(_gold(_entry()))
    stopping.request_stop()
    try:
        with ScriptedOpenAIServer(world) as server:
            run = run_entries([_entry()], agent=BaseAgent(f"fake@{server.url}"), reviewer=None,
                                    mechanism=parse_mechanism("none"), ctx=MechanismContext(cache=BasePredictionCache()),
                                    run_id="stop", records_path=tmp_path / "records.jsonl", workers=2)
            assert server.chat_requests == []
    finally:
        stopping.reset()
    assert run.records == [] and run.summary.stopped == "stop requested" and run.stopped_by is None
