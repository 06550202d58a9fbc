"""Multi-turn evaluate runs: validity, help/harm, counts, and the conversation browser.

Validity per category, help/harm per entry and over abstention turns, what the review did inside
the conversations, and the browser (turns, steps, reviews, tool results, where the checker failed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from saag_opt.evaluation.conversation_records import EpisodeRecord, EpisodeSummary
from saag_opt.report.evaluate_tables import CONVERSATION_COUNTS
from saag_opt.report.format import pct
from saag_opt.report.pages.base import Part, append, header_meta, new_part, num, sec, table, times
from saag_opt.report.pages.conversations import conversation_section, load_user_turns
from saag_opt.report.pages.sections import accuracy_section, cost_section, help_harm_section, merge_categories
from saag_opt.runfiles import Run, read_costs


def episode_part(run: Run, index: int) -> Part:
    """The part of a multi-turn evaluate run."""
    header = run.header
    summary: EpisodeSummary | None = run.summary
    mechanism = (summary.mechanism if summary else None) or header.plugins.get("mechanism", {}).get("spec") \
        or "reviewed"
    part = new_part("evaluate", f"Evaluate (multi-turn) {header.run_id}: base vs {mechanism}", index)
    part.meta = header_meta(header)
    if summary is None:
        _browser(part, run.records, header.dataset.get("spec") or header.config.get("dataset"), mechanism)
        return part
    cats = merge_categories({"base": summary.base.categories, "reviewed": summary.reviewed.categories})
    part.sections.append(accuracy_section(cats, [("base", "base"), ("reviewed", mechanism)], part,
                                          {"base": summary.base.accuracy, "reviewed": summary.reviewed.accuracy},
                                          f"Valid conversations per category ({summary.judged_by})"))
    items = [(f"base -> {mechanism}, per entry", summary.help_harm)]
    if summary.abstention_help_harm is not None:
        items.append((f"base -> {mechanism}, abstention turns", summary.abstention_help_harm))
    part.sections.append(help_harm_section(items, part, seed=int(header.config.get("seed") or 0)))
    append(part, _pass_hat_k_section(summary, part))
    base, final = summary.conversation.get("base"), summary.conversation.get(mechanism)
    if base is not None and final is not None:
        rows = [[label, getattr(base, key), getattr(final, key)] for label, key in CONVERSATION_COUNTS]
        append(part, {"id": f"{part.anchor}-conversations", "title": "Inside the conversations",
                      "intro": "What the review did step by step; a withheld call was never executed.",
                      "tables": [table("Conversation counts", ["measure", "base", mechanism], rows)]})
    lat = summary.latency
    latency = [[mechanism, sec(lat.base_mean_seconds), sec(lat.final_mean_seconds), times(lat.overhead_x),
                num(summary.reviewer_calls_per_item, 2)]]
    append(part, cost_section([("run", read_costs(run.path))], latency, part))
    _browser(part, run.records, header.dataset.get("spec") or header.config.get("dataset"), mechanism)
    return part


def _pass_hat_k_section(summary: EpisodeSummary, part: Part) -> dict[str, Any] | None:
    """tau2 datasets: pass^1..k per condition, as tau2 computes it (none without trials)."""
    if not summary.pass_hat_k:
        return None
    ks = sorted({k for by_k in summary.pass_hat_k.values() for k in by_k})
    rows = [[condition, *(pct(by_k.get(k)) for k in ks)] for condition, by_k in summary.pass_hat_k.items()]
    return {"id": f"{part.anchor}-pass-hat-k", "title": "pass^k",
            "intro": "Per condition, the share of tasks whose k trials all succeed (tau2's pass^k, "
                     "averaged over tasks), in percent.",
            "tables": [table("pass^k per condition", ["condition", *(f"pass^{k}" for k in ks)], rows,
                             numeric=range(1, len(ks) + 1))]}


def _browser(part: Part, records: Sequence[EpisodeRecord], spec: str | None, mechanism: str) -> None:
    """The conversation browser over a run's records, base (reference) vs the mechanism (target)."""
    conditions = list(dict.fromkeys(r.condition for r in records if r.condition != "base")) or [mechanism]
    user, why = load_user_turns(spec, {r.example_id for r in records})
    if why and records:
        part.notes.append(why)
    append(part, conversation_section(records, [("base", "base")] + [(c, c) for c in conditions],
                                      ("base", conditions[-1]), user, part))


__all__ = ["episode_part"]
