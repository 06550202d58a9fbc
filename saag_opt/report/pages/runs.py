"""Evaluate and compare runs."""

from __future__ import annotations

from pathlib import Path

from saag_opt.report.pages.base import Part, append, header_meta, new_part, num, read_json, read_records, sec, times
from saag_opt.report.pages.browser import browser_section, load_queries
from saag_opt.report.pages.sections import (
    accuracy_section,
    compare_sections,
    cost_section,
    funnel_section,
    help_harm_section,
    merge_categories,
    reviewed_conditions,
    unusable_counts,
    unusable_section,
)
from saag_opt.runfiles import RunHeader


def evaluate_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    """The part of an evaluate run: funnel, metrics, accuracy, help/harm, cost, unusable reviews, browser."""
    summary = read_json(run_dir / "summary.json") or {}
    records = read_records(run_dir)
    mechanism = summary.get("mechanism") or header.plugins.get("mechanism", {}).get("spec") or "reviewed"
    part = new_part("evaluate", f"Evaluate {header.run_id}: base vs {mechanism}", index)
    part.meta = header_meta(header) + ([("reviewer prompt", summary["prompt"])] if summary.get("prompt") else [])
    if summary.get("experimental"):
        part.notes.append("experimental mechanism or reviewer variant (SAAG gate / SAAG-informed reviewer)")
    base = [r for r in records if r.condition == "base"]
    final = [r for r in records if r.condition != "base"]
    part.sections += funnel_section([("base", [r.saag for r in base]), (mechanism, [r.saag for r in final])], part)
    if summary:
        cats = merge_categories({"base": summary["base"].get("categories", {}),
                                  "reviewed": summary["reviewed"].get("categories", {})})
        part.sections.append(accuracy_section(cats, [("base", "base"), ("reviewed", mechanism)], part,
                                              {"base": summary["base"].get("accuracy"),
                                               "reviewed": summary["reviewed"].get("accuracy")},
                                              "Truth accuracy per category"))
        part.sections.append(help_harm_section([(f"base -> {mechanism}", summary.get("help_harm") or {})], part,
                                               seed=int(header.config.get("seed") or 0)))
        lat = summary.get("latency") or {}
        latency = [[mechanism, sec(lat.get("base_mean_seconds")), sec(lat.get("final_mean_seconds")),
                    times(lat.get("overhead_x")), num(summary.get("reviewer_calls_per_item"), 2)]]
        costs = read_json(run_dir / "costs.json") or summary.get("costs")
        append(part, cost_section([("run", costs)], latency, part))
        append(part, unusable_section(unusable_counts(summary, {"reviewed": mechanism}), part))
    spec = header.dataset.get("spec") or header.config.get("dataset")
    queries, why = load_queries(spec, {r.example_id for r in records})
    if why and records:
        part.notes.append(why)
    append(part, browser_section(records, [("base", "base")] + [(c, c) for c in reviewed_conditions(final)],
                                  ("base", reviewed_conditions(final)[-1] if final else "base"), queries, part))
    return part


def compare_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    """The part of a compare run: base, A and B side by side, the paired A-vs-B test, the browser."""
    summary = read_json(run_dir / "summary.json") or {}
    records = read_records(run_dir)
    a, b = summary.get("a") or {}, summary.get("b") or {}
    la, lb = a.get("label", "A"), b.get("label", "B")
    part = new_part("compare", f"Compare {header.run_id}: A = {la} vs B = {lb}", index)
    part.meta = header_meta(header) + [("mode", str(summary.get("mode") or header.config.get("mode"))),
                                 ("matched examples", str(summary.get("matched", "-")))]
    part.notes += list(summary.get("notes") or [])
    cond_a, cond_b = a.get("condition"), b.get("condition")
    by_cond = {c: [r for r in records if r.condition == c] for c in ("base", cond_a, cond_b) if c}
    part.sections += funnel_section([("base", [r.saag for r in by_cond.get("base", [])]),
                                     (f"A {la}", [r.saag for r in by_cond.get(cond_a, [])]),
                                     (f"B {lb}", [r.saag for r in by_cond.get(cond_b, [])])], part)
    if summary:
        part.sections += compare_sections(summary, f"A {la}", f"B {lb}", part, seed=int(header.config.get("seed") or 0))
    spec = header.dataset.get("spec") or ((header.plugins.get("sources") or {}).get("a") or {}).get("dataset")
    queries, why = load_queries(spec, {r.example_id for r in records})
    if why and records:
        part.notes.append(why)
    if cond_a and cond_b:
        append(part, browser_section(records, [("base", "base"), (cond_a, f"A {la}"), (cond_b, f"B {lb}")],
                                      (cond_a, cond_b), queries, part))
    return part
