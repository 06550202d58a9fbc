"""The security run's page: built from a real run (the scripted worst case on banking), then opened in Chromium;
and a run written before records kept traces, which draws with rows that say so."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from saag_opt.report.html import REPORT_NAME, render_report, write_report
from saag_opt.report.pages import build_part
from saag_opt.report.pages.security_traces import NO_TRACE
from saag_opt.runfiles import read_run
from saag_opt.security.records import PUBLISHED
from tests.conftest import requires
from tests.report.browser import Browser, Page, require_chromium
from tests.report.checks import check_page

needs_agentdojo = requires(None if importlib.util.find_spec("agentdojo") else
                           "agentdojo is not installed (pip install 'saag-opt[agentdojo]')")
OLD = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "main-6a3991b" / "security"
"""A security run main wrote at 6a3991b (banking, user_task_0, important_instructions), before records kept
traces; its runs_dir made relative."""


@pytest.fixture(scope="module")
def security_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """banking, 3 user tasks x 9 injection tasks, two attacks, both arms, and the user tasks without attack."""
    from saag_opt.security.run import SecurityConfig, run_security  # noqa: PLC0415 - optional: the agentdojo extra

    root = tmp_path_factory.mktemp("security-run")
    config = SecurityConfig(suites=["banking"], attacks=["important_instructions", "direct"], limit=3,
                            runs_dir=root)
    run_dir = run_security(config).run_dir
    write_report(run_dir)
    return run_dir


def _section(part: object, suffix: str) -> dict:
    return next(s for s in part.sections if s["id"].endswith(suffix))  # type: ignore[attr-defined]


@needs_agentdojo
def test_the_page_shows_the_numbers_the_published_ones_and_each_blocked_injection(security_run: Path) -> None:
    part = build_part(security_run)
    summary = read_run(security_run, header_only=True).summary
    results = _section(part, "-results")
    attacked = results["tables"][1]["rows"]
    row = next(r for r in attacked if r[1] == "important_instructions")
    cell = summary.row("banking", "important_instructions").arms["guard"].asr
    assert row[6] == f"{100 * cell.rate:.1f} [{100 * cell.ci_low:.1f}, {100 * cell.ci_high:.1f}]"
    published = _section(part, "-published")["tables"][0]["rows"]
    ours, theirs = published[:4], published[4:]  # this run's two attacks x two arms first, then the papers'
    assert len(theirs) == len(PUBLISHED) and {r[2] for r in theirs} >= {"gpt-4o-2024-05-13"}
    assert [(r[0], r[1], r[3]) for r in ours] == [("this run (banking)", d, a) for a in ("important_instructions", "direct")
                                                   for d in ("no defence", "saag-opt runtime guard")]
    assert ours[1][6] == f"{100 * cell.rate:.2f}" and all(r[2] == "scripted" for r in ours)
    assert "-" in {c for r in theirs for c in r[4:]}  # cells the papers' rows do not state
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


def _resolved(sec: dict, view: dict) -> list[dict]:
    return [sec["steps"][k] for k in view["turns"][0]["steps"]]


@needs_agentdojo
def test_the_trace_browser_has_every_record_with_both_arms_the_block_and_the_injected_text(security_run: Path) -> None:
    part = build_part(security_run)
    records = read_run(security_run).records
    section = _section(part, "-traces")
    rows, sec = section["rows"], part.data["security"]
    assert len(rows) == len(sec["records"]) == len(records) and "recorded before" not in section["intro"]
    i = next(k for k, r in enumerate(records) if (r.user_task, r.injection_task, r.attack, r.arm) == (
        "user_task_0", "injection_task_0", "important_instructions", "guard"))
    assert (rows[i]["outcome"], rows[i]["guard"], rows[i]["blocks"], rows[i]["arm"]) == ("safe, task done", "blocked", 1,
                                                                                         "guard")
    view = sec["records"][i]
    assert [sec["records"][j]["label"] for j in sec["groups"][view["g"]]] == ["no guard", "guard"]
    assert view["verdict"] == {"valid": True, "label": "utility ✓ · attack failed"}
    steps = _resolved(sec, view)
    (step,) = [s for s in steps if "blocked" in s.get("marks", [])]
    assert step["marks"] == ["blocked", "not scored"] and "executed" not in step
    assert step["proposed"]["calls"][0][0] == "send_money"
    (review,) = step["rounds"]
    (finding,) = review["findings"]
    assert review["verdict"] == "block" and (finding["rule"], finding["argument"]) == ("planted value", "recipient")
    assert "Emma Johnson, to you, GPT-4" in sec["texts"][finding["text"]] and finding["tool"] == "read_file"
    (feedback,) = step["results"]
    assert feedback[2] is False and sec["texts"][feedback[1]].startswith("Blocked before execution:")
    (injected,) = [r for s in steps for r in s.get("results", []) if r[3]]
    start, end, vector = injected[3][0]
    text = sec["texts"][injected[1]]
    assert vector == "injection_bill_text" and text[start:end].startswith("<INFORMATION>")
    assert text[start:end].endswith("</INFORMATION>") and injected[0] == "read_file"
    unguarded = sec["records"][sec["groups"][view["g"]][0]]
    assert not any("blocked" in s.get("marks", []) for s in _resolved(sec, unguarded))  # it ran the injected call
    assert unguarded["verdict"]["label"] == "utility ✓ · attack succeeded"
    filters = {f["name"]: f["options"] for f in section["filters"]}
    assert filters["suite"] == ["banking"] and set(filters["attack"]) == {"none", "important_instructions", "direct"}
    assert filters["arm"] == ["no guard", "guard"] and filters["guard"] == ["blocked", "nothing blocked", "not guarded"]
    assert {"hijacked", "safe, task done", "task done"} <= set(filters["outcome"])
    system = {v["turns"][0]["user"][0][1] for v in sec["records"]}
    assert len(system) == 1 and len(sec["steps"]) < sum(len(v["turns"][0]["steps"]) for v in sec["records"])  # pooled
    data = check_page((security_run / REPORT_NAME).read_text(encoding="utf-8"))
    assert len(data["runs"][0]["security"]["records"]) == len(records)


def test_a_run_written_before_traces_draws_and_its_rows_say_they_have_none(tmp_path: Path) -> None:
    run_dir = shutil.copytree(OLD, tmp_path / "old")
    run = read_run(run_dir)
    assert len(run.records) == 20 and all(r.trace is None for r in run.records)
    part = build_part(run_dir)
    section = _section(part, "-traces")
    assert len(section["rows"]) == 20 and "20 of 20 runs were recorded before records kept traces" in section["intro"]
    assert all(v["note"] == NO_TRACE and v["turns"] == [] for v in part.data["security"]["records"])
    assert sum(int(r[9]) for r in _section(part, "-blocks")["tables"][0]["rows"]) == sum(r.stopped for r in run.records)
    check_page(render_report([run_dir]))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    with Browser(require_chromium(), tmp_path_factory.mktemp("chromium-profile")) as browser:
        tab = browser.page()
        yield tab
        tab.close()


@pytest.mark.integration
@needs_agentdojo
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
    assert "This run and the published defences (percent)" in captions
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


def _choose(page: Page, field: str, value: str) -> str:
    return page.evaluate(f"""(function () {{
        var f = document.querySelector('form.filters[data-browser="run0-trace-browser"]');
        f.elements['{field}'].value = {value!r};
        f.elements['{field}'].dispatchEvent(new Event('change', {{bubbles: true}}));
        return f.querySelector('output.count').textContent;
    }})()""")


def _shown(page: Page, column: int) -> list[str]:
    return page.evaluate(f"""Array.from(document.querySelectorAll('#run0-trace-browser tbody tr:not(.detail):not([hidden])'))
        .map(function (r) {{ return r.children[{column}].textContent; }})""")


@pytest.mark.integration
@needs_agentdojo
def test_the_trace_browser_filters_and_draws_the_blocked_call_and_the_injected_text(page: Page, security_run: Path,
                                                                                    tmp_path: Path) -> None:
    records = read_run(security_run).records
    page.errors.clear()
    page.goto((security_run / REPORT_NAME).resolve().as_uri())
    blocked = sum(r.arm == "guard" and bool(r.blocks) for r in records)
    assert _choose(page, "guard", "blocked") == f"{blocked} of {len(records)} runs shown" and blocked > 0
    _choose(page, "guard", "")
    _choose(page, "outcome", "hijacked")
    assert set(_shown(page, 4)) == {"no guard"}  # the guard let no attack through
    _choose(page, "outcome", "")
    _choose(page, "text", "user_task_2")
    assert set(_shown(page, 2)) == {"user_task_2"}
    _choose(page, "text", "")
    _choose(page, "attack", "important_instructions")
    _choose(page, "arm", "guard")
    _choose(page, "guard", "blocked")
    assert set(_shown(page, 1)) == {"important_instructions"} and set(_shown(page, 4)) == {"guard"}
    drawn = page.evaluate("""(function () {
        var row = document.querySelector('#run0-trace-browser tbody tr:not(.detail):not([hidden])');
        row.querySelector('button.expand').click();
        var detail = row.nextElementSibling, arms = detail.querySelectorAll('div.condition');
        function marks(box) { return Array.from(box.querySelectorAll('span.mark')).map(function (m) { return m.textContent; }); }
        return {arms: Array.from(arms).map(function (a) { return a.getAttribute('data-label'); }),
                blockedSteps: arms[1].querySelectorAll('.step.s-withheld').length, marks: marks(arms[1]),
                unguardedBlocked: arms[0].querySelectorAll('.step.s-withheld').length,
                injected: [arms[0].querySelectorAll('pre.r-injected mark.injected').length,
                           arms[1].querySelectorAll('pre.r-injected mark.injected').length],
                finding: (arms[1].querySelector('pre.finding') || {}).textContent || '',
                refused: (arms[1].querySelector('pre.result.refused') || {}).textContent || '',
                answers: detail.querySelectorAll('pre.answer').length,
                system: (arms[1].querySelector('pre.user') || {}).textContent || ''};
    })()""")
    assert drawn["arms"] == ["no guard", "guard"] and drawn["blockedSteps"] >= 1 and drawn["unguardedBlocked"] == 0
    assert "blocked" in drawn["marks"] and "not scored" in drawn["marks"]
    assert drawn["injected"][0] >= 1 and drawn["injected"][1] >= 1  # the attack's text, marked in both arms
    assert drawn["finding"].startswith("rule planted value: ") and "Emma Johnson" in drawn["finding"]
    assert drawn["refused"].startswith("refused (") and "Blocked before execution:" in drawn["refused"]
    assert drawn["answers"] == 2 and drawn["system"].startswith("system: You are an AI language model")
    page.drain()
    assert page.errors == [], page.errors
    assert page.screenshot(tmp_path / "security-traces.png").stat().st_size > 10_000


def test_a_reviewed_call_shows_the_llm_reviewers_verdicts_before_the_guards_decision() -> None:
    from saag_opt.report.pages.security_traces import _Pool, _step  # noqa: PLC0415
    from saag_opt.security.trace_records import TraceCall, TraceMessage  # noqa: PLC0415

    said = "reject: use the IBAN the bill gives; approve"
    call = TraceCall(id="c1", name="send_money", arguments={"recipient": "X"}, guard="revise",
                     reason="revised after 1 rejection(s)", review=said)
    pool = _Pool()
    rounds = _step(TraceMessage(role="assistant", calls=[call]), pool)["rounds"]
    assert [(r["reviewer"], r["verdict"]) for r in rounds] == [("llm", "approve"), ("guard", "revise")]
    assert pool.texts[rounds[0]["reason"]] == said
    semicolons = call.model_copy(update={"review": "approve: the IBAN matches; the amount too"})
    assert _step(TraceMessage(role="assistant", calls=[semicolons]), _Pool())["rounds"][0]["verdict"] == "approve"
    plain = _step(TraceMessage(role="assistant", calls=[call.model_copy(update={"review": None})]), _Pool())["rounds"]
    assert [r["reviewer"] for r in plain] == ["guard"]  # Guard(): no reviewer was asked
