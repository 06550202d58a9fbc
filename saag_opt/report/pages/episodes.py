"""Multi-turn evaluate runs: validity per category, help/harm per entry and over abstention turns, counts.

The conversation browser (turns, steps, reviews, tool results, where the checker failed) is issue
18's next phase; until then the page shows the run's numbers and says where the steps are.
"""

from __future__ import annotations

from saag_opt.evaluation.episodes import EpisodeSummary
from saag_opt.report.pages.base import Part, append, header_meta, new_part, num, sec, table, times
from saag_opt.report.pages.sections import accuracy_section, cost_section, help_harm_section, merge_categories
from saag_opt.runfiles import Run, read_costs

_COUNTS = (("turns run", "turns"), ("steps", "steps"), ("calls proposed", "proposed_calls"),
           ("calls executed", "executed_calls"), ("steps withheld (calls never run)", "withheld_steps"),
           ("calls withheld", "withheld_calls"), ("steps revised", "revised_steps"),
           ("steps the reviewer saw", "reviewed_steps"), ("cut off at the step limit", "cut_off"),
           ("abstention turns", "abstain_turns"), ("left without a call", "abstained"))


def episode_part(run: Run, index: int) -> Part:
    """The part of a multi-turn evaluate run."""
    header = run.header
    summary: EpisodeSummary | None = run.summary
    mechanism = (summary.mechanism if summary else None) or header.plugins.get("mechanism", {}).get("spec") \
        or "reviewed"
    part = new_part("evaluate", f"Evaluate (multi-turn) {header.run_id}: base vs {mechanism}", index)
    part.meta = header_meta(header)
    part.notes.append("every turn and step (proposal, reviews, executed calls, tool results, the checker's "
                      "verdict) is in records.jsonl; the conversation browser is not drawn yet")
    if summary is None:
        return part
    cats = merge_categories({"base": summary.base.categories, "reviewed": summary.reviewed.categories})
    part.sections.append(accuracy_section(cats, [("base", "base"), ("reviewed", mechanism)], part,
                                          {"base": summary.base.accuracy, "reviewed": summary.reviewed.accuracy},
                                          "Valid conversations per category (BFCL's checkers)"))
    items = [(f"base -> {mechanism}, per entry", summary.help_harm)]
    if summary.abstention_help_harm is not None:
        items.append((f"base -> {mechanism}, abstention turns", summary.abstention_help_harm))
    part.sections.append(help_harm_section(items, part, seed=int(header.config.get("seed") or 0)))
    base, final = summary.conversation.get("base"), summary.conversation.get(mechanism)
    if base is not None and final is not None:
        rows = [[label, getattr(base, key), getattr(final, key)] for label, key in _COUNTS]
        append(part, {"id": f"{part.anchor}-conversations", "title": "Inside the conversations",
                      "intro": "What the review did step by step; a withheld call was never executed.",
                      "tables": [table("Conversation counts", ["measure", "base", mechanism], rows)]})
    lat = summary.latency
    latency = [[mechanism, sec(lat.base_mean_seconds), sec(lat.final_mean_seconds), times(lat.overhead_x),
                num(summary.reviewer_calls_per_item, 2)]]
    append(part, cost_section([("run", read_costs(run.path))], latency, part))
    return part


__all__ = ["episode_part"]
