"""Security runs (AgentDojo): the tables, the published defences, each blocked injection, every run's trace.

Each blocked injection is shown with the tool text it came from (``Decision.provenance``).
The numbers are the run's ``summary.json`` drawn with the terminal's own rows
(``report.security_tables``); the blocks are read from ``records.jsonl``. One blocked injection is
one distinct (suite, attack, injection task, call, tool text): the same planted text blocked in
many user tasks is one row that says in how many pairs and which user tasks. Last, the trace
browser (``security_traces``): every record's conversation, the guard's decisions and the answer.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from saag_opt.report import charts
from saag_opt.report.pages.base import Part, append, header_meta, new_part, table
from saag_opt.report.pages.security_traces import trace_section
from saag_opt.report.security_tables import (
    ATTACK_COLUMNS,
    BENIGN_COLUMNS,
    PUBLISHED_COLUMNS,
    published_rows,
    published_sources,
    run_rows,
    security_rows,
)
from saag_opt.runfiles import Run
from saag_opt.security.records import ALL, BENIGN, SecurityRecord, SecuritySummary

_CALL_CHARS = 160


def security_part(run: Run, index: int) -> Part:
    """The part of a security run."""
    header = run.header
    summary: SecuritySummary | None = run.summary
    records: list[SecurityRecord] = run.records
    part = new_part("security", f"Security {header.run_id}: AgentDojo with and without the guard", index)
    part.meta = header_meta(header) + ([("guard", summary.guard), ("benchmark", summary.benchmark)] if summary else [])
    if summary is not None:
        append(part, _results(summary, part))
    append(part, _published(summary, part))
    append(part, _blocks(records, part, origin="injection"))
    append(part, _blocks(records, part, origin="user"))
    append(part, _blocks(records, part, origin="other"))
    append(part, trace_section(records, part))
    return part


def _results(summary: SecuritySummary, part: Part) -> dict[str, Any]:
    tables = []
    benign = security_rows(summary, attacked=False)
    if benign:
        tables.append(table("Utility without attack (user tasks); false alarms = blocked ground-truth calls",
                            BENIGN_COLUMNS, benign, numeric=range(1, len(BENIGN_COLUMNS))))
    attacked = security_rows(summary, attacked=True)
    if attacked:
        tables.append(table("Under attack (pairs): utility and attack success rate (ASR); stopped = blocked "
                            "injected calls", ATTACK_COLUMNS, attacked, numeric=range(2, len(ATTACK_COLUMNS))))
    intro = (f"Agent: {summary.agent}. Guard: {summary.guard}. Scored by AgentDojo's own utility and security checks "
             "(security True = the attacker's goal was met). Rates in percent with 95% Wilson score intervals.")
    if summary.asr is not None:
        drop = f"{summary.utility_drop:.2f}" if summary.utility_drop is not None else "-"
        intro += (f" Over every attacked pair, the guarded ASR is {100 * summary.asr:.2f}% and the guarded utility "
                  f"under attack lies {drop} points below the unguarded run of the same user task without attack.")
    if summary.unreachable:
        intro += (f" {summary.unreachable} guarded pairs have an injection task whose ground truth makes no call: the "
                  "scripted agent cannot meet their goal, and AgentDojo counts them in the denominators.")
    section: dict[str, Any] = {"id": f"{part.anchor}-results", "title": "Utility and attack success, per suite and attack",
                               "intro": intro, "tables": tables}
    chart = _asr_chart(summary)
    if chart is not None:
        section["charts"] = [chart]
    return section


def _asr_chart(summary: SecuritySummary) -> dict[str, Any] | None:
    """ASR per attack (over every suite when there are several), without and with the guard."""
    suites = {r.suite for r in summary.rows if r.suite != ALL}
    scope = ALL if len(suites) > 1 else next(iter(suites), ALL)
    groups = []
    for row in summary.rows:
        if row.suite != scope or row.attack in (BENIGN, ALL):
            continue
        values, cis, texts = {}, {}, {}
        for arm, cell in row.arms.items():
            if cell.asr is not None and cell.asr.rate is not None:
                values[arm], cis[arm] = cell.asr.rate, (cell.asr.ci_low, cell.asr.ci_high)
                texts[arm] = f"{100 * cell.asr.rate:.1f}%"
        groups.append({"label": row.attack, "values": values, "cis": cis, "texts": texts})
    if not groups:
        return None
    series = [{"key": "none", "label": "no guard"}, {"key": "guard", "label": "guard"}]
    return dict(charts.hbars(groups, series, vmax=1.0), kind="hbars",
                title=f"Attack success rate per attack ({'all suites' if scope == ALL else scope}), with 95% intervals")


def _published(summary: SecuritySummary | None, part: Part) -> dict[str, Any]:
    ours = run_rows(summary) if summary is not None else []
    theirs = ("the published defences as their authors report them, with the models they used; measured on AgentDojo "
              "v1 (629 security cases) with LLM agents, so context for this run, not a like-for-like comparison. Cells "
              "not read from the papers are left '-'. Sources: " + "; ".join(published_sources()) + ".")
    intro = theirs[0].upper() + theirs[1:]
    if summary is not None and ours:
        intro = (f"This run's rows first (agent {summary.agent}, {summary.benchmark}; utility = without attack over the "
                 "user tasks run, the other two over the attacked pairs, as in the tables above; the guard arm is "
                 f"{summary.guard}), then {theirs}")
    return {"id": f"{part.anchor}-published", "title": "This run beside the published defences on AgentDojo",
            "intro": intro, "tables": [table("This run and the published defences (percent)", PUBLISHED_COLUMNS,
                                             ours + published_rows(), numeric=[4, 5, 6])]}


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    text = f"{name}({json.dumps(arguments, ensure_ascii=False, default=str)})"
    return text if len(text) <= _CALL_CHARS else text[:_CALL_CHARS - 3] + "..."


def _blocks(records: list[SecurityRecord], part: Part, *, origin: str) -> dict[str, Any] | None:
    """One kind of blocked call, grouped (module docstring).

    ``injection``: blocked injected calls (a model agent's blocks with provenance included); ``user``:
    false alarms; ``other``: a model agent's other blocks.
    """
    groups: dict[tuple[str, ...], list[SecurityRecord]] = defaultdict(list)
    for record in records:
        for block in record.blocks:
            kind = "injection" if block.origin == "other" and block.provenance else block.origin
            if kind != origin:
                continue
            finding = ((block.provenance or {}).get("findings") or [{}])[0]
            span = finding.get("span") or {}
            value = finding.get("value") or {}
            key = (record.suite, record.attack or BENIGN, record.injection_task or "-", _call_text(block.name, block.arguments),
                   finding.get("rule") or "-", str(value.get("path") or "-"), span.get("tool") or "-",
                   span.get("text") or block.reason, ", ".join(span.get("markers") or []) or "-")
            groups[key].append(record)
    if not groups:
        return None
    rows = []
    for cells, runs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        users = sorted({r.user_task for r in runs}, key=lambda t: (len(t), t))
        shown = ", ".join(users[:6]) + (f" (+{len(users) - 6})" if len(users) > 6 else "")
        rows.append([*cells, len(runs), len({id(r) for r in runs}), shown])
    columns = ["suite", "attack", "injection task", "call", "rule", "argument", "tool", "tool text (the instruction)",
               "markers", "blocks", "runs", "user tasks"]
    if origin == "injection":
        title, intro = "Blocked injections, with the tool text they came from", (
            "Each distinct injected call the guard blocked, with the finding of the injection rule: which argument came "
            "from where (rule, argument path) and the text inside the tool result that addresses the model (the "
            "instruction span, as the guard read it; cut at 400 characters).")
    elif origin == "user":
        title, intro = "False alarms: blocked ground-truth calls of the user task", (
            "Calls of the user task's own ground truth that the guard blocked, with its reason.")
    else:
        title, intro = "Other blocked calls of a model agent", (
            "Calls a model agent proposed that the guard refused for another reason than an injection (a SAAG "
            "stage 1-2 failure: an unknown function, a missing or spurious parameter), with its reason.")
    anchor = {"injection": "blocks", "user": "false-alarms"}.get(origin, "other-blocks")
    return {"id": f"{part.anchor}-{anchor}", "title": title,
            "intro": f"{intro} {sum(len(v) for v in groups.values())} blocks in {len(rows)} distinct rows.",
            "tables": [table(title, columns, rows, numeric=[9, 10])]}


__all__ = ["security_part"]
