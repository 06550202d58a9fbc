"""Conversation records and numbers: every step kept, help/harm per entry, abstention on its own, failures kept."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from saag_opt import stopping
from saag_opt.agents import BasePredictionCache, MechanismContext, Verdict, parse_mechanism
from saag_opt.errors import ModelUnavailableError
from saag_opt.evaluation.conversation_records import (
    EpisodeRecord,
    EpisodeSummary,
    StepRecord,
    TurnRecord,
    repeated_steps,
    summarise_episodes,
)
from saag_opt.evaluation.results import CallRecord
from saag_opt.model import Prediction, ToolCall
from saag_opt.report.evaluate_tables import conversation_table
from saag_opt.runfiles import read_rows
from saag_opt.testing.episode_agents import DONE, ScriptedStepAgent, calls
from saag_opt.testing.toy_environment import toy_episode
from tests.agents.agent_fakes import FakeReviewer
from tests.evaluate.conversation_parts import run_entries

WRITE = ToolCall("write_note", {"title": "plan", "text": "buy milk"})
BREAD = ToolCall("write_note", {"title": "plan", "text": "buy bread"})
READ = ToolCall("read_note", {"title": "plan"})


def _episodes() -> list:
    """e1: the agent writes bread (wrong); e2: it writes milk (right); both end with an abstention turn."""
    turns = [["Save 'plan': buy milk."], ["Read it."], ["Book me a flight."]]
    return [toy_episode(f"e{i}", turns, [[WRITE], [READ], []]) for i in (1, 2)]


def _agent(*, calls_at_abstention: bool = False) -> ScriptedStepAgent:
    def script(episode: str, turn: int, step: int, feedback: int) -> Prediction:
        if step > 0:
            return DONE
        if turn == 0:
            return calls(WRITE if feedback or episode == "e2" else BREAD)
        if turn == 1:
            return calls(READ)
        return calls(READ) if calls_at_abstention and not feedback else DONE
    return ScriptedStepAgent(script)


class BreadReviewer(FakeReviewer):
    """Rejects the bread note, approves everything else."""

    def review_call(self, example, prediction):  # noqa: ANN001, ANN201
        self.reviewed.append(prediction)
        bad = BREAD in prediction.calls or (READ in prediction.calls and "Book me a flight." in example.query.split(
            "\n")[-1])
        return Verdict(bad, "Not what the user asked." if bad else "")


def _run(tmp_path: Path | None = None, *, agent: ScriptedStepAgent | None = None, spec: str = "r2", **kw):  # noqa: ANN003, ANN202
    return run_entries(_episodes(), agent=agent or _agent(), reviewer=BreadReviewer(),  # type: ignore[arg-type]
                             mechanism=parse_mechanism(spec), ctx=MechanismContext(cache=BasePredictionCache()),
                             run_id="t", records_path=tmp_path / "records.jsonl" if tmp_path else None, **kw)


def test_help_harm_per_entry_and_the_conversation_counts() -> None:
    run = _run()
    summary = run.summary
    assert [(r.example_id, r.condition, r.correct) for r in run.records] == [
        ("e1", "base", False), ("e1", "r2", True), ("e2", "base", True), ("e2", "r2", True)]
    assert (summary.help_harm.fixed, summary.help_harm.broken, summary.help_harm.both_right) == (1, 0, 1)
    assert summary.base.accuracy == 0.5 and summary.reviewed.accuracy == 1.0 and summary.n_episodes == 2
    base, reviewed = summary.conversation["base"], summary.conversation["r2"]
    assert (base.turns, base.steps, base.executed_calls, base.revised_steps) == (6, 10, 4, 0)
    assert reviewed.revised_steps == 1 and reviewed.per_turn[0].revised_steps == 1
    assert base.per_turn[0].passed == 1 and base.per_turn[1].passed == 1 and reviewed.per_turn[2].passed == 2
    assert (base.abstain_turns, base.abstained, base.abstention_rate) == (2, 2, 1.0)
    e1 = run.records[0]
    assert e1.judgement is not None and e1.judgement.failed_turn == 0 and e1.judgement.abstain_turns == [2]
    assert [t.abstain for t in e1.turns] == [False, False, True]


def test_abstention_turns_are_counted_on_their_own() -> None:
    run = _run(agent=_agent(calls_at_abstention=True))
    base, reviewed = run.summary.conversation["base"], run.summary.conversation["r2"]
    assert (base.abstain_turns, base.abstained) == (2, 0)  # the base agent called at both abstention turns
    assert reviewed.abstained == 2 and reviewed.withheld_steps == 2 and reviewed.withheld_calls == 2
    hh = run.summary.abstention_help_harm
    assert hh is not None and (hh.fixed, hh.broken, hh.n) == (2, 0, 2)
    assert all(not r.correct for r in run.records if r.condition == "base")


def test_records_keep_every_step_and_read_back(tmp_path: Path) -> None:
    run = _run(tmp_path)
    rows = read_rows(tmp_path / "records.jsonl", EpisodeRecord)
    assert rows == run.records
    step = rows[1].turns[0].steps[0]
    assert step.proposed.calls == [BREAD.to_dict()] and step.final.calls == [WRITE.to_dict()]
    assert [r.verdict for r in step.rounds] == ["reject", "approve"] and step.rounds[0].feedback
    assert step.executed == [WRITE.to_dict()] and step.results[0].content == "saved 'plan'"
    assert rows[1].turns[1].steps[0].results[0].content == "buy milk"


def test_an_entry_that_fails_is_an_error_record_and_the_run_goes_on() -> None:
    def script(episode: str, turn: int, step: int, feedback: int) -> Prediction:
        if episode == "e1":
            raise RuntimeError("the server said no")
        return _agent().script(episode, turn, step, feedback)

    run = _run(agent=ScriptedStepAgent(script))
    assert [r.error is not None for r in run.records] == [True, True, False, False]
    assert run.records[0].error == "RuntimeError: the server said no" and not run.records[0].correct
    assert run.summary.errors == 1 and run.summary.help_harm.n == 1


def test_a_model_that_is_gone_stops_the_run_and_the_finished_entries_stay(tmp_path: Path) -> None:
    def script(episode: str, turn: int, step: int, feedback: int) -> Prediction:
        if episode == "e2":
            raise ModelUnavailableError("the server is gone")
        return _agent().script(episode, turn, step, feedback)

    with pytest.raises(ModelUnavailableError):
        _run(tmp_path, agent=ScriptedStepAgent(script))
    assert [r.example_id for r in read_rows(tmp_path / "records.jsonl", EpisodeRecord)] == ["e1", "e1"]
    resumed = _run(tmp_path)  # resume at entry granularity: e1 is kept, e2 runs
    assert [r.example_id for r in resumed.records] == ["e1", "e1", "e2", "e2"]
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 4


def test_a_stop_request_ends_the_run_at_an_entry_boundary() -> None:
    stopping.request_stop()
    try:
        run = _run()
    finally:
        stopping.reset()
    assert run.records == [] and run.summary.stopped == "stop requested"


def test_a_resume_drops_the_lone_row_of_an_entry_cut_in_half(tmp_path: Path) -> None:
    first = _run(tmp_path)
    path = tmp_path / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n")  # e2's reviewed row never made it
    again = _run(tmp_path)
    rows = read_rows(path, EpisodeRecord)
    assert [(r.example_id, r.condition) for r in rows] == [("e1", "base"), ("e1", "r2"), ("e2", "base"), ("e2", "r2")]
    assert [(r.correct, [s.executed for t in r.turns for s in t.steps]) for r in again.records] == [
        (r.correct, [s.executed for t in r.turns for s in t.steps]) for r in first.records]


def _step(turn: int, index: int, *executed: ToolCall) -> StepRecord:
    ran = [{"name": c.name, "arguments": c.arguments} for c in executed]
    return StepRecord(turn=turn, index=index, proposed=CallRecord(calls=ran), final=CallRecord(calls=ran), executed=ran)


def test_a_step_repeats_when_it_runs_a_call_its_turn_already_ran() -> None:
    """The loop the 1.5B fell into on BFCL multi-turn (pwd, ls, pwd, ls, ...), counted from the records."""
    same_args_other_order = ToolCall("write_note", {"text": "buy milk", "title": "plan"})
    turn = TurnRecord(index=0, steps=[_step(0, 0, READ), _step(0, 1, WRITE), _step(0, 2, READ),
                                      _step(0, 3, same_args_other_order, BREAD), _step(0, 4, BREAD), _step(0, 5)])
    assert repeated_steps(turn) == 3  # steps 2, 3 and 4; step 5 ran nothing
    assert repeated_steps(TurnRecord(index=1, steps=[_step(1, 0, READ)])) == 0  # a new turn starts afresh


def test_the_conversation_counts_count_repeats_per_condition() -> None:
    def script(episode: str, turn: int, step: int, feedback: int) -> Prediction:
        if turn == 1 and step < 2:
            return calls(READ)  # reads the note twice in one turn
        return _agent().script(episode, turn, step, feedback)
    run = _run(agent=ScriptedStepAgent(script))
    assert run.summary.conversation["base"].repeated_steps == 2  # one repeat in each entry


def test_a_summary_written_before_repeats_were_counted_reads_back_and_shows_a_dash() -> None:
    data = _run().summary.model_dump(mode="json")
    for counts in data["conversation"].values():
        del counts["repeated_steps"]
    console = Console(record=True, width=200)
    console.print(conversation_table(EpisodeSummary.model_validate(data)))
    row = next(line for line in console.export_text().splitlines() if "repeating a call" in line)
    assert [cell.strip() for cell in row.split("│")[2:4]] == ["-", "-"]


def _entry(entry: str, condition: str, *gated: bool, error: str | None = None) -> EpisodeRecord:
    steps = [_step(0, i).model_copy(update={"gated": g}) for i, g in enumerate(gated)]
    return EpisodeRecord(run_id="t", example_id=entry, category="toy", condition=condition, error=error,
                         turns=[TurnRecord(index=0, steps=steps)])


def test_the_gated_share_of_a_conversation_run_counts_steps_not_entries() -> None:
    """A gate that passes 2 of 4 steps saved 2 reviews, though no entry went without one; errors are left out."""
    pairs = [(_entry("e1", "base", False, False, False), _entry("e1", "gate+r2", True, False, True)),
             (_entry("e2", "base", False), _entry("e2", "gate+r2", False)),
             (_entry("e3", "base", False), _entry("e3", "gate+r2", True, True, error="boom"))]
    assert summarise_episodes("t", "gate+r2", pairs, experimental=True, gated=True).gated_share == 0.5
    assert summarise_episodes("t", "r2", pairs, experimental=False, gated=False).gated_share is None
    no_steps = [(_entry("e1", "base"), _entry("e1", "gate+r2"))]
    assert summarise_episodes("t", "gate+r2", no_steps, experimental=True, gated=True).gated_share is None


def test_each_step_of_a_conversation_is_an_event_between_finished_entries() -> None:
    """A long conversation (a tau2 task: minutes on a small model) shows it is moving, step by step."""
    from saag_opt.report.live import STEP_LINE_EVERY, EvaluationLines  # noqa: PLC0415

    events: list[Any] = []
    run = _run(on_event=events.append)
    steps = [e for e in events if e.kind == "step"]
    base = run.summary.conversation["base"].steps
    reviewed = run.summary.conversation["r2"].steps
    assert len(steps) == base + reviewed  # one per step of either condition
    e1_base = [e.data["steps"] for e in steps if e.data["entry"] == "e1" and e.data["condition"] == "base"]
    assert e1_base == list(range(1, len(e1_base) + 1))
    assert steps[0].message == "e1 (base): step 1"
    lines = EvaluationLines(lambda event: None, Console(file=io.StringIO()))
    shown = [lines.line(e) for e in steps if lines.line(e) is not None]
    assert all(e.data["steps"] % STEP_LINE_EVERY == 0 for e in steps if lines.line(e) is not None)
    assert len(shown) == sum(e.data["steps"] % STEP_LINE_EVERY == 0 for e in steps)
