"""Optimize runs: GEPA lineage, val score against metric calls, help/harm per candidate, prompt diffs, TEST.

Two different fronts appear here and are named apart: GEPA's val-instance frontier (a candidate with
the top score on at least one val example, which GEPA samples parents from) in the lineage, and the
help-vs-harm front (no other candidate fixes as many wrong base calls while breaking as few right
ones, ``candidates.help_harm_front``) in the help/harm section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from saag_opt.artifacts import PromptStore, diff_versions
from saag_opt.errors import SaagOptError
from saag_opt.optimize.candidates import by_component, help_harm_front
from saag_opt.optimize.summary import CandidateHelpHarm, CandidateMap, OptimizeSummary, QuarantineLog
from saag_opt.report import charts
from saag_opt.report.format import first_change, flips, pct
from saag_opt.report.pages.base import Part, append, header_meta, new_part, num, table
from saag_opt.report.pages.browser import browser_section, load_queries
from saag_opt.report.pages.sections import compare_sections, reviewed_conditions
from saag_opt.runfiles import Run, read_model


def optimize_part(run: Run, index: int) -> Part:
    """The part of an optimize run: lineage, progress, prompt diffs, the TEST phase, the example browser."""
    header = run.header
    summary: OptimizeSummary | None = run.summary
    map_path = run.path / "artifacts.json"
    artifacts = read_model(map_path, CandidateMap) if map_path.is_file() else CandidateMap()
    part = new_part("optimize", f"Optimize {header.run_id}: GEPA over the reviewer's instructions", index)
    part.meta = header_meta(header) + [("seed prompt", str(header.config.get("prompt"))),
                                       ("mechanism", str(header.config.get("mechanism"))),
                                       ("best version", summary.best_version if summary else "-"),
                                       ("metric calls", str(summary.metric_calls) if summary else "-"),
                                       ("stopped by", str(summary.stopped_by) if summary else "-")]
    seed_name = summary.seed_version if summary else str(header.config.get("prompt", "")).rpartition("@")[2]
    versions = dict(artifacts.versions or (summary.versions if summary else {}))
    versions.setdefault(0, seed_name)
    store = PromptStore(header.config.get("prompts_dir"))
    loaded = _load_versions(store, versions, part)
    frontier = _frontier_members(artifacts.val_scores)
    nodes = _lineage_nodes(loaded, summary, frontier)
    if nodes:
        part.sections.append(_lineage_section(nodes, part, frontier_known=bool(frontier)))
        append(part, _progress_section(nodes, summary.metric_calls if summary else None, part))
    append(part, _helpharm_section(_candidates(summary, artifacts), versions,
                                   summary.best_version if summary else None, part))
    if nodes:
        part.sections.append(_prompts_section(loaded, part, diff_versions))
    append(part, _quarantine_section(run, store, part))
    test = summary.test if summary else None
    if test is not None and test.comparison is not None:
        sections = compare_sections(test.comparison, [f"seed {test.seed}", f"best {test.best}"], part,
                                    seed=int(header.config.get("seed") or 0), prefix="TEST: ")
        sections[0]["intro"] = ("Seed vs best on the TEST split, which GEPA never saw: reported numbers come from "
                                "here, not from val. " + sections[0]["intro"])
        part.sections += sections
    _browser(part, run.records, header.config.get("dataset"))
    return part


def _load_versions(store: Any, versions: Mapping[int, str], part: Part) -> dict[int, Any]:
    """Each candidate's prompt version from the run's store (a note for each one it no longer has)."""
    loaded: dict[int, Any] = {}
    for idx, name in sorted(versions.items()):
        try:
            loaded[idx] = store.get("reviewer", name)
        except SaagOptError:
            try:
                loaded[idx] = store.resolve(f"reviewer@{name}")
            except SaagOptError:
                part.notes.append(f"prompt version {name} (candidate {idx}) not found in the store {store.root}")
    return loaded


def _lineage_nodes(loaded: Mapping[int, Any], summary: OptimizeSummary | None, frontier: set[int]) -> list[dict]:
    """One node per saved candidate: its val score, parents, best and frontier marks, metric calls when found."""
    val_scores = summary.val_scores if summary else []
    best = summary.best_version if summary else None
    names = {v.version for v in loaded.values()}
    nodes = []
    for idx, version in sorted(loaded.items()):
        score = version.scores.get("val_accuracy")
        if score is None and idx < len(val_scores):
            score = val_scores[idx]
        nodes.append({"id": version.version, "parents": [p for p in version.parents if p in names],
                      "idx": idx, "val": score, "best": version.version == best, "frontier": idx in frontier,
                      "calls": (version.cost or {}).get("metric_calls_so_far", 0 if idx == 0 else None)})
    return nodes


def _lineage_section(nodes: Sequence[Mapping[str, Any]], part: Part, *, frontier_known: bool) -> dict[str, Any]:
    note = ("V = on GEPA's val-instance frontier: the top val score on at least one val example (where GEPA "
            "samples parents from; not the help-vs-harm front, which the help/harm section marks)"
            if frontier_known else "GEPA's val-instance frontier not recorded by this run (artifacts.json has no "
                                   "val_scores)")
    return {
        "id": f"{part.anchor}-lineage", "title": "GEPA lineage",
        "intro": "Each box is a prompt version GEPA added to its pool, with its val score; arrows go from "
                 "parent to child. ★ = best (the seed unless a candidate cleared the val margin of "
                 f"optimize/rails.py); {note}.",
        "charts": [dict(charts.layered_dag(nodes), kind="dag", title="Lineage of prompt versions")],
        "tables": [table("Prompt versions", ["candidate", "version", "parents", "val score", "metric calls",
                                              "best", "GEPA val-instance frontier"],
                          [[n["idx"], n["id"], ", ".join(n["parents"]) or "-", num(n["val"]),
                            "-" if n["calls"] is None else n["calls"], "yes" if n["best"] else "",
                            "yes" if n["frontier"] else ""] for n in nodes], numeric=[0, 3, 4])]}


def _progress_section(nodes: Sequence[Mapping[str, Any]], total: int | None, part: Part) -> dict[str, Any] | None:
    """Val score of each version at the metric calls it was found after, with the best-so-far step line."""
    dots = [{"x": n["calls"], "y": n["val"], "shape": "best" if n["best"] else "dot", "label": n["id"],
             "title": f"{n['id']}: val {num(n['val'])} after {n['calls']} metric calls"}
            for n in nodes if n["calls"] is not None and n["val"] is not None]
    if not dots:
        return None
    line: list[tuple[float, float]] = []
    running = None
    for p in sorted(dots, key=lambda p: p["x"]):
        running = p["y"] if running is None else max(running, p["y"])
        if line:
            line.append((p["x"], line[-1][1]))
        line.append((p["x"], running))
    if total and line and total > line[-1][0]:
        line.append((float(total), line[-1][1]))
    return {
        "id": f"{part.anchor}-progress", "title": "Val score against metric calls",
        "intro": "Each point is a version, placed at the cumulative metric calls when it was found; the "
                 "step line is the best val score so far.",
        "charts": [dict(charts.scatter(dots, x_label="metric calls (cumulative)", y_label="val score",
                                       lines=[line], y_range=(0.0, 1.0)), kind="scatter",
                        title="Val score vs metric calls")]}


def _quarantine_section(run: Run, store: Any, part: Part) -> dict[str, Any] | None:
    """The proposals GEPA's rails refused, each with the reason its prompt version keeps."""
    path = run.path / "quarantine.json"
    if not path.is_file():
        return None
    entries = read_model(path, QuarantineLog).quarantined
    if not entries:
        return None
    rows = [[e.iteration, e.version, e.parent, _quarantine_of(store, e.version)] for e in entries]
    return {"id": f"{part.anchor}-quarantine", "title": "Quarantined proposals",
            "intro": "Proposals GEPA's rails refused (optimize/rails.py): kept as prompt versions for the lineage, "
                     "never in the pool, never best, never aliased.",
            "tables": [table("Quarantined proposals", ["iteration", "version", "parent", "why"], rows, numeric=[0])]}


def _quarantine_of(store: Any, version: str) -> str:
    try:
        return str(store.get("reviewer", version).quarantine or "-")
    except SaagOptError:
        return f"version not found in the store {store.root}"


def _browser(part: Part, records: Sequence[Any], dataset: str | None) -> None:
    """The example browser over the TEST rows (reference: seed, target: best; else base vs the one condition)."""
    if not records:
        return
    reviewed = reviewed_conditions(records)
    queries, why = load_queries(dataset, {r.example_id for r in records})
    if why:
        part.notes.append(why)
    pair = (reviewed[0], reviewed[-1]) if len(reviewed) > 1 else ("base", reviewed[0]) if reviewed else None
    if pair:
        append(part, browser_section(records, [("base", "base")] + [(c, c) for c in reviewed], pair, queries, part))


def _frontier_members(scores: Mapping[int, Mapping[str, float]]) -> set[int]:
    """GEPA's val-instance frontier: candidates with the top score on at least one val example (ties: all)."""
    members: set[int] = set()
    by_example: dict[str, list[tuple[float, int]]] = {}
    for idx, per_example in scores.items():
        for example, value in (per_example or {}).items():
            by_example.setdefault(example, []).append((float(value), int(idx)))
    for cells in by_example.values():
        top = max(v for v, _ in cells)
        members.update(i for v, i in cells if v == top)
    return members


def _candidates(summary: OptimizeSummary | None, artifacts: CandidateMap) -> list[CandidateHelpHarm]:
    """Help/harm per candidate: the summary's, else (a run still going or cut short) artifacts.json's."""
    if summary is not None and summary.candidates:
        return list(summary.candidates)
    return [artifacts.candidates[idx] for idx in sorted(artifacts.candidates)]


def _helpharm_section(candidates: Sequence[CandidateHelpHarm], versions: Mapping[int, str], best: str | None,
                      part: Part) -> dict[str, Any] | None:
    """Per candidate on val: fixed and broken base calls, help and harm, the edit; a help-vs-harm scatter."""
    if not candidates:
        return None
    front = help_harm_front(candidates)
    rows = []
    for c in candidates:
        version = c.version or versions.get(c.candidate, "-")
        parent = "-" if c.parent is None else versions.get(c.parent, f"#{c.parent}")
        rows.append([c.candidate, version, parent, num(c.val_accuracy), flips(c.gained, c.lost),
                     f"{c.base_right} / {c.n_val}", c.fixed,
                     c.broken, pct(c.help), pct(c.harm), "yes" if c.candidate in front else "",
                     "yes" if version == best else "", first_change(c.edit, 120)])
    section: dict[str, Any] = {
        "id": f"{part.anchor}-candidates", "title": "Help and harm of each candidate on val",
        "intro": "Each candidate GEPA added to its pool, against the base agent alone on the val split: fixed = "
                 "wrong base calls the review made right, broken = right base calls it made wrong; help % = fixed / "
                 "base wrong, harm % = broken / base right. On the front = no other candidate fixes at least as "
                 "many while breaking at most as many, one strictly (not GEPA's val-instance frontier of the "
                 "lineage). Vs parent = val examples it gets right that its parent got wrong, and the reverse: what its "
                 "edit moved. The edit is the first rule-level change from the parent. Val picked the best, so "
                 "these numbers are optimistic: TEST below is the unbiased comparison.",
        "tables": [table("Help and harm per candidate (val)",
                         ["candidate", "version", "parent", "val accuracy", "vs parent (+gained -lost)",
                          "base right / n", "fixed", "broken", "help %", "harm %", "help/harm front", "best",
                          "edit from parent"],
                         rows, numeric=[0, 3, 6, 7, 8, 9])]}
    moved = by_component(candidates)
    if moved:
        section["tables"].append(table(
            "Which component moved val outcomes (candidates whose edit changed one predictor)",
            ["edited", "candidates", "moved any val outcome", "val examples gained", "val examples lost"],
            [[name, row["candidates"], row["moved"], row["gained"], row["lost"]] for name, row in sorted(moved.items())],
            numeric=[1, 2, 3, 4]))
    scatter = _helpharm_scatter(candidates, versions, front, best)
    if scatter is not None:
        section["charts"] = [scatter]
    return section


def _helpharm_scatter(candidates: Sequence[CandidateHelpHarm], versions: Mapping[int, str], front: set[int],
                      best: str | None) -> dict[str, Any] | None:
    """Harm (x) against help (y), one point per candidate with both rates; the front joined by a dashed line."""
    placed = [c for c in candidates if c.help is not None and c.harm is not None]
    if not placed:
        return None
    dots: list[dict[str, Any]] = []
    for c in placed:
        version = c.version or versions.get(c.candidate, f"#{c.candidate}")
        marks = ("; on the help/harm front" if c.candidate in front else "") + ("; best" if version == best else "")
        dots.append({"x": c.harm, "y": c.help, "shape": "pareto" if c.candidate in front else "dot",
                     "label": ("★ " if version == best else "") + version,
                     "title": f"{version} (candidate {c.candidate}): fixed {c.fixed} of {c.n_val - c.base_right} "
                              f"wrong base calls (help {pct(c.help)}%), broken {c.broken} of {c.base_right} right "
                              f"ones (harm {pct(c.harm)}%){marks}"})
    line = sorted({(p["x"], p["y"]) for p in dots if p["shape"] == "pareto"})
    return dict(charts.scatter(dots, x_label="harm: right base calls broken (lower is better)",
                               y_label="help: wrong base calls fixed (higher is better)",
                               x_range=(0.0, max(0.1, *(float(p["x"]) for p in dots))), y_range=(0.0, 1.0),
                               lines=[line] if len(line) > 1 else [], x_fmt="{:.0%}", y_fmt="{:.0%}",
                               legend=[("pareto", "on the front"), ("dot", "dominated")]),
                kind="scatter", title="Help vs harm of each candidate on val")


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
