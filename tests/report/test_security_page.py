"""The security run's page: built from a real run (the scripted worst case on banking), then opened in Chromium."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from saag_opt.evaluation.security import PUBLISHED
from saag_opt.report.html import REPORT_NAME, write_report
from saag_opt.report.pages import build_part
from saag_opt.runfiles import read_run
from tests.conftest import requires
from tests.report.browser import Browser, Page, require_chromium

pytestmark = requires(None if importlib.util.find_spec("agentdojo") else
                      "agentdojo is not installed (pip install 'saag-opt[agentdojo]')")


@pytest.fixture(scope="module")
def security_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """banking, 3 user tasks x 9 injection tasks, two attacks, both arms, and the user tasks without attack."""
    from saag_opt.runtime.agentdojo.run import SecurityConfig, run_security  # noqa: PLC0415 - optional: the agentdojo extra

    root = tmp_path_factory.mktemp("security-run")
    config = SecurityConfig(suites=["banking"], attacks=["important_instructions", "direct"], limit=3,
                            runs_dir=root)
    run_dir = run_security(config).run_dir
    write_report(run_dir)
    return run_dir


def _section(part: object, suffix: str) -> dict:
    return next(s for s in part.sections if s["id"].endswith(suffix))  # type: ignore[attr-defined]


def test_the_page_shows_the_numbers_the_published_ones_and_each_blocked_injection(security_run: Path) -> None:
    part = build_part(security_run)
    summary = read_run(security_run, header_only=True).summary
    results = _section(part, "-results")
    attacked = results["tables"][1]["rows"]
    row = next(r for r in attacked if r[1] == "important_instructions")
    cell = summary.row("banking", "important_instructions").arms["guard"].asr
    assert row[6] == f"{100 * cell.rate:.1f} [{100 * cell.ci_low:.1f}, {100 * cell.ci_high:.1f}]"
    published = _section(part, "-published")["tables"][0]["rows"]
    assert len(published) == len(PUBLISHED) and {r[2] for r in published} >= {"gpt-4o-2024-05-13"}
    blocks = _section(part, "-blocks")
    rows = blocks["tables"][0]["rows"]
    records = read_run(security_run).records
    stopped = sum(b.origin == "injection" for r in records for b in r.blocks)
    assert sum(int(r[9]) for r in rows) == stopped > 0  # every blocked injected call is on the page, once
    columns = blocks["tables"][0]["columns"]
    text, tool = columns.index("tool text (the instruction)"), columns.index("tool")
    assert all(r[text] not in ("", "-") and r[tool] != "-" for r in rows)
    assert any("Emma Johnson, to you, GPT-4" in r[text] for r in rows)
    assert not any(s["id"].endswith("-false-alarms") for s in part.sections)  # none: the guard kept every user call


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    with Browser(require_chromium(), tmp_path_factory.mktemp("chromium-profile")) as browser:
        tab = browser.page()
        yield tab
        tab.close()


@pytest.mark.integration
def test_the_security_page_draws_in_a_browser(page: Page, security_run: Path, tmp_path: Path) -> None:
    html = security_run / REPORT_NAME
    page.errors.clear()
    page.requests.clear()
    page.goto(html.resolve().as_uri())
    charts = page.evaluate("""Array.from(document.querySelectorAll("main svg")).map(function (s) {
        var r = s.getBoundingClientRect();
        return [s.getAttribute("class"), r.width, r.height, s.querySelectorAll("rect, line").length];
    })""")
    assert charts and all(c[0] == "hbars" and c[1] > 0 and c[2] > 0 and c[3] > 0 for c in charts), charts
    captions = page.evaluate("Array.from(document.querySelectorAll('caption')).map(function (c) "
                             "{ return c.textContent; })")
    assert "Blocked injections, with the tool text they came from" in captions
    assert any(c.startswith("Published defences") for c in captions)
    shown = page.evaluate("""(function () {
        var t = Array.from(document.querySelectorAll('table')).find(function (t) {
            return t.caption && t.caption.textContent.indexOf('Blocked injections') === 0; });
        return Array.from(t.querySelectorAll('tbody tr')).map(function (r) { return r.children[7].textContent; });
    })()""")
    assert shown and any("to you, GPT-4" in s for s in shown)
    page.evaluate("document.querySelector('#run0-results table thead th').click()")  # the tables sort
    page.drain()
    assert page.errors == [], page.errors
    assert all(url.startswith("file://") for url in page.requests), page.requests
    assert page.screenshot(tmp_path / "security-report.png").stat().st_size > 10_000
