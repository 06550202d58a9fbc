"""One-rule edits: reading an instruction as rules, parsing the reflection's JSON, applying it byte for byte."""

from __future__ import annotations

import pytest

from saag_opt.artifacts.version import load_version_file
from saag_opt.optimize import rails
from saag_opt.optimize.edits import Edit, EditError, apply_edit, numbered, parse_edit, read_rules, rule_changes
from saag_opt.paths import shipped

TEXT = """You review tool calls.

Criteria:
1. The function fits the request.
2. Every required parameter is present,
   with exact names.
3. Values come from the request.

Guidelines:
- Defaults are fine.
- Do not be pedantic.

Output: error is true only for a concrete problem."""


def v2() -> str:
    return load_version_file(shipped("prompts") / "reviewer" / "v2.json").instructions["review"]


def test_rules_are_paragraphs_and_list_items_in_reading_order_without_headings() -> None:
    rules = read_rules(TEXT)
    assert [r.text for r in rules] == [
        "You review tool calls.", "The function fits the request.",
        "Every required parameter is present, with exact names.", "Values come from the request.",
        "Defaults are fine.", "Do not be pedantic.", "Output: error is true only for a concrete problem."]
    assert numbered(TEXT).splitlines()[2] == "[3] Every required parameter is present, with exact names."
    assert len(read_rules(v2())) == 11  # the shipped seed: intro, 4 criteria, 5 guidelines, output


def test_add_writes_to_its_own_list_at_the_end_and_keeps_every_other_line() -> None:
    out = apply_edit(TEXT, Edit("add", 0, "Approve restated values."))
    assert out == f"{TEXT}\n\nAdditional rules:\n- Approve restated values."
    again = apply_edit(out, Edit("add", 0, "Reject invented values."))
    assert again == f"{out}\n- Reject invented values."  # the same list: not a second heading
    assert rule_changes(TEXT, again) == ["added as rule 8: Approve restated values.",
                                         "added as rule 9: Reject invented values."]
    assert apply_edit("- One rule here.", Edit("add", 0, "Two rules here.")) == "- One rule here.\n- Two rules here."
    prose = "Review the calls and approve correct ones."
    assert apply_edit(prose, Edit("add", 0, "Reject invented values.")) == (
        f"{prose}\n\nAdditional rules:\n- Reject invented values.")


def test_add_never_joins_a_scale_or_an_order_of_preference() -> None:
    grade = "Scale:\n- 1.0: right.\n- 0.0: wrong.\n\nDo not be pedantic."
    out = apply_edit(grade, Edit("add", 0, "Treat a restated value as grounded."))
    assert out.endswith("Do not be pedantic.\n\nAdditional rules:\n- Treat a restated value as grounded.")


def test_replace_keeps_the_marker_and_delete_renumbers_its_list() -> None:
    replaced = apply_edit(TEXT, Edit("replace", 3, "Every required parameter is present."))
    assert "2. Every required parameter is present.\n3. Values" in replaced and "exact names" not in replaced
    deleted = apply_edit(TEXT, Edit("delete", 2))
    assert "1. Every required parameter is present,\n   with exact names.\n2. Values come from the request." in deleted
    assert apply_edit(TEXT, Edit("delete", 1)).startswith("Criteria:")
    assert rule_changes(TEXT, deleted) == ["rule 2 deleted: The function fits the request."]


def test_a_sub_item_is_part_of_its_rule_and_goes_with_it() -> None:
    nested = "Rules:\n1. Check names.\n   - exact case\n   - no aliases\n2. Check values.\n\nBe brief."
    assert numbered(nested).splitlines() == ["[1] Check names. - exact case - no aliases", "[2] Check values.",
                                             "[3] Be brief."]
    assert apply_edit(nested, Edit("delete", 1)) == "Rules:\n1. Check values.\n\nBe brief."
    assert apply_edit(nested, Edit("replace", 1, "Check names exactly.")) == (
        "Rules:\n1. Check names exactly.\n2. Check values.\n\nBe brief.")


def test_add_to_a_loose_list_goes_to_its_own_list_not_between_items() -> None:
    loose = "1. Check names.\n\n2. Check values."
    assert apply_edit(loose, Edit("add", 0, "Approve restated values.")) == (
        f"{loose}\n\nAdditional rules:\n- Approve restated values.")


@pytest.mark.parametrize(("reply", "edit"), [
    ('{"op": "add", "rule": 0, "text": "Approve restated values."}', Edit("add", 0, "Approve restated values.")),
    ('Sure! ```json\n{"op": "REPLACE", "rule": "4", "text": "- Values may be paraphrased."}\n```',
     Edit("replace", 4, "Values may be paraphrased.")),
    ('{"op": "delete", "rule": 2, "text": "ignored"}', Edit("delete", 2)),
])
def test_parse_reads_the_json_object_wherever_it_is(reply: str, edit: Edit) -> None:
    assert parse_edit(reply, n_rules=7) == edit


@pytest.mark.parametrize(("reply", "message"), [
    ("I cannot help with that.", "no JSON object"),
    ('{"op": "rewrite", "rule": 1, "text": "x"}', "op must be add, replace or delete"),
    ('{"op": "replace", "rule": 9, "text": "A rule."}', "rule 9 does not exist"),
    ('{"op": "delete", "rule": null, "text": ""}', "delete needs a rule number"),
    ('{"op": "add", "rule": 0, "text": "  "}', "add needs the new rule's text"),
    ('{"op": "add", "rule": 0, "text": "' + "word " * 61 + '"}', "61 words"),
    ('{"op": "add", "rule": 0, "text": "- Reject A.\\n- Approve B."}', "a list of 2 lines"),
])
def test_an_unusable_edit_is_a_clear_error(reply: str, message: str) -> None:
    with pytest.raises(EditError, match=message):
        parse_edit(reply, n_rules=7)


def test_an_edit_that_changes_nothing_is_refused() -> None:
    with pytest.raises(EditError, match="changes nothing"):
        apply_edit(TEXT, Edit("replace", 5, "Defaults are fine."))
    with pytest.raises(EditError, match="nearly the same text"):
        apply_edit(TEXT, Edit("replace", 5, "[CRITICAL] Defaults are fine!"))
    with pytest.raises(EditError, match="already has"):
        apply_edit(TEXT, Edit("add", 0, "Do not be pedantic!"))
    with pytest.raises(EditError, match="already has"):
        apply_edit(TEXT, Edit("add", 0, "do not be pedantic."))


@pytest.mark.parametrize("rule", [
    "Please provide clear instructions for the reviewer.",
    "I am unable to accurately review the calls without more context.",
    "Should the reviewer reject calls with missing values?",
    "Based on the provided examples, approve calls.",
])
def test_a_degenerate_edit_is_quarantined_by_the_rails(rule: str) -> None:
    parent = v2()
    child = apply_edit(parent, Edit("add", 0, rule))
    reason = rails.quarantine_reason({"reviewer.review": child}, {"reviewer.review": parent})
    assert reason is not None and "not_a_rule" in reason


def test_a_real_rule_passes_the_rails() -> None:
    parent = v2()
    child = apply_edit(parent, Edit("add", 0, "Approve a call whose values restate the request in other words, "
                                               "even when the automatic check flags them."))
    assert rails.quarantine_reason({"reviewer.review": child}, {"reviewer.review": parent}) is None


def test_the_report_note_starts_empty_and_is_checked_rule_by_rule() -> None:
    first = apply_edit("", Edit("add", 0, "Findings about restated values are often false alarms."))
    assert first == "- Findings about restated values are often false alarms."
    assert rails.quarantine_reason({"reviewer.report": first}, {"reviewer.report": ""}) is None
    bad = apply_edit(first, Edit("add", 0, "Please provide the report in more detail."))
    reason = rails.quarantine_reason({"reviewer.report": bad}, {"reviewer.report": first})
    assert reason is not None and reason.startswith("report: not_a_rule")
    long_note = "\n".join(f"- Rule {i} says the report may be wrong about restated values here." for i in range(14))
    assert "length" in str(rails.quarantine_reason({"reviewer.report": long_note}, {"reviewer.report": ""}))
