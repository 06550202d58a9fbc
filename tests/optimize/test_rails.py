"""GEPA rails: each rule on real degenerate proposals, and no false quarantine of the seeds or good rewrites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saag_opt.data import load_dataset
from saag_opt.model import Example, Registry
from saag_opt.optimize import rails
from saag_opt.optimize.rails import check_instruction, minibatch_collapse, pick_best, quarantine_reason
from tests.optimize import optimize_world as world

PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
SEEDS = {v: json.loads((PROMPTS / "reviewer" / f"{v}.json").read_text())["instructions"] for v in ("v1", "v2")}
V2 = SEEDS["v2"]["review"]
SHIPPED = load_dataset("shipped:bfcl")
BY_ID = {ex.id: ex for ex in SHIPPED}

# Experiment 3's two proposals, as quoted in experiments/results/exp3/meta.json (the records keep only
# the opening; the "..." is the quote's), then the same opening as a finished sentence.
EXP3 = [
    "Based on the provided information, please identify and correct any issues with the tool-calling assistant's "
    "tentative responses...",
    "Please provide a comprehensive and well-structured instruction for the assistant to consider...",
]
EXP3_FINISHED = [text.removesuffix("...") + "." for text in EXP3]

# Experiment 5's GEPA proposals (reflection by the 1.5B, from v2), quoted whole from
# experiments/results/exp5/gepa-prompt-store.
EXP5_V8 = (  # v4-gepa without its last sentence; quarantined in the run for lacking the word "error"
    "Review a tool-calling assistant's tentative response before it is executed. You see the "
    "conversation, the tool documentation, and the proposed tool call(s). Your task is to assess whether "
    "the calls fulfill the criteria: request fulfillment, tool-call correctness, argument fidelity, "
    "relevance. If any criterion is not met, provide feedback on which call or parameter has a problem. "
    "Make sure your feedback is clear, concise, and specific.")
EXP5_V4 = EXP5_V8 + " The feedback should help the assistant fix the errors in the tentative response."
"""The one GEPA accepted (+1 of 20 val examples, under the best margin)."""
EXP5_DEGENERATE = [  # v5, v6, v7, v9: three requests for instructions and a refusal
    "Create a new instruction that reviews an assistant's tentative response based on the conversation, "
    "tool documentation, and proposed tool call(s). The instruction should assess whether the calls "
    "fulfill the criteria: request fulfillment, tool-call correctness, argument fidelity, relevance. If "
    "any criterion is not met, provide feedback on which call or parameter has a problem. Make sure your "
    "feedback is clear, concise, and specific. The feedback should help the assistant fix the errors in "
    "the tentative response.",
    "I am unable to accurately review the provided tentative calls without more information about the "
    "assistant's previous interactions and its capabilities.",
    "I will need you to write a new instruction for the assistant. The instructions I provided are:\n1. "
    "Review a tool-calling assistant's tentative response before it is executed.\n2. You see the "
    "conversation, the tool documentation, and the proposed tool call(s).\n3. Your task is to assess "
    "whether the calls fulfill the criteria: request fulfillment, tool-call correctness, argument "
    "fidelity, relevance. If any criterion is not met, provide feedback on which call or parameter has a "
    "problem. Make sure your feedback is clear, concise, and specific.\n4. The feedback should help the "
    "assistant fix the errors in the tentative response.",
    "Please revise the existing instruction to address the specific criteria of request fulfillment, "
    "tool-call correctness, argument fidelity, and relevance. Ensure that the new instruction is general "
    "enough for the assistant to understand and follow while still being clear and concise. Consider "
    "providing examples or case scenarios to illustrate how the revised instruction can be applied in "
    "different contexts.",
]

REQUESTS = [  # requests for instructions, or questions, of the length a rewrite of v2 may have
    "Please provide an improved instruction for the reviewer. The instruction should explain how to check the "
    "function name, the parameter names and the argument values against the conversation and the documentation, "
    "and it should cover calls to unsuitable tools as well as requests that need no call at all. Make it clear, "
    "concise and well structured, and keep it general so that it works for every example.",
    "Write a new instruction for the reviewer that tells it to reject calls with wrong parameter names, values "
    "that do not come from the conversation, or functions that are not in the documentation. The instruction "
    "should also remind the reviewer that tool-only responses are complete and that defaults for optional "
    "parameters are fine.",
    "Could you share the current instruction together with a few more examples of the assistant's tentative "
    "responses and the feedback they received? With that information I can suggest concrete changes to the "
    "criteria, the guidelines and the output format so that the reviewer becomes more reliable.",
    "What should the reviewer do when the called function is not in the documentation? Should it reject the call "
    "or let the agent try again? And how strict should it be about argument values that are paraphrased rather "
    "than copied from the conversation?",
    "You are an expert at writing prompts for reviewers of tool calls. The current prompt makes the reviewer "
    "approve calls with wrong argument values and reject correct calls that use sensible defaults, which harms "
    "the agent in both directions. Rewrite the prompt so that it generalises.",
    "Based on the examples above, the assistant needs to pay closer attention to the details of each request. "
    "It should look at the conversation, the documentation and the proposed tool calls more carefully, think "
    "about what the user really wants, and make sure that every part of the response matches it.",
]

TRUNCATED = [
    "You review a tool-calling assistant's tentative calls before they run. Reject the call (error = true) when "
    "the function is not in the documentation, a required parameter is missing, or a value is not taken from the",
    "You review a tool-calling assistant's tentative calls. Set error to true for a concrete problem under these "
    "criteria:",
    "You review a tool-calling assistant's tentative calls. Reject a call when (a) the function is not documented, "
    "(b) a required parameter is missing, or (c a value is not grounded in the request; otherwise approve it.",
    "   ",
    "Approve correct calls.",
]

LONG_FROM_V1 = V2 + "\n\n" + "\n".join(  # v2 plus pasted per-example notes: 5x+ the v1 review prompt
    f"- Note {i}: when the tentative call looks right and every required parameter is present, approve it; when "
    "a value differs from the one the user gave, reject it and say which parameter is wrong." for i in range(1, 6))

GOOD_REWRITES = [
    # a rewrite of v2 as GEPA might write it: criteria kept, the verdict stated, general
    "You review a tool-calling assistant's tentative calls before they run, using the conversation and the tool "
    "documentation only. Approve (error = false) when every call uses a documented function that fits the request, "
    "the exact parameter names, every required parameter, correct types, and values taken from the conversation "
    "(same numbers, names and units). Reject (error = true) only for a concrete defect, and write feedback that "
    "names the call and the parameter, says what is wrong and how to fix it, in one to three sentences. If no "
    "documented tool fits the request, the right response is no call; calling an unsuitable tool is an error, and "
    "so is making no call when a suitable tool exists. Defaults for unspecified optional parameters are fine. "
    "Tool-only responses are complete: never reject a call for lacking a user-facing answer. Rejecting a correct "
    "call is as harmful as approving a wrong one.",
    # a checklist of questions that ends with the decision
    "Check each tentative call against the user's request and the tool documentation:\n"
    "- Does the function exist in the documentation and fit the request?\n"
    "- Are all required parameters present, with the exact names and correct types?\n"
    "- Are the argument values the ones the user gave (numbers, names, units), or sensible defaults?\n"
    "- If no tool fits the request, is there no call at all?\n"
    "If any answer is no, set error to true and explain in the feedback which parameter or call is wrong and how "
    "to fix it. Otherwise set error to false and confirm briefly. Do not reject tool-only responses for lacking "
    "explanations, and use no external facts.",
    # a concise rewrite (0.28 of v2: just over the quarter)
    "You review the tentative tool calls of an assistant; judge only the calls. Flag an error when a function is "
    "not documented or does not fit the request, a required parameter is missing, a name or type differs from the "
    "schema, or a value is not grounded in the conversation. When no documented tool fits, the right answer is no "
    "call. Approve faithful paraphrases and sensible defaults for optional parameters. The feedback names the call, "
    "the parameter and the fix.",
    # opens on the reviewer's inputs with 'provided', says 'please note', and gives the agent instructions
    "Based on the provided conversation and tool documentation, decide whether the tentative calls contain an "
    "error. Please note that tool-only responses are complete. Reject a call that uses an undocumented function, "
    "misses a required parameter or invents a value, and give the agent clear instructions on how to fix it; "
    "approve every call that matches the request and the schema, including sensible defaults for optional "
    "parameters and faithful paraphrases of the user's words.",
    # opens with 'write ... instructions' that are not its object, in markdown, ending on a list item and a rule
    "Write feedback with precise instructions for the agent whenever you reject a tentative call.\n\n"
    "## Decide\n"
    "- **Reject** (error = true): an undocumented or unsuitable function, a missing required parameter, a wrong "
    "parameter name or type, or a value the conversation does not support.\n"
    "- **Approve** (error = false): calls that match the request and the schema, with sensible defaults for "
    "optional parameters and faithful paraphrases of the user's words.\n"
    "- No documented tool fits the request: the right response is no call\n\n---",
]


def _rules(text: str, parent: str = V2, examples=()) -> set[str]:
    return {f.rule for f in check_instruction(text, parent, examples)}


# -- not_instructions --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", EXP3 + EXP3_FINISHED)
def test_experiment_3_proposals_are_not_instructions(text: str) -> None:
    found = {f.rule: f.evidence for f in check_instruction(text, V2, SHIPPED[:3])}
    assert "not_instructions" in found and "length" in found
    assert "ratio 0.0" in found["length"]  # under a tenth of v2's length, stated


@pytest.mark.parametrize("text", EXP5_DEGENERATE)
def test_experiment_5_requests_and_refusals_are_not_instructions(text: str) -> None:
    assert rails.not_instructions(text) is not None


@pytest.mark.parametrize("text", [EXP5_V8, EXP5_V4])
def test_a_decision_stated_as_correctness_and_problems_is_instructions(text: str) -> None:
    """Experiment 5's v8 was quarantined for lacking the word "error"; v4, which passed, only added it."""
    assert check_instruction(text, V2, SHIPPED) == []


def test_the_evidence_names_the_signals() -> None:
    finding = rails.not_instructions(EXP3_FINISHED[1])
    assert finding is not None
    assert "asks for instructions ('provide a comprehensive and well-structured instruction')" in finding.evidence
    assert "addresses the reader ('Please')" in finding.evidence
    finding = rails.not_instructions(EXP3_FINISHED[0])
    assert finding is not None and "'Based on the provided information'" in finding.evidence


@pytest.mark.parametrize("text", REQUESTS)
def test_requests_and_questions_are_quarantined_at_a_normal_length(text: str) -> None:
    assert _rules(text, SEEDS["v1"]["review"]) == {"not_instructions"}  # a length v1 may grow to


# -- truncated ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TRUNCATED)
def test_truncated_or_empty_texts_are_quarantined(text: str) -> None:
    found = {f.rule: f.evidence for f in check_instruction(text, SEEDS["v1"]["review"])}
    assert "truncated" in found


def test_an_empty_text_gets_one_finding_only() -> None:
    (finding,) = check_instruction("", V2)
    assert finding.rule == "truncated" and "0 words" in finding.evidence


# -- length ---------------------------------------------------------------------------------------------------------


def test_much_shorter_and_much_longer_than_the_parent_state_the_ratio() -> None:
    short = "You review tool calls. Reject a call with an undocumented function or a missing required parameter."
    (finding,) = check_instruction(short, V2)
    assert finding.rule == "length" and "ratio 0.06 < 0.25" in finding.evidence
    (finding,) = check_instruction(LONG_FROM_V1, SEEDS["v1"]["review"])
    assert finding.rule == "length" and "> 5.00" in finding.evidence and "against the parent's 450" in finding.evidence


# -- copies_values and copies_ngrams ------------------------------------------------------------------------------

COPIES = [  # (example ids, text, rule, evidence it must quote)
    (["simple_python_21"], "You review tentative calls. Approve number_theory.gcd only when both integers come from "
     "the request and reject it otherwise; the feedback names the wrong parameter and how to fix it.",
     "copies_values", "registry names: 'number_theory.gcd'"),
    (["simple_python_6"], "You review tentative calls. Reject a call whose coefficients differ from the request, "
     "for example a=2 written as a=3, and approve it when every required parameter is present and grounded.",
     "copies_values", "gold arguments: 'a=2'"),
    (["multiple_94"], "You review tentative calls. Reject a booking whose hotel name is not 'Hilton New York' or "
     "whose room type differs from the request; approve calls whose values all come from the conversation.",
     "copies_values", "gold values and quoted strings: 'Hilton New York'"),
    (["simple_python_21"], "You review tentative calls. When the user gives two numbers such as 36 and 48, reject "
     "a call that passes other values, and approve it when the values and parameter names match the request.",
     "copies_values", "numbers from the query: '36', '48'"),
    (["parallel_128"], "You review tentative calls. Reject a call that asks for the temperature in another city "
     "than Los Angeles or New York, and approve it when the location and the unit come from the request.",
     "copies_values", "'Los Angeles'"),
    (["simple_python_48"], "You review tentative calls. Approve a call only when the request asks to calculate the "
     "density of a substance based on its mass and volume and the values match; otherwise reject it.",
     "copies_ngrams", "run(s) of 8 words copied from example(s) simple_python_48"),
]


@pytest.mark.parametrize(("ids", "text", "rule", "evidence"), COPIES)
def test_copying_example_specific_values_or_runs_is_quarantined(ids: list[str], text: str, rule: str,
                                                                 evidence: str) -> None:
    examples = [BY_ID[i] for i in ids] + [BY_ID["irrelevance_2"], BY_ID["multiple_31"]]  # a minibatch of three
    found = {f.rule: f.evidence for f in check_instruction(text, V2, examples)}
    assert rule in found and evidence in found[rule], found


def test_a_value_already_in_the_parent_is_not_a_copy() -> None:
    parent = V2 + " Names such as number_theory.gcd are examples of documented functions."
    text = GOOD_REWRITES[0] + " Names such as number_theory.gcd are examples of documented functions."
    assert check_instruction(text, parent, [BY_ID["simple_python_21"]]) == []


def test_a_run_shared_by_several_reflected_examples_is_boilerplate_not_a_copy() -> None:
    note = "Note that the provided function is in Python 3 syntax and must be called as documented."
    examples = [Example(id=f"ex{i}", category="simple", registry=Registry.from_dicts(
        [{"name": f"tool_{i}", "description": f"Tool number {i}. {note}", "parameters": {}}]),
        messages=({"role": "user", "content": f"question {i}"},), expect="any_call") for i in range(3)]
    text = GOOD_REWRITES[0] + " " + note
    assert "copies_ngrams" not in _rules(text, V2 + " " , examples[:2])
    assert "copies_ngrams" in _rules(text, V2, examples[:1])  # in one example only: that example's text


# -- no false quarantine ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("predictor", ["review", "select", "grade"])
def test_the_shipped_seeds_pass_every_text_rule_against_every_shipped_example(version: str, predictor: str) -> None:
    text = SEEDS[version][predictor]
    assert check_instruction(text, text + " ", SHIPPED) == []


@pytest.mark.parametrize("predictor", ["review", "select", "grade"])
def test_v2_as_a_rewrite_of_v1_is_not_quarantined(predictor: str) -> None:
    assert check_instruction(SEEDS["v2"][predictor], SEEDS["v1"][predictor], SHIPPED) == []


def test_v1_review_as_a_rewrite_of_v2_passes_but_select_and_grade_are_under_a_quarter() -> None:
    assert check_instruction(SEEDS["v1"]["review"], V2, SHIPPED) == []
    for predictor in ("select", "grade"):
        (finding,) = check_instruction(SEEDS["v1"][predictor], SEEDS["v2"][predictor], SHIPPED)
        assert finding.rule == "length"


@pytest.mark.parametrize("text", GOOD_REWRITES)
def test_plausible_good_rewrites_are_not_quarantined(text: str) -> None:
    assert check_instruction(text, V2, SHIPPED) == []
    assert check_instruction(text, SEEDS["v1"]["review"], SHIPPED) == []


def test_the_scripted_worlds_instructions_pass() -> None:
    examples = world.make_examples(6, "train")
    for text in (world.PROPOSED_INSTRUCTION, "Review the tentative calls carefully and approve them when they "
                 "look right."):
        assert check_instruction(text, world.SEED_INSTRUCTION, examples) == []


def test_quarantine_reason_checks_only_changed_components_and_names_them() -> None:
    parent = {"reviewer.review": V2, "reviewer.select": SEEDS["v2"]["select"]}
    assert quarantine_reason(dict(parent), parent) is None
    reason = quarantine_reason(parent | {"reviewer.review": EXP3[1]}, parent)
    assert reason is not None and reason.startswith("review: not_instructions: ")
    assert "select" not in reason


# -- minibatch collapse ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "after", "expected"), [
    (["kept right", "kept wrong after review", "kept right"], ["kept right", "missed error", "kept right"],
     "approves all 3 minibatch calls, 1 of them wrong, where the parent objected"),
    (["kept right", "kept wrong after review", "kept right"], ["false alarm", "kept wrong after review", "false alarm"],
     "rejects all 3 minibatch calls, 2 of them right, where the parent approved"),
    (["kept right", "missed error", "kept right"], ["broken", "fixed", "kept right"],
     "raises harm: breaks 1 right call(s) on the minibatch, the parent 0"),
    # no collapse: approving right calls where the parent raised a false alarm; the same verdicts as the parent;
    # rejecting a batch of wrong calls; an unknown outcome
    (["false alarm", "kept right", "kept right"], ["kept right", "kept right", "kept right"], None),
    (["kept right", "kept right", "missed error"], ["kept right", "kept right", "missed error"], None),
    (["missed error", "missed error", "kept wrong after review"], ["kept wrong after review"] * 3, None),
    (["kept right", "kept wrong after review", "kept right"], ["kept right", None, "kept right"], None),
])
def test_minibatch_collapse(before: list, after: list, expected: str | None) -> None:
    assert minibatch_collapse(before, after) == expected


# -- best -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed_score", "scores", "n_val", "best"), [
    (0.70, {"v3-gepa": 0.70, "v4-gepa": 0.75}, 20, "v2"),       # experiment 3: one of twenty
    (0.70, {"v3-gepa": 0.80}, 20, "v3-gepa"),                   # two of twenty (10 points)
    (0.70, {"v3-gepa": 0.80, "v4-gepa": 0.80}, 20, "v3-gepa"),  # equal scores: the first found
    (0.70, {"v3-gepa": 0.80, "v4-gepa": 0.85}, 20, "v4-gepa"),
    (0.70, {"v3-gepa": 0.74}, 100, "v2"),                       # four of a hundred: under 5 points
    (0.70, {"v3-gepa": 0.75}, 100, "v3-gepa"),                  # five of a hundred
    (0.50, {"v3-gepa": 1.0}, 4, "v3-gepa"),
    (1 / 3, {"v3-gepa": 2 / 3}, 3, "v2"),                       # the README's main command: val 3
    (0.50, {"v3-gepa": 0.50}, 4, "v2"),                         # a tie never displaces the seed
    (None, {"v3-gepa": 1.0}, 4, "v2"),
])
def test_best_moves_only_with_the_val_margin(seed_score, scores, n_val: int, best: str) -> None:
    assert pick_best("v2", seed_score, scores, n_val)[0] == best


def test_the_margin_is_stated_in_the_reason() -> None:
    _, why = pick_best("v2", 0.70, {"v3-gepa": 0.70, "v4-gepa": 0.75}, 20)
    assert why == ("best stays the seed v2: the top candidate v4-gepa has +1 val examples (+5.0 points); the margin "
                   "is 2 more of 20 val examples right (at least 2 examples and 5 points)")
