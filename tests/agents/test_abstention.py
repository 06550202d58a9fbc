"""Abstention across the mechanisms: when the reviewer finds that no function fits, every mechanism can
end in no call (which BFCL's truth check scores correct on irrelevance), and the same machinery keeps a
right call on a relevant example."""

from __future__ import annotations

import pytest

from saag_opt.agents import (
    BINARY_FEEDBACK,
    Grade,
    MechanismContext,
    SaagInformedReviewer,
    Verdict,
    mechanism_names,
    parse_mechanism,
    render_saag_report,
)
from saag_opt.agents.base import REVISION_INSTRUCTION, BaseAgent, FeedbackTurn
from saag_opt.agents.mechanisms.base import NO_CALL
from saag_opt.agents.mechanisms.repair import NO_CALL_FEEDBACK
from saag_opt.agents.reviewer import NO_CALL_REPORT, UNANCHORED_NOTE, blind_cascade
from saag_opt.model import Example, Prediction, Registry, ToolSpec
from saag_opt.saag.truth import check_truth
from saag_opt.testing.contracts.mechanism import DECLINED, NO_FIT, ContentReviewer, NoFitReviewer
from tests.agents.agent_fakes import GOOD, WEATHER, FakeAgent, FakeReviewer, NeverCalledReviewer, call, weather_example

ADD = ToolSpec.from_dict({"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}})


def irrelevant(text: str, *tools: ToolSpec) -> Example:
    """A BFCL-irrelevance-shaped example: no available function fits, so the right answer is no call."""
    return Example(id="irr", category="irrelevance", messages=({"role": "user", "content": text},),
                   registry=Registry(list(tools) or [WEATHER]), expect="no_call")


MOBY = irrelevant("Who wrote the novel Moby-Dick?")
INVENTED = call(city="London")
"""A call to the one tool with a value the request does not state: stage 3 fails it."""
BOSTON_HISTORY = irrelevant("When was Boston founded?")
GROUNDED = call(city="Boston")
"""A call to a function that fits nothing, with a value from the request: the cascade vouches for it."""
MONA_LISA = irrelevant("Who painted the Mona Lisa?", ADD)
ASSUMED = call("add", a=2, b=3)
"""Numbers for a request without digits are assumptions: stage 3 passes it, with nothing from the request."""

REVIEWED = [form.replace("<N>", "2") for form in mechanism_names(reviewer_only=True)]
EVERY = [form.replace("<N>", "2") for form in mechanism_names()]


def talked_out_of(first: Prediction) -> FakeAgent:
    """Proposes ``first`` (at every temperature) until it gets feedback, then makes no call."""
    return FakeAgent(lambda turns, temperature: DECLINED if turns else first)


def right(example: Example, final: Prediction) -> bool:
    return check_truth(final.calls, example).correct


@pytest.mark.parametrize("spec", REVIEWED)
def test_every_reviewer_mechanism_turns_an_invented_call_into_a_correct_abstention(spec: str) -> None:
    out = parse_mechanism(spec).run(MOBY, talked_out_of(INVENTED), NoFitReviewer(), ctx=MechanismContext())
    assert not out.final.calls and right(MOBY, out.final) and not out.gated


@pytest.mark.parametrize("spec", EVERY)
def test_the_same_machinery_keeps_a_right_call(spec: str) -> None:
    example = weather_example()
    out = parse_mechanism(spec).run(example, FakeAgent(lambda turns, t: GOOD), ContentReviewer(),
                                    ctx=MechanismContext())
    assert out.final == GOOD and right(example, out.final)


@pytest.mark.parametrize("spec", ["saag", "binary"])
def test_self_repair_keeps_an_abstention_the_agent_repeats(spec: str) -> None:
    out = parse_mechanism(spec).run(MOBY, talked_out_of(INVENTED), None, ctx=MechanismContext())
    assert not out.final.calls and right(MOBY, out.final)
    # repair 1 answers the invented value, repair 2 the abstention; the repeated abstention ends the loop
    assert out.agent_calls == 2 and "twice in a row" in out.notes[0]
    feedback = [r.feedback for r in out.rounds]
    assert feedback[1] == (NO_CALL_FEEDBACK if spec == "saag" else BINARY_FEEDBACK)
    assert spec == "binary" or "London" in (feedback[0] or "")  # psi3 names the value


def test_saag_repair_still_nudges_a_lost_call_once() -> None:
    """A relevant request the agent wrongly declines: the abstention feedback lets it call (no new harm)."""
    agent = FakeAgent(lambda turns, t: GOOD if turns else DECLINED)
    out = parse_mechanism("saag").run(weather_example(), agent, None, ctx=MechanismContext())
    assert out.final == GOOD and [r.verdict for r in out.rounds] == ["saag_fail", "saag_pass"]
    assert out.rounds[0].feedback == NO_CALL_FEEDBACK and "Answer with a call" not in NO_CALL_FEEDBACK


def test_saag_repair_still_answers_an_unreadable_reply_with_psi1() -> None:
    unreadable = Prediction(raw="{not json", status="unparsable")
    agent = FakeAgent(lambda turns, t: GOOD if turns else unreadable)
    out = parse_mechanism("saag").run(weather_example(), agent, None, ctx=MechanismContext())
    assert out.final == GOOD and (out.rounds[0].feedback or "").startswith("No parsable function call")


def test_r2_reviews_the_abstaining_revision_and_keeps_it() -> None:
    reviewer = FakeReviewer([Verdict(True, NO_FIT), Verdict(False, "Right: no call.")])
    agent = talked_out_of(INVENTED)
    out = parse_mechanism("r2").run(MOBY, agent, reviewer, ctx=MechanismContext())
    assert reviewer.reviewed == [INVENTED, DECLINED] and [r.verdict for r in out.rounds] == ["reject", "approve"]
    assert not out.final.calls and right(MOBY, out.final)


def test_the_revision_prompt_allows_answering_without_a_call() -> None:
    assert REVISION_INSTRUCTION == ("Revise your function calls accordingly and answer with the calls only; "
                                    "if no function should be called, answer without a call.")
    messages = BaseAgent(object(), mode="json").build_messages(MOBY, [FeedbackTurn(INVENTED, NO_FIT)])
    assert messages[-1] == {"role": "system", "content": f"Reviewer feedback: {NO_FIT}\n{REVISION_INSTRUCTION}"}
    assert '{"calls": []}' in messages[0]["content"]  # json mode: the schema's empty list is the way to abstain


def test_guard_ends_at_an_abstaining_revision_without_demanding_a_call() -> None:
    """It used to review the abstention again as a stage-1 failure and feed back psi1 ("answer with a call")."""
    reviewer = FakeReviewer([Verdict(True, NO_FIT)])  # a second review would raise
    agent = talked_out_of(INVENTED)
    out = parse_mechanism("guard+r2").run(MOBY, agent, reviewer, ctx=MechanismContext())
    assert out.final == NO_CALL and right(MOBY, out.final)
    assert out.ruling is not None and out.ruling.action == "block" and "makes no call" in out.ruling.reason
    assert out.reviewer_calls == 1 and out.agent_calls == 1
    assert all("No parsable function call" not in turn.feedback for _, _, turns in agent.log for turn in turns)


def test_the_gate_reviews_a_call_built_only_of_assumptions() -> None:
    report = blind_cascade(ASSUMED, MONA_LISA)
    assert report.passed and report.clean and not report.anchored and not report.vouched
    out = parse_mechanism("gate+r1").run(MONA_LISA, talked_out_of(ASSUMED), NoFitReviewer(), ctx=MechanismContext())
    assert not out.gated and out.reviewer_calls == 1 and right(MONA_LISA, out.final)


def test_the_gate_still_passes_a_call_grounded_in_the_request() -> None:
    """The cascade's blind spot, measured and kept: a wrong function with values from the request passes."""
    assert blind_cascade(GROUNDED, BOSTON_HISTORY).vouched
    out = parse_mechanism("gate+r1").run(BOSTON_HISTORY, talked_out_of(GROUNDED), NeverCalledReviewer(),
                                         ctx=MechanismContext())
    assert out.gated and out.final == GROUNDED
    ungated = parse_mechanism("r1").run(BOSTON_HISTORY, talked_out_of(GROUNDED), NoFitReviewer(),
                                        ctx=MechanismContext())
    assert right(BOSTON_HISTORY, ungated.final)


def test_saag_s2_does_not_trust_a_pass_built_only_of_assumptions() -> None:
    out = parse_mechanism("saag+s2").run(MONA_LISA, talked_out_of(ASSUMED), NoFitReviewer(), ctx=MechanismContext())
    assert [c.passed for c in out.candidates] == [False, False] and out.reviewer_calls == 1
    assert out.selected is None and right(MONA_LISA, out.final) and "chose no call" in out.notes[0]


class Recording(NoFitReviewer):
    """``NoFitReviewer`` that keeps the candidate lists it was shown."""

    def __init__(self) -> None:
        self.shown: list[list[Prediction]] = []

    def select_candidate(self, example, candidates):  # noqa: ANN001, ANN201
        self.shown.append(list(candidates))
        return super().select_candidate(example, candidates)


def test_s2_offers_no_call_only_when_no_candidate_abstains() -> None:
    reviewer = Recording()
    out = parse_mechanism("s2").run(MOBY, talked_out_of(INVENTED), reviewer, ctx=MechanismContext())
    assert reviewer.shown == [[INVENTED, INVENTED, NO_CALL]]
    assert out.selected is None and out.final == NO_CALL and "chose no call" in out.notes[0]
    assert out.reviewer_unusable == 0
    reviewer = Recording()
    hot = FakeAgent(lambda turns, t: DECLINED if (t or 0) > 0.5 else INVENTED)
    out = parse_mechanism("s2").run(MOBY, hot, reviewer, ctx=MechanismContext())
    assert reviewer.shown == [[INVENTED, DECLINED]] and out.selected == 1 and not out.final.calls


@pytest.mark.parametrize(("grades", "final", "calls", "unusable"), [
    ({"London": Grade(0.4, ""), None: Grade(0.9, "no tool fits")}, NO_CALL, 3, 0),
    ({"London": Grade(0.7, ""), None: Grade(0.7, "")}, INVENTED, 3, 0),  # a tie keeps the agent's call
    ({"London": Grade(1.0, ""), None: Grade(1.0, "")}, INVENTED, 2, 0),  # 1.0 cannot be beaten: no extra call
    ({"London": Grade(0.4, ""), None: Grade(None, "", failed="bad")}, INVENTED, 3, 1),
    ({"London": Grade(None, "", failed="bad")}, INVENTED, 2, 2),  # no usable grade: candidate 0, as before
])
def test_g2_grades_no_call_and_runs_it_only_when_it_scores_above_every_candidate(
        grades: dict, final: Prediction, calls: int, unusable: int) -> None:
    reviewer = FakeReviewer(grades=grades)
    out = parse_mechanism("g2").run(MOBY, FakeAgent(lambda turns, t: INVENTED), reviewer, ctx=MechanismContext())
    assert out.final == final and out.reviewer_calls == calls == len(reviewer.graded)
    assert (out.selected is None) == (final == NO_CALL) and out.reviewer_unusable == unusable
    assert right(MOBY, out.final) == (final == NO_CALL)


def test_g2_does_not_grade_no_call_when_a_candidate_abstains() -> None:
    reviewer = FakeReviewer(grades={"London": Grade(0.2, ""), None: Grade(0.9, "")})
    hot = FakeAgent(lambda turns, t: DECLINED if (t or 0) > 0.5 else INVENTED)
    out = parse_mechanism("g2").run(MOBY, hot, reviewer, ctx=MechanismContext())
    assert out.reviewer_calls == 2 and out.selected == 1 and not out.final.calls


def test_the_informed_reviewer_hears_when_no_value_comes_from_the_request() -> None:
    assert UNANCHORED_NOTE in render_saag_report(blind_cascade(ASSUMED, MONA_LISA))
    assert UNANCHORED_NOTE in render_saag_report(blind_cascade(INVENTED, MOBY))  # fails stage 3, nothing found
    assert UNANCHORED_NOTE not in render_saag_report(blind_cascade(GOOD, weather_example()))
    assert UNANCHORED_NOTE not in render_saag_report(blind_cascade(call("get_wether", city="X"), MOBY))  # stage 1


def test_the_informed_reviewer_is_not_told_to_demand_a_call_from_an_abstention() -> None:
    """psi1 ("answer with a call") in the report made the reviewer reject right abstentions (exp2 records)."""
    reviewer = SaagInformedReviewer()
    assert reviewer.review_inputs(MOBY, DECLINED)["saag_report"] == NO_CALL_REPORT
    unreadable = Prediction(raw="{not json", status="unparsable")
    assert "No parsable function call" in reviewer.review_inputs(MOBY, unreadable)["saag_report"]
