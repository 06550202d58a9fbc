"""Optimize runs: GEPA lineage, val score against metric calls, prompt diffs, seed vs best on TEST."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from saag_opt.errors import SaagOptError
from saag_opt.report import charts
from saag_opt.report.pages.base import Part, append, header_meta, new_part, num, read_json, read_records, table
from saag_opt.report.pages.browser import browser_section, load_queries
from saag_opt.report.pages.sections import compare_sections, reviewed_conditions
from saag_opt.runfiles import RunHeader


def optimize_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    """The part of an optimize run: lineage, progress, prompt diffs, the TEST phase, the example browser."""
    from saag_opt.artifacts import PromptStore, diff_versions

    summary = read_json(run_dir / "summary.json") or {}
    artifacts = read_json(run_dir / "artifacts.json") or {}
    seed_name = summary.get("seed_version") or str(header.config.get("prompt", "")).rpartition("@")[2]
    part = new_part("optimize", f"Optimize {header.run_id}: GEPA over the reviewer's instructions", index)
    part.meta = header_meta(header) + [("seed prompt", str(header.config.get("prompt"))),
                                 ("mechanism", str(header.config.get("mechanism"))),
                                 ("best version", str(summary.get("best_version", "-"))),
                                 ("metric calls", str(summary.get("metric_calls", "-"))),
                                 ("stopped by", str(summary.get("stopped_by", "-")))]
    versions_map = {int(k): v for k, v in (artifacts.get("versions") or summary.get("versions") or {}).items()}
    versions_map.setdefault(0, seed_name)
    store = PromptStore(header.config.get("prompts_dir"))
    program = "reviewer"
    loaded: dict[int, Any] = {}
    for idx, name in sorted(versions_map.items()):
        try:
            loaded[idx] = store.get(program, name)
        except SaagOptError:
            try:
                loaded[idx] = store.resolve(f"{program}@{name}")
            except SaagOptError:
                part.notes.append(f"prompt version {name} (candidate {idx}) not found in the store {store.root}")
    val_scores = summary.get("val_scores") or []
    pareto = _pareto_members(artifacts.get("val_scores") or {})
    best = summary.get("best_version")
    nodes = []
    name_of = {idx: v.version for idx, v in loaded.items()}
    for idx, version in sorted(loaded.items()):
        score = version.scores.get("val_accuracy")
        if score is None and idx < len(val_scores):
            score = val_scores[idx]
        nodes.append({"id": version.version, "parents": [p for p in version.parents if p in name_of.values()],
                      "idx": idx, "val": score, "best": version.version == best, "pareto": idx in pareto,
                      "calls": (version.cost or {}).get("metric_calls_so_far", 0 if idx == 0 else None)})
    if nodes:
        note = ("Pareto = best val score on at least one val example (GEPA's per-example frontier)"
                if pareto else "Pareto membership not recorded by this run (artifacts.json has no val_scores)")
        part.sections.append({
            "id": f"{part.anchor}-lineage", "title": "GEPA lineage",
            "intro": "Each box is a prompt version GEPA added to its pool, with its val score; arrows go from "
                     "parent to child. ★ = best (the seed unless a candidate cleared the val margin of "
                     f"optimize/rails.py); P = Pareto member. {note}.",
            "charts": [dict(charts.layered_dag(nodes), kind="dag", title="Lineage of prompt versions")],
            "tables": [table("Prompt versions", ["candidate", "version", "parents", "val score", "metric calls",
                                                  "best", "Pareto"],
                              [[n["idx"], n["id"], ", ".join(n["parents"]) or "-", num(n["val"]),
                                "-" if n["calls"] is None else n["calls"], "yes" if n["best"] else "",
                                "yes" if n["pareto"] else ""] for n in nodes], numeric=[0, 3, 4])]})
        dots = [{"x": n["calls"], "y": n["val"], "shape": "best" if n["best"] else "dot", "label": n["id"],
                 "title": f"{n['id']}: val {num(n['val'])} after {n['calls']} metric calls"}
                for n in nodes if n["calls"] is not None and n["val"] is not None]
        if dots:
            ordered = sorted(dots, key=lambda p: p["x"])
            line: list[tuple[float, float]] = []
            running = None
            for p in ordered:
                running = p["y"] if running is None else max(running, p["y"])
                if line:
                    line.append((p["x"], line[-1][1]))
                line.append((p["x"], running))
            total = summary.get("metric_calls")
            if total and line and total > line[-1][0]:
                line.append((float(total), line[-1][1]))
            part.sections.append({
                "id": f"{part.anchor}-progress", "title": "Val score against metric calls",
                "intro": "Each point is a version, placed at the cumulative metric calls when it was found; the "
                         "step line is the best val score so far.",
                "charts": [dict(charts.scatter(dots, x_label="metric calls (cumulative)", y_label="val score",
                                               lines=[line], y_range=(0.0, 1.0)), kind="scatter",
                                title="Val score vs metric calls")]})
        part.sections.append(_prompts_section(loaded, part, diff_versions))
    quarantined = (read_json(run_dir / "quarantine.json") or {}).get("quarantined") or []
    if quarantined:
        rows = [[q.get("iteration"), q.get("version"), q.get("parent"), _quarantine_of(store, program, q.get("version"))]
                for q in quarantined]
        part.sections.append({"id": f"{part.anchor}-quarantine", "title": "Quarantined proposals",
                              "intro": "Proposals GEPA's rails refused (optimize/rails.py): kept as prompt versions for "
                                       "the lineage, never in the pool, never best, never aliased.",
                              "tables": [table("Quarantined proposals", ["iteration", "version", "parent", "why"],
                                               rows, numeric=[0])]})
    test = summary.get("test") or {}
    if test.get("comparison"):
        seed_label, best_label = f"seed {test.get('seed')}", f"best {test.get('best')}"
        sections = compare_sections(test["comparison"], seed_label, best_label, part,
                                    seed=int(header.config.get("seed") or 0), prefix="TEST: ")
        sections[0]["intro"] = ("Seed vs best on the TEST split, which GEPA never saw: reported numbers come from "
                                "here, not from val. " + sections[0]["intro"])
        part.sections += sections
    records = read_records(run_dir)
    if records:
        reviewed = reviewed_conditions(records)
        queries, why = load_queries(header.config.get("dataset"), {r.example_id for r in records})
        if why:
            part.notes.append(why)
        pair = (reviewed[0], reviewed[-1]) if len(reviewed) > 1 else ("base", reviewed[0]) if reviewed else None
        if pair:
            append(part, browser_section(records, [("base", "base")] + [(c, c) for c in reviewed], pair,
                                          queries, part))
    return part


def _quarantine_of(store: Any, program: str, version: Any) -> str:
    try:
        return str(store.get(program, str(version)).quarantine or "-")
    except SaagOptError:
        return f"version not found in the store {store.root}"


def _pareto_members(scores: Mapping[str, Mapping[str, float]]) -> set[int]:
    """Candidates with the top score on at least one val example (ties: all of them)."""
    members: set[int] = set()
    by_example: dict[str, list[tuple[float, int]]] = {}
    for idx, per_example in scores.items():
        for example, value in (per_example or {}).items():
            by_example.setdefault(example, []).append((float(value), int(idx)))
    for cells in by_example.values():
        top = max(v for v, _ in cells)
        members.update(i for v, i in cells if v == top)
    return members


def _prompts_section(loaded: Mapping[int, Any], part: Part, diff_versions: Any) -> dict[str, Any]:
    by_name = {v.version: v for v in loaded.values()}
    items = []
    for idx, version in sorted(loaded.items()):
        parent = next((by_name[p] for p in version.parents if p in by_name), None)
        diff = diff_versions(parent, version).splitlines() if parent is not None else []
        items.append({"version": version.version, "idx": idx, "parent": parent.version if parent else None,
                      "instructions": dict(version.instructions), "score": version.scores.get("val_accuracy"),
                      "diff": [{"text": line, "kind": _diff_kind(line)} for line in diff]})
    return {"id": f"{part.anchor}-prompts", "title": "Prompt versions and their diffs",
            "intro": "Each version's instructions per predictor, and a unified diff (difflib) against its parent: "
                     "lines starting with + were added, - removed.", "prompts": items}


def _diff_kind(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "head"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del", "~": "meta"}.get(line[:1], "ctx")
