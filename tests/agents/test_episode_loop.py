"""The episode loop: turns of steps, every step one Mechanism.run, nothing withheld ever executed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from saag_opt.agents import MechanismContext, NoReview, Verdict, parse_mechanism
from saag_opt.agents.conversation import StepExample, step_position
from saag_opt.agents.episode import MAXIMUM_STEP_LIMIT, run_episode
from saag_opt.agents.mechanisms.base import MechanismOutcome
from saag_opt.episodes import Episode, ToolResult
from saag_opt.model import Example, Prediction, ToolCall, ToolSpec
from saag_opt.testing.episode_agents import DONE, ScriptedStepAgent, calls
from saag_opt.testing.toy_environment import NotesEnvironment, toy_episode
from tests.agents.agent_fakes import FakeReviewer

WRITE = ToolCall("write_note", {"title": "plan", "text": "buy milk"})
READ = ToolCall("read_note", {"title": "plan"})
DELETE = ToolCall("delete_note", {"title": "plan"})


def _episode() -> Episode:
    return toy_episode("notes-1", [["Save a note 'plan' that says buy milk."], ["Read it back."],
                                   ["What is the capital of France?"]],
                       [[WRITE], [READ], []])


@dataclass
class SpyEnvironment(NotesEnvironment):
    """The toy notebook, recording every call it was asked to execute."""

    ran: list[ToolCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        NotesEnvironment.__init__(self)

    def execute(self, calls: Sequence[ToolCall]) -> tuple[ToolResult, ...]:
        self.ran.extend(calls)
        return super().execute(calls)


@dataclass
class SpyMechanism:
    """``none`` that records each step example it is given (to prove there is no second loop)."""

    seen: list[Example] = field(default_factory=list)
    spec: str = "none"

    def run(self, example: Example, agent: object, reviewer: object, *, ctx: MechanismContext) -> MechanismOutcome:
        self.seen.append(example)
        return NoReview().run(example, agent, reviewer, ctx=ctx)  # type: ignore[arg-type]


def _oracle(turn_calls: dict[int, tuple[ToolCall, ...]]) -> ScriptedStepAgent:
    return ScriptedStepAgent(lambda episode, turn, step, fb: calls(*turn_calls.get(turn, ())) if step == 0 else DONE)


def test_each_step_is_one_mechanism_run_on_the_conversation_so_far() -> None:
    env, mechanism = SpyEnvironment(), SpyMechanism()
    outcome = run_episode(_episode(), env, _oracle({0: (WRITE,), 1: (READ,)}), None, mechanism,  # type: ignore[arg-type]
                          MechanismContext())
    assert [len(t.steps) for t in outcome.turns] == [2, 2, 1]  # calls, then the answer; the last turn: answer
    assert len(mechanism.seen) == len(outcome.steps) == 5
    assert [step_position(e.id)[1:] for e in mechanism.seen] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    read_step = mechanism.seen[2]
    assert isinstance(read_step, StepExample) and read_step.gold is None and read_step.expect == "any_call"
    assert [m["role"] for m in read_step.messages] == ["user", "assistant", "system", "assistant", "user"]
    texts = [m["content"] for m in read_step.messages]
    assert texts[1] == 'Called: write_note({"title": "plan", "text": "buy milk"})'
    assert texts[2] == "Tool result (write_note): saved 'plan'" and texts[3] == "Done."
    assert outcome.transcript == (((WRITE,),), ((READ,),), ())
    assert env.check(outcome.transcript).valid


def test_the_cascade_grounds_in_user_turns_and_tool_results() -> None:
    mechanism = SpyMechanism()
    run_episode(_episode(), SpyEnvironment(), _oracle({0: (WRITE,), 1: (READ,)}), None, mechanism,  # type: ignore[arg-type]
                MechanismContext())
    after_read = mechanism.seen[3]
    assert "Read it back." in after_read.query and "buy milk" in after_read.query  # the tool result grounds
    assert "Called:" not in after_read.query and "Done." not in after_read.query  # the agent's own text does not


def test_tools_added_at_a_turn_are_offered_from_that_turn_on() -> None:
    extra = ToolSpec.from_dict({"name": "archive_note", "description": "Archive a note.",
                                "parameters": {"type": "object", "properties": {"title": {"type": "string"}}}})
    episode = toy_episode("notes-2", [["Save it."], ["Archive it."]], [[WRITE], []], added={1: [extra]})
    mechanism = SpyMechanism()
    run_episode(episode, SpyEnvironment(), _oracle({0: (WRITE,)}), None, mechanism, MechanismContext())  # type: ignore[arg-type]
    offered = {step_position(e.id)[1]: e.registry.names for e in mechanism.seen}
    assert "archive_note" not in offered[0] and "archive_note" in offered[1]


def test_the_step_limit_cuts_the_run_off_as_bfcl_does() -> None:
    env = SpyEnvironment()
    always = ScriptedStepAgent(lambda episode, turn, step, fb: calls(READ))
    outcome = run_episode(_episode(), env, always, None, NoReview(), MechanismContext(), max_steps=3)  # type: ignore[arg-type]
    assert len(outcome.turns) == 1 and outcome.cut_off and len(outcome.turns[0].steps) == 4  # 3 + the one over
    assert env.check(outcome.transcript).error_type == "force_terminated"
    assert MAXIMUM_STEP_LIMIT == 20
    with pytest.raises(ValueError, match="max_steps"):
        run_episode(_episode(), env, always, None, NoReview(), MechanismContext(), max_steps=0)  # type: ignore[arg-type]


def test_a_call_the_guard_blocks_is_never_executed() -> None:
    env = SpyEnvironment()
    bad = ToolCall("write_notes", {"title": "plan", "text": "buy milk"})  # stage 1: not a registered function
    agent = ScriptedStepAgent(lambda episode, turn, step, fb: calls(bad) if step == 0 else DONE)
    outcome = run_episode(_episode(), env, agent, FakeReviewer([Verdict(False, "")] * 10), parse_mechanism("guard+r1"),  # type: ignore[arg-type]
                          MechanismContext())
    assert bad not in env.ran and env.ran == []
    first = outcome.turns[0].steps[0]
    assert first.withheld and first.outcome.ruling is not None and first.outcome.ruling.action == "block"
    assert first.results == () and outcome.transcript[0] == ()
    assert len(outcome.turns[0].steps) == 1  # a block ends the turn: the step made no call


def test_a_rejection_revised_into_no_call_withholds_the_call_too() -> None:
    env = SpyEnvironment()
    agent = ScriptedStepAgent(lambda episode, turn, step, fb: DONE if fb or step else calls(DELETE))
    outcome = run_episode(_episode(), env, agent, FakeReviewer([Verdict(True, "Nothing asks to delete.")] * 3),
                          parse_mechanism("r1"), MechanismContext())  # type: ignore[arg-type]
    assert DELETE not in env.ran and all(step.withheld for turn in outcome.turns for step in turn.steps[:1])


def test_a_revision_runs_in_place_of_the_proposal() -> None:
    env = SpyEnvironment()
    wrong = ToolCall("write_note", {"title": "plan", "text": "buy bread"})
    agent = ScriptedStepAgent(lambda episode, turn, step, fb: (calls(WRITE) if fb else calls(wrong)) if step == 0 and
                              turn == 0 else DONE)
    reviewer = FakeReviewer([Verdict(True, "The user said milk."), *[Verdict(False, "")] * 10])
    outcome = run_episode(_episode(), env, agent, reviewer, parse_mechanism("r2"), MechanismContext())  # type: ignore[arg-type]
    step = outcome.turns[0].steps[0]
    assert step.revised and step.executed == (WRITE,) and wrong not in env.ran
    assert outcome.reviewer_calls == len(reviewer.reviewed) == 5  # 2 on the revised step, 1 on each text answer
    assert outcome.agent_calls == 1


def test_a_text_reply_ends_the_turn_and_stays_in_the_conversation() -> None:
    said = Prediction((), raw="I cannot look up capitals.", status="empty")
    agent = ScriptedStepAgent(lambda episode, turn, step, fb: said if turn == 1 else
                              calls(WRITE) if (turn, step) == (0, 0) else DONE)
    mechanism = SpyMechanism()
    episode = toy_episode("notes-3", [["Save it."], ["Capital of France?"], ["And now?"]], [[WRITE], [], []])
    outcome = run_episode(episode, SpyEnvironment(), agent, None, mechanism, MechanismContext())  # type: ignore[arg-type]
    assert len(outcome.turns[1].steps) == 1 and not outcome.turns[1].steps[0].withheld
    assert mechanism.seen[-1].messages[-2:] == ({"role": "assistant", "content": "I cannot look up capitals."},
                                                {"role": "user", "content": "And now?"})


def test_saag_verified_best_of_n_runs_per_step_without_the_selector_when_the_cascade_decides() -> None:
    env, reviewer = SpyEnvironment(), FakeReviewer(index=1)
    outcome = run_episode(_episode(), env, _oracle({0: (WRITE,), 1: (READ,)}), reviewer, parse_mechanism("saag+s2"),
                          MechanismContext())
    assert outcome.transcript == (((WRITE,),), ((READ,),), ()) and env.ran == [WRITE, READ]
    assert reviewer.selections == 0  # calls pass the cascade; "Done." steps: every candidate abstains
    assert all(len(s.outcome.candidates) == 2 and s.outcome.selected == 0 for s in outcome.steps)
    assert [s.outcome.candidates[0].passed for s in outcome.steps] == [True, False, True, False, False]
