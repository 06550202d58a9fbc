"""``score --json`` outputs: the funnel, metric distributions, accuracy and a prediction browser."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from saag_opt.report.format import pct
from saag_opt.report.pages.base import Part, new_part, read_jsonl
from saag_opt.report.pages.browser import saag_brief, stage_of
from saag_opt.report.pages.sections import accuracy_section, funnel_section, merge_categories
from saag_opt.runfiles import read_model
from saag_opt.score.calls import ScoreSummary
from saag_opt.score.files import summary_path


def score_files(path: Path) -> tuple[Path, Path] | None:
    """(rows, summary) of a ``score --json`` output given either file."""
    if path.name.endswith(".summary.json"):
        stem = path.name.removesuffix(".summary.json")
        for candidate in (path.with_name(stem + ".jsonl"), path.with_name(stem + ".json"), path.with_name(stem)):
            if candidate.is_file():
                return candidate, path
        return None
    if path.is_file() and summary_path(path).is_file():
        return path, summary_path(path)
    return None


def score_part(rows_path: Path, summary_file: Path, *, index: int) -> Part:
    """The part of a ``score --json`` output: funnel, metrics, accuracy per category, prediction browser."""
    summary = read_model(summary_file, ScoreSummary)
    rows = read_jsonl(rows_path)
    part = new_part("score", f"Score {rows_path.name}: SAAG diagnostics and ground truth", index)
    part.meta = [("predictions scored", str(summary.n_predictions)), ("rejected rows", str(summary.n_rejected)),
                 ("rows file", rows_path.name), ("accuracy", f"{pct(summary.accuracy)}%")]
    part.sections += funnel_section([("predictions", [r.get("cascade") for r in rows])], part)
    cats = merge_categories({"score": summary.categories})
    if cats:
        part.sections.append(accuracy_section(cats, [("score", "accuracy")], part, {"score": summary.accuracy},
                                              "Truth accuracy per category"))
    if summary.rejections:
        part.notes.append(f"{len(summary.rejections)} row(s) rejected; first: {summary.rejections[0]}")
    browser_rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for row in rows:
        stage = stage_of(row.get("cascade"))
        browser_rows.append({"i": len(details), "id": row.get("id"), "category": row.get("category", ""),
                             "outcome": "right" if row.get("correct") else "wrong", "stage": stage,
                             "ref_ok": None, "target_ok": bool(row.get("correct"))})
        details.append({"query": f"example {row.get('example_id')} (queries are not stored by score --json)",
                        "base": f"parse status: {row.get('parse_status')}",
                        "base_saag": saag_brief(row.get("cascade")),
                        "conditions": [{"label": "prediction", "correct": bool(row.get("correct")),
                                        "truth": row.get("truth_reason", ""), "saag": saag_brief(row.get("cascade"))}]})
    if browser_rows:
        part.data["examples"] = details
        counts = Counter(r["outcome"] for r in browser_rows)
        part.sections.append({"id": f"{part.anchor}-examples", "title": "Prediction browser", "browser": True,
                              "intro": "One row per scored prediction; stage = where its SAAG cascade stopped.",
                              "rows": browser_rows, "ref_label": None, "target_label": "prediction",
                              "categories": sorted({r["category"] for r in browser_rows}),
                              "outcomes": [o for o in ("right", "wrong") if counts.get(o)],
                              "outcome_counts": dict(counts),
                              "stages": [s for s in ("1", "2", "3", "passed", "n/a")
                                         if any(r["stage"] == s for r in browser_rows)]})
    return part
