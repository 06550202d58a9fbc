"""Evaluate and compare runs.

An evaluate run of conversations is its own verb (``evaluate-multiturn``, ``conversation_runs``); a
compare run is one verb for either kind, so ``compare_part`` asks its dataset's workload, once,
whether its records are conversations.
"""

from __future__ import annotations

from saag_opt.compare.comparison import CompareSummary
from saag_opt.data.workload import workload
from saag_opt.evaluation.conversation_records import EpisodeRecord
from saag_opt.evaluation.results import EvaluationSummary, ExampleRecord
from saag_opt.report.pages.base import Part, append, header_meta, new_part, num, sec, times
from saag_opt.report.pages.browser import browser_section, load_queries
from saag_opt.report.pages.conversations import conversation_section, load_user_turns
from saag_opt.report.pages.sections import (
    accuracy_section,
    compare_sections,
    cost_section,
    funnel_section,
    help_harm_section,
    merge_categories,
    reviewed_conditions,
    unusable_section,
)
from saag_opt.runfiles import RECORDS_FILE, Run, read_costs, read_rows


def evaluate_part(run: Run, index: int) -> Part:
    """The part of an evaluate run: funnel, metrics, accuracy, help/harm, cost, unusable reviews, browser."""
    header, records = run.header, run.records
    summary: EvaluationSummary | None = run.summary
    mechanism = (summary.mechanism if summary else None) or header.plugins.get("mechanism", {}).get("spec") \
        or "reviewed"
    part = new_part("evaluate", f"Evaluate {header.run_id}: base vs {mechanism}", index)
    part.meta = header_meta(header) + ([("reviewer prompt", summary.prompt)] if summary and summary.prompt else [])
    if summary and summary.experimental:
        part.notes.append("experimental mechanism or reviewer variant (SAAG gate / SAAG-informed reviewer)")
    base = [r for r in records if r.condition == "base"]
    final = [r for r in records if r.condition != "base"]
    part.sections += funnel_section([("base", [r.saag for r in base]), (mechanism, [r.saag for r in final])], part)
    if summary:
        cats = merge_categories({"base": summary.base.categories, "reviewed": summary.reviewed.categories})
        part.sections.append(accuracy_section(cats, [("base", "base"), ("reviewed", mechanism)], part,
                                              {"base": summary.base.accuracy, "reviewed": summary.reviewed.accuracy},
                                              "Truth accuracy per category"))
        part.sections.append(help_harm_section([(f"base -> {mechanism}", summary.help_harm)], part,
                                               seed=int(header.config.get("seed") or 0)))
        lat = summary.latency
        latency = [[mechanism, sec(lat.base_mean_seconds), sec(lat.final_mean_seconds), times(lat.overhead_x),
                    num(summary.reviewer_calls_per_item, 2)]]
        append(part, cost_section([("run", read_costs(run.path) or summary.costs)], latency, part))
        append(part, unusable_section({mechanism: summary.reviewed.reviewer_unusable}, part))
    _browser(part, records, header.dataset.get("spec") or header.config.get("dataset"),
             [("base", "base")] + [(c, c) for c in reviewed_conditions(final)],
             ("base", reviewed_conditions(final)[-1] if final else "base"))
    return part


def compare_part(run: Run, index: int) -> Part:
    """The part of a compare run: base and every version side by side, the paired tests, the browser."""
    header, records = run.header, run.records
    summary: CompareSummary | None = run.summary
    sides = summary.sides if summary else []
    labels = [f"{s.key.upper()} {s.label}" for s in sides]
    named = " vs ".join(f"{s.key.upper()} = {s.label}" for s in sides) if sides else "A = A vs B = B"
    part = new_part("compare", f"Compare {header.run_id}: {named}", index)
    part.meta = header_meta(header) + [("mode", str(summary.mode if summary else header.config.get("mode"))),
                                       ("matched examples", str(summary.matched if summary else "-"))]
    part.notes += summary.notes if summary else []
    by_cond = {c: [r for r in records if r.condition == c] for c in ("base", *(s.condition for s in sides))}
    part.sections += funnel_section([("base", [r.saag for r in by_cond["base"]]),
                                     *((label, [r.saag for r in by_cond[s.condition]])
                                       for s, label in zip(sides, labels))], part)
    if summary:
        part.sections += compare_sections(summary, labels, part, seed=int(header.config.get("seed") or 0))
    if sides:
        spec = header.dataset.get("spec") or ((header.plugins.get("sources") or {}).get("a") or {}).get("dataset")
        columns = [("base", "base"), *((s.condition, label) for s, label in zip(sides, labels))]
        pair = (sides[0].condition, sides[-1].condition)
        if spec and workload(spec).conversations:  # the records hold every turn (§18)
            episodes = read_rows(run.path / RECORDS_FILE, EpisodeRecord)
            user, why = load_user_turns(spec, {r.example_id for r in episodes})
            part.notes += [why] if why else []
            append(part, conversation_section(episodes, columns, pair, user, part))
        else:
            _browser(part, records, spec, columns, pair)
    return part


def _browser(part: Part, records: list[ExampleRecord], spec: str | None, columns: list[tuple[str, str]],
             pair: tuple[str, str]) -> None:
    """The example browser over ``records`` (queries from the run's dataset, when it can still be loaded)."""
    queries, why = load_queries(spec, {r.example_id for r in records})
    if why and records:
        part.notes.append(why)
    append(part, browser_section(records, columns, pair, queries, part))
