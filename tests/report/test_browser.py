"""The report in a real browser: Debian's headless Chromium opens the file from disk (no server).

Checks what a reader relies on: no console error or uncaught exception, no request leaving the
file, every chart drawn with a non-zero size, the example browser's filters changing the visible
rows, a row expanding into its details. A screenshot of each page is saved in the test's tmp folder.
Under CI=true a missing Chromium fails the test instead of skipping it (.ci/run installs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from saag_opt.report.html import REPORT_NAME, write_report
from tests.episodes.world import needs_bfcl
from tests.report.browser import Browser, Page, require_chromium

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    with Browser(require_chromium(), tmp_path_factory.mktemp("chromium-profile")) as browser:
        tab = browser.page()
        yield tab
        tab.close()


def _open(page: Page, html: Path) -> None:
    page.errors.clear()
    page.requests.clear()
    page.goto(html.resolve().as_uri())


def _charts(page: Page) -> list[list]:
    return page.evaluate("""Array.from(document.querySelectorAll("main svg")).map(function (s) {
        var r = s.getBoundingClientRect();
        return [s.getAttribute("class"), r.width, r.height, s.querySelectorAll("rect, circle, path, line").length];
    })""")


def _visible(page: Page, table: str) -> int:
    return page.evaluate(f"document.querySelectorAll('{table} tbody tr:not(.detail):not([hidden])').length")


def _choose(page: Page, form: str, field: str, value: str) -> str:
    return page.evaluate(f"""(function () {{
        var f = document.querySelector('{form}');
        f.elements['{field}'].value = {value!r};
        f.elements['{field}'].dispatchEvent(new Event('change', {{bubbles: true}}));
        return f.querySelector('output.count').textContent;
    }})()""")


def _only_the_file(page: Page, html: Path) -> None:
    assert page.errors == [], page.errors
    assert all(url.startswith("file://") for url in page.requests), page.requests


def test_evaluate_report_draws_filters_and_expands(page: Page, eval_runs: dict[str, Path], tmp_path: Path) -> None:
    html = eval_runs["evaluate"] / REPORT_NAME
    _open(page, html)
    charts = _charts(page)
    assert {c[0] for c in charts} == {"hbars", "histogram"}
    assert all(w > 0 and h > 0 and shapes > 0 for _, w, h, shapes in charts), charts
    table = "#run0-browser"
    total = _visible(page, table)
    assert total == 12
    count = _choose(page, "form.filters", "outcome", "fixed")
    fixed = _visible(page, table)
    assert 0 < fixed < total and count == f"{fixed} of {total} examples shown"
    assert page.evaluate(f"""Array.from(document.querySelectorAll('{table} tbody tr:not([hidden])'))
        .every(function (r) {{ return r.children[2].textContent === 'fixed'; }})""")
    _choose(page, "form.filters", "outcome", "")
    assert _visible(page, table) == total
    _choose(page, "form.filters", "stage", "passed")
    assert _visible(page, table) < total
    _choose(page, "form.filters", "stage", "")
    page.evaluate(f"document.querySelector('{table} tbody tr button.expand').click()")
    detail = page.evaluate(f"document.querySelector('{table} tr.detail').textContent")
    assert "Query" in detail and "Base call" in detail and "review:" in detail and "Correctness" in detail
    page.drain()
    _only_the_file(page, html)
    shot = page.screenshot(tmp_path / "evaluate-report.png")
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


def test_compare_optimize_and_tune_reports_draw_without_errors(page: Page, eval_runs: dict[str, Path],
                                                               optimize_run: Path, tune_run: Path,
                                                               tmp_path: Path) -> None:
    expected = {"compare": {"hbars", "histogram"}, "optimize": {"dag", "scatter", "hbars"},
                "tune": {"scatter", "hbars"}}
    pages = {"compare": eval_runs["compare"] / REPORT_NAME, "optimize": optimize_run / REPORT_NAME,
             "tune": write_report(tune_run)}
    for name, html in pages.items():
        _open(page, html)
        charts = _charts(page)
        assert {c[0] for c in charts} == expected[name], (name, charts)
        assert all(w > 0 and h > 0 and shapes > 0 for _, w, h, shapes in charts), (name, charts)
        _only_the_file(page, html)
        page.screenshot(tmp_path / f"{name}-report.png")
    # the compare page's browser filters too (categories of the 12 matched examples)
    _open(page, pages["compare"])
    before = _visible(page, "#run0-browser")
    _choose(page, "form.filters", "category", "irrelevance")
    assert 0 < _visible(page, "#run0-browser") < before


def test_three_version_compare_report_draws_the_pair_matrix(page: Page, three_way_compare: Path,
                                                              tmp_path: Path) -> None:
    html = three_way_compare / REPORT_NAME
    _open(page, html)
    charts = _charts(page)
    assert {c[0] for c in charts} == {"hbars", "histogram"}
    assert all(w > 0 and h > 0 and shapes > 0 for _, w, h, shapes in charts), charts
    matrix = page.evaluate("""Array.from(document.querySelectorAll('#run0-pairs table')).map(function (t) {
        var r = t.getBoundingClientRect();
        return {caption: t.caption.textContent, width: r.width, height: r.height,
                head: Array.from(t.querySelectorAll('thead th')).map(function (c) { return c.textContent; }),
                rows: Array.from(t.querySelectorAll('tbody tr')).map(function (row) {
                    return Array.from(row.children).map(function (c) { return c.textContent; }); })};
    })""")
    grid, pairs = matrix
    assert grid["width"] > 0 and grid["height"] > 0 and grid["head"] == ["version", "A v1", "B v2", "C v3-gepa"]
    assert [row[0] for row in grid["rows"]] == ["A v1", "B v2", "C v3-gepa"]
    assert [row[i + 1] for i, row in enumerate(grid["rows"])] == ["·"] * 3
    assert grid["rows"][2][1] == "+33.3 pts" and grid["rows"][0][2] == "-16.7 pts"  # C - A; A - B
    assert [row[0] for row in pairs["rows"]] == ["B v2 vs A v1", "C v3-gepa vs A v1", "C v3-gepa vs B v2"]
    assert [row[7] for row in pairs["rows"]] == ["1", "0.375", "1"]  # Holm p
    accuracy = page.evaluate("Array.from(document.querySelectorAll('#run0-accuracy thead th'))"
                             ".map(function (c) { return c.textContent; })")
    assert accuracy == ["category", "n", "base accuracy %", "A v1 accuracy %", "B v2 accuracy %",
                        "C v3-gepa accuracy %"]
    latency = page.evaluate("Array.from(document.querySelectorAll('#run0-costs table')[0].querySelectorAll('tbody tr'))"
                            ".map(function (r) { return r.children[0].textContent; })")
    assert latency == ["A v1", "B v2", "C v3-gepa"]
    before = _visible(page, "#run0-browser")
    _choose(page, "form.filters", "outcome", "fixed")
    assert 0 < _visible(page, "#run0-browser") < before == 12
    page.drain()
    _only_the_file(page, html)
    page.screenshot(tmp_path / "compare-3-report.png")


def test_1000_example_report_filters_in_the_browser(page: Page, big_run: Path, tmp_path: Path) -> None:
    html = write_report(big_run)
    _open(page, html)
    assert _visible(page, "#run0-browser") == 1000
    _choose(page, "form.filters", "category", "multiple")
    multiple = _visible(page, "#run0-browser")
    _choose(page, "form.filters", "outcome", "broken")
    both = _visible(page, "#run0-browser")
    assert 0 < both < multiple < 1000
    page.evaluate("document.querySelector('#run0-browser thead th').click()")  # sort by example id
    first = page.evaluate("document.querySelector('#run0-browser tbody tr:not([hidden])').children[0].textContent")
    ids = page.evaluate("Array.from(document.querySelectorAll('#run0-browser tbody tr:not([hidden])'))"
                        ".map(function (r) { return r.children[0].textContent; })")
    assert first == sorted(ids)[0] and len(ids) == both
    page.drain()
    _only_the_file(page, html)
    page.screenshot(tmp_path / "evaluate-1000-report.png")


@needs_bfcl
def test_the_conversation_browser_filters_flipped_entries_and_switches_views(page: Page, multiturn_run: Path,
                                                                             tmp_path: Path) -> None:
    html = multiturn_run / REPORT_NAME
    _open(page, html)
    table = "#run0-browser"
    assert page.evaluate(f"document.querySelector('{table}').getAttribute('data-kind')") == "conversations"
    assert _visible(page, table) == 3
    count = _choose(page, "form.filters", "outcome", "flipped")
    assert _visible(page, table) == 1 and count == "1 of 3 entries shown"
    page.evaluate(f"document.querySelector('{table} tbody tr:not([hidden]) button.expand').click()")
    detail = f"{table} tr.detail"
    text = page.evaluate(f"document.querySelector('{detail}').textContent")
    for expected in ("turn 0", "step 0", "proposed: ", "mkdir(dir_name=\"tmp\")", "review: reject", "feedback:",
                     "review: approve", "executed: ", "result (", "✗ invalid", "multi_turn:instance_state_mismatch",
                     "checker failed here", "failed at turn 0", "✓ valid", "user: "):
        assert expected in text, expected
    columns = page.evaluate(f"""Array.from(document.querySelectorAll('{detail} div.condition')).map(function (c) {{
        var r = c.getBoundingClientRect(); return [c.getAttribute('data-label'), Math.round(r.left), r.width > 0]; }})""")
    assert [c[0] for c in columns] == ["base", "r2"] and columns[0][1] < columns[1][1]  # side by side
    page.evaluate(f"""Array.from(document.querySelectorAll('{detail} button.view'))
        .find(function (b) {{ return b.textContent === 'r2'; }}).click()""")
    shown = page.evaluate(f"""Array.from(document.querySelectorAll('{detail} div.condition'))
        .filter(function (c) {{ return !c.hidden; }}).map(function (c) {{ return c.getAttribute('data-label'); }})""")
    assert shown == ["r2"]
    _choose(page, "form.filters", "outcome", "")
    assert _visible(page, table) == 3
    _choose(page, "form.filters", "stage", "valid")
    assert _visible(page, table) == 3
    page.drain()
    _only_the_file(page, html)
    shot = page.screenshot(tmp_path / "multiturn-report.png")
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
