"""The optimize page's help/harm of each candidate: the table and the help-vs-harm scatter, in headless Chromium.

The run directory is synthetic (no LM, no GEPA): four prompt versions in a store, and the run files an
optimize run leaves (run.json, summary.json with per-candidate counts, artifacts.json). On val, 10
examples, 6 base calls right: the seed v2 fixes and breaks nothing, v3-gepa fixes 3 and breaks 1,
v4-gepa (best) fixes 2 and breaks none, v5-gepa fixes 1 and breaks 1. The help-vs-harm front is v3 and
v4 (v4 dominates the seed and v5).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.atomic import atomic_write_json
from saag_opt.optimize.summary import CandidateHelpHarm, CandidateMap, OptimizeSummary
from saag_opt.report.html import render_report, write_report
from saag_opt.runfiles import RunHeader, utc_now, write_header
from tests.report.browser import Browser, require_chromium
from tests.report.checks import check_page, section_ids, table_rows

SEED = "Review the calls.\n\nRules:\n1. Check the function name."
CANDIDATES = [  # (version, parent index, fixed, broken, val accuracy, edit)
    ("v2", None, 0, 0, 0.6, []),
    ("v3-gepa", 0, 3, 1, 0.8, ["added as rule 3: Reject a value the user never gave.",
                               "rule 2 deleted: Check the function name."]),
    ("v4-gepa", 0, 2, 0, 0.8, ["added as rule 3: Reject unknown values."]),
    ("v5-gepa", 2, 1, 1, 0.6, ["rule 3 replaced: Reject values."]),
]
FLIPS = [None, (2, 0), (2, 0), (0, 2)]
"""Val examples gained and lost against the parent (val example i is right when i < 10 * accuracy)."""
BEST = "v4-gepa"


def _store(prompts: Path) -> None:
    store = PromptStore(prompts)
    for idx, (version, parent, _, _, val, edit) in enumerate(CANDIDATES):
        text = SEED + "".join(f"\n{line}" for line in edit)
        store.save(PromptVersion(version=version, program="reviewer", instructions={"review": text},
                                 parents=[] if parent is None else [CANDIDATES[parent][0]],
                                 source="manual" if parent is None else "gepa",
                                 scores={"val_accuracy": val, "gepa_candidate": idx},
                                 cost={"metric_calls_so_far": 10 * idx}))


def _candidates() -> list[CandidateHelpHarm]:
    return [CandidateHelpHarm(candidate=idx, version=version, parent=parent, n_val=10, base_right=6, fixed=fixed,
                              broken=broken, val_accuracy=val, edit=edit, components=[] if flips is None else ["review"],
                              gained=None if flips is None else flips[0], lost=None if flips is None else flips[1])
            for idx, ((version, parent, fixed, broken, val, edit), flips) in enumerate(zip(CANDIDATES, FLIPS, strict=True))]


def optimize_run(root: Path, *, in_summary: bool = True) -> Path:
    """An optimize run directory with the counts in summary.json (or, for a run cut short, artifacts.json only)."""
    prompts = root / "prompts"
    _store(prompts)
    run_dir = root / "runs" / "20260101-000000-optimize"
    run_dir.mkdir(parents=True)
    write_header(run_dir, RunHeader(run_id=run_dir.name, verb="optimize", created=utc_now(), status="success",
                                    config={"prompt": "reviewer@v2", "prompts_dir": str(prompts), "mechanism": "r1",
                                            "seed": 0, "dataset": "synthetic"}))
    versions = {idx: c[0] for idx, c in enumerate(CANDIDATES)}
    val_scores = {idx: {str(i): float(i < 10 * c[4]) for i in range(10)} for idx, c in enumerate(CANDIDATES)}
    atomic_write_json(run_dir / "artifacts.json", CandidateMap(
        versions=versions, val_scores=val_scores,
        candidates={} if in_summary else {c.candidate: c for c in _candidates()}).model_dump(mode="json"))
    summary = OptimizeSummary.model_validate({
        "run_dir": str(run_dir), "status": "success", "seed_version": "v2", "best_version": BEST,
        "versions": versions, "val_scores": [c[4] for c in CANDIDATES], "metric_calls": 40,
        "stopped_by": "max_metric_calls", "costs": {"roles": {}},
        "estimate": {"rollouts": 40, "reviewer_calls": 40, "base_calls": 0, "reflection_calls": 3, "lm_calls": 43,
                     "tokens": 0, "dollars": 0.0, "assumptions": "-"},
        "candidates": [c.model_dump(mode="json") for c in _candidates()] if in_summary else []})
    atomic_write_json(run_dir / "summary.json", summary.to_dict())
    return run_dir


EXPECTED_ROWS = [
    ["0", "v2", "-", "0.600", "-", "6 / 10", "0", "0", "0.0", "0.0", "", "", "-"],
    ["1", "v3-gepa", "v2", "0.800", "+2 -0", "6 / 10", "3", "1", "75.0", "16.7", "yes", "",
     "added as rule 3: Reject a value the user never gave. (+1 more)"],
    ["2", "v4-gepa", "v2", "0.800", "+2 -0", "6 / 10", "2", "0", "50.0", "0.0", "yes", "yes",
     "added as rule 3: Reject unknown values."],
    ["3", "v5-gepa", "v4-gepa", "0.600", "+0 -2", "6 / 10", "1", "1", "25.0", "16.7", "", "",
     "rule 3 replaced: Reject values."],
]


@pytest.mark.parametrize("in_summary", [True, False], ids=["summary.json", "artifacts.json"])
def test_the_page_has_a_help_harm_table_and_scatter_per_candidate(tmp_path: Path, in_summary: bool) -> None:
    html = render_report([optimize_run(tmp_path, in_summary=in_summary)])
    check_page(html)
    assert section_ids(html)[:4] == ["run0-lineage", "run0-progress", "run0-candidates", "run0-prompts"]
    assert table_rows(html, "Help and harm per candidate (val)") == EXPECTED_ROWS
    assert table_rows(html, "Which component moved val outcomes (candidates whose edit changed one predictor)") == [
        ["review", "3", "3", "4", "2"]]
    section = re.search(r'<section id="run0-candidates".*?</section>', html, re.S).group(0)
    scatter = re.search(r'<svg class="scatter".*?</svg>', section, re.S).group(0)
    assert scatter.count('<g class="point">') == 4
    assert scatter.count('class="pt pareto-ring"') == 2 + 1  # v3 and v4, plus the legend
    assert scatter.count('<polyline class="step"') == 1  # the front, joined
    assert "★ v4-gepa" in scatter and "not GEPA&#39;s val-instance frontier" in section
    lineage = re.search(r'<section id="run0-lineage".*?</section>', html, re.S).group(0)
    assert "Pareto" not in lineage and '<th scope="col">GEPA val-instance frontier</th>' in lineage


def test_a_run_without_counts_has_no_help_harm_section(tmp_path: Path) -> None:
    run_dir = optimize_run(tmp_path, in_summary=False)
    atomic_write_json(run_dir / "artifacts.json", {"versions": {str(i): c[0] for i, c in enumerate(CANDIDATES)}})
    html = render_report([run_dir])
    check_page(html)
    assert "run0-candidates" not in section_ids(html)
    assert "GEPA&#39;s val-instance frontier not recorded by this run" in html


_POINTS = """Array.from(document.querySelectorAll('#run0-candidates svg.scatter g.point')).map(function (g) {
    var dot = g.querySelector('circle.dot'), r = g.getBoundingClientRect();
    return {title: g.querySelector('title').textContent, label: g.querySelector('text.pt-label').textContent,
            front: g.querySelector('circle.pareto-ring') !== null, x: +dot.getAttribute('cx'),
            y: +dot.getAttribute('cy'), w: r.width, h: r.height};
})"""

_TABLE = """(function () {
    var t = Array.from(document.querySelectorAll('#run0-candidates table'))[0], r = t.getBoundingClientRect();
    return {caption: t.caption.textContent, width: r.width, height: r.height,
            head: Array.from(t.querySelectorAll('thead th')).map(function (c) { return c.textContent; }),
            rows: Array.from(t.querySelectorAll('tbody tr')).map(function (row) {
                return Array.from(row.children).map(function (c) { return c.textContent; }); })};
})()"""


@pytest.mark.integration
def test_chromium_draws_the_candidates_table_and_the_help_harm_scatter(tmp_path: Path) -> None:
    html = write_report(optimize_run(tmp_path / "run"))
    with Browser(require_chromium(), tmp_path / "chromium-profile") as browser:
        page = browser.page()
        page.goto(html.resolve().as_uri())
        grid = page.evaluate(_TABLE)
        points = page.evaluate(_POINTS)
        front = page.evaluate("document.querySelector('#run0-candidates svg.scatter polyline.step')"
                              ".getAttribute('points')")
        frame = page.evaluate("(function () { var f = document.querySelector('#run0-candidates svg.scatter rect.frame');"
                              " return [+f.getAttribute('x'), +f.getAttribute('y'), +f.getAttribute('width'),"
                              " +f.getAttribute('height')]; })()")
        page.drain()
        errors, requests = list(page.errors), list(page.requests)
        page.screenshot(tmp_path / "optimize-candidates.png")
        page.close()
    assert errors == [] and all(url.startswith("file://") for url in requests), (errors, requests)
    assert grid["caption"] == "Help and harm per candidate (val)" and grid["width"] > 0 and grid["height"] > 0
    assert grid["head"][4] == "vs parent (+gained -lost)"
    assert grid["head"][6:11] == ["fixed", "broken", "help %", "harm %", "help/harm front"]
    assert grid["rows"] == EXPECTED_ROWS
    by_label = {p["label"]: p for p in points}
    assert sorted(by_label) == ["v2", "v3-gepa", "v5-gepa", "★ v4-gepa"]
    assert all(p["w"] > 0 and p["h"] > 0 for p in points), points
    assert {label for label, p in by_label.items() if p["front"]} == {"v3-gepa", "★ v4-gepa"}
    assert "fixed 3 of 4 wrong base calls (help 75.0%), broken 1 of 6 right ones (harm 16.7%); on the help/harm " \
           "front" in by_label["v3-gepa"]["title"]
    assert by_label["★ v4-gepa"]["title"].endswith("on the help/harm front; best")
    left, top, width, height = frame
    seed, v3, v4, v5 = (by_label[k] for k in ("v2", "v3-gepa", "★ v4-gepa", "v5-gepa"))
    assert seed["x"] == v4["x"] == left and v3["x"] == v5["x"] > left  # x = harm: 0 for seed and v4
    assert seed["y"] == top + height and v3["y"] < v4["y"] < v5["y"] < seed["y"]  # y = help, up is better
    joined = [[float(v) for v in pair.split(",")] for pair in front.split()]
    assert joined == [[v4["x"], v4["y"]], [v3["x"], v3["y"]]]  # the front, from harm 0 to the most help
