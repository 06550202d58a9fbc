"""The security run's trace browser: one row per record, each expanding into both arms' conversations.

A row is one run of one arm (suite, attack, user task, injection task, arm, outcome, blocked calls);
its details are the conversation of every arm of the same task or pair, side by side, drawn by the
conversation browser's script (``report.js``: turns, steps, review rounds, results), which this
module feeds in that shape: one turn (the system message and the user's prompt), one step per
assistant message with calls (the proposal, the guard's verdict with its finding, what ran, each tool
result with the injected text marked), and the final answer. Blocked calls are marked ``blocked``
and ``not scored`` (AgentDojo scored the conversation without them).

Texts and steps are pooled (``data.security.texts`` and ``.steps``; a view refers to one by its
index): the system message, a user prompt, a tool result, a guard's reason, and a whole step (the
user task's own calls and what they returned) recur across arms, attacks and injection tasks, and are
written once. A full banking run (1,760 records, six attacks, scripted agent) pooled so is a page of 1.4 MB, not 3.3 MB.
Records written before traces were kept still get a row, whose details say so.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from saag_opt.report.pages.base import Part
from saag_opt.security.records import BENIGN, SecurityRecord
from saag_opt.security.trace_records import Trace, TraceCall, TraceMessage

ARM_LABELS = {"none": "no guard", "guard": "guard"}
OUTCOMES = ("hijacked", "safe, task done", "safe, task not done", "task done", "task not done")
"""A record's outcome: under attack, whether the attacker's goal was met and else the user's task; without, the task."""
GUARD_STATES = ("blocked", "nothing blocked", "not guarded")
NO_TRACE = "no trace: this run was recorded before security records kept the agent's conversation"


def outcome_of(record: SecurityRecord) -> str:
    """The record's outcome (``OUTCOMES``)."""
    if record.attack is None:
        return "task done" if record.utility else "task not done"
    if record.security:
        return "hijacked"
    return "safe, task done" if record.utility else "safe, task not done"


def guard_state(record: SecurityRecord) -> str:
    """Whether the guard blocked anything in this run (``GUARD_STATES``)."""
    if record.arm != "guard":
        return "not guarded"
    return "blocked" if record.blocks else "nothing blocked"


class _Pool:
    """Each distinct text, and each distinct step, once; a view holds its index."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.steps: list[dict[str, Any]] = []
        self._texts: dict[str, int] = {}
        self._steps: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        index = self._texts.get(text)
        if index is None:
            index = self._texts[text] = len(self.texts)
            self.texts.append(text)
        return index

    def step(self, step: dict[str, Any]) -> int:
        key = json.dumps(step, sort_keys=True, ensure_ascii=False, default=str)
        index = self._steps.get(key)
        if index is None:
            index = self._steps[key] = len(self.steps)
            self.steps.append(step)
        return index


def _calls(calls: Sequence[TraceCall]) -> list[list[Any]]:
    return [[c.name, c.arguments] for c in calls]


def _findings(call: TraceCall, pool: _Pool) -> list[dict[str, Any]]:
    return [{"call": call.name, "rule": f.rule, "argument": f.argument, "value": f.value, "tool": f.tool,
             "text": pool(f.text) if f.text else None, "markers": f.markers} for f in call.findings]


_VERDICT = re.compile(r"(?:^|; )(approve|reject|reviewer failed)(?=:|;|$)")
"""A verdict in ``TraceCall.review`` (``runtime.agentdojo.trace.review_of``: ``verdict[: feedback]`` joined by
"; "), found where it starts an entry, so a "; " inside feedback is not taken for one."""


def _last_verdict(review: str) -> str:
    """The reviewer's last verdict in a ``TraceCall.review`` text."""
    found = _VERDICT.findall(review)
    return found[-1] if found else review.split(":", 1)[0]


def _step(message: TraceMessage, pool: _Pool) -> dict[str, Any]:
    """An assistant message with calls as a conversation-browser step (its results are added as they come).

    No step number: the script numbers steps by position, so equal steps pool.
    """
    proposed = message.proposed if message.proposed is not None else message.calls
    step: dict[str, Any] = {"proposed": {"calls": _calls(proposed)}}
    if message.text.strip():
        step["say"] = pool(message.text)
    action = next((c.guard for c in message.calls if c.guard), None)
    marks = []
    if action is not None:
        first = message.calls[0]
        review: dict[str, Any] = {"reviewer": "guard", "verdict": action, "reason": pool(first.reason or "")}
        findings = [f for c in message.calls for f in _findings(c, pool)]
        if findings:
            review["findings"] = findings
        said = [] if first.review is None else [  # the LLM reviewer's verdicts, before the guard's decision
            {"reviewer": "llm", "verdict": _last_verdict(first.review), "reason": pool(first.review)}]
        step["rounds"] = [*said, review]
        if action == "revise":
            step["final"] = {"calls": _calls(message.calls)}
            marks.append("revised")
    ran = [c for c in message.calls if c.guard != "block"]
    if ran:
        step["executed"] = _calls(ran)
    if action == "block":
        marks.append("blocked")
    if any(not c.scored for c in message.calls):
        marks.append("not scored")
    if marks:
        step["marks"] = marks
    return step


def _result(message: TraceMessage, pool: _Pool) -> list[Any]:
    """``[tool, text, executed, spans]``: a blocked call's feedback is a result that did not run."""
    blocked = not message.scored
    text = message.error if message.error else message.text
    if message.error and not blocked:
        text = f"error: {message.error}"
    if message.chars > len(message.text) and not message.error:
        text += f"\n[tool text cut to the first {len(message.text)} of {message.chars} characters, injected text kept]"
    spans = [[s.start, s.end, s.vector] for s in message.injected] if not message.error else []
    return [message.tool or "tool", pool(text), not blocked, spans]


def _turn(trace: Trace, pool: _Pool) -> dict[str, Any]:
    turn: dict[str, Any] = {"i": 0, "user": []}
    steps: list[dict[str, Any]] = []
    for position, message in enumerate(trace.messages):
        if message.role in ("system", "user"):
            turn["user"].append([message.role, pool(message.text)])
        elif message.role == "assistant" and message.calls:
            steps.append(_step(message, pool))
        elif message.role == "assistant" and position != len(trace.messages) - 1 and message.text.strip():
            steps.append({"proposed": {"calls": []}, "say": pool(message.text)})
        elif message.role == "tool" and steps:
            steps[-1].setdefault("results", []).append(_result(message, pool))
    turn["steps"] = [pool.step(s) for s in steps]
    turn["answer"] = pool(trace.answer) if trace.answer is not None else None
    if trace.attempts > 1:
        turn["marks"] = [f"attempt {trace.attempts} of {trace.attempts} (AgentDojo reran a run without an answer)"]
    return turn


def _verdict(record: SecurityRecord) -> dict[str, Any]:
    utility = f"utility {'✓' if record.utility else '✗'}"
    if record.attack is None:
        return {"valid": record.utility, "label": utility}
    attack = "attack succeeded" if record.security else "attack failed"
    return {"valid": record.utility and not record.security, "label": f"{utility} · {attack}"}


def record_view(record: SecurityRecord, pool: _Pool) -> dict[str, Any]:
    """One record as a conversation-browser condition (texts as indices into ``pool``)."""
    label = ARM_LABELS.get(record.arm, record.arm)
    blocks = f", {len(record.blocks)} blocked" if record.arm == "guard" else ""
    view: dict[str, Any] = {"label": label, "head": f"{label} ({record.seconds:.2f} s{blocks})",
                            "verdict": _verdict(record), "turns": []}
    if record.trace is None:
        view["note"] = NO_TRACE
    else:
        view["turns"] = [_turn(record.trace, pool)]
    return view


def trace_section(records: Sequence[SecurityRecord], part: Part) -> dict[str, Any] | None:
    """The browser's rows and their details (``part.data["security"]``); None without records."""
    if not records:
        return None
    pool = _Pool()
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    views, rows = [], []
    for i, record in enumerate(records):
        group = groups.setdefault((record.suite, record.attack or BENIGN, record.user_task, record.injection_task or ""), [])
        group.append(i)
        view = record_view(record, pool)
        views.append(view)
        rows.append({"i": i, "suite": record.suite, "attack": record.attack or BENIGN, "user": record.user_task,
                     "injection": record.injection_task or "-", "arm": ARM_LABELS.get(record.arm, record.arm),
                     "outcome": outcome_of(record), "guard": guard_state(record), "blocks": len(record.blocks),
                     "traced": record.trace is not None})
    index = {key: g for g, key in enumerate(groups)}
    for i, record in enumerate(records):
        views[i]["g"] = index[(record.suite, record.attack or BENIGN, record.user_task, record.injection_task or "")]
    part.data["security"] = {"texts": pool.texts, "steps": pool.steps, "records": views, "groups": list(groups.values())}
    counts = Counter(r["outcome"] for r in rows)
    untraced = sum(not r["traced"] for r in rows)
    intro = ("One row per run of one arm. Expand a row for the conversation of every arm of the same task or pair, "
             "side by side: the system message and the user's prompt, each assistant message's calls with the "
             "guard's verdict (allow / revise / block, its reason, and for an injection the rule, the argument and "
             "the tool text it came from), what ran, each tool result with the attack's injected text marked, and "
             "the final answer. Blocked calls are marked; AgentDojo scored the conversation without them (not "
             "scored). Hijacked = the attacker's goal was met (AgentDojo's security check). Each text keeps its first "
             "1,500 characters and a tool result's injected text whole.")
    if untraced:
        intro += f" {untraced} of {len(rows)} runs were recorded before records kept traces; their rows have none."
    columns = ["suite", "attack", "user task", "injection task", "arm", "outcome", "guard", "blocked"]
    filters = [{"name": "suite", "label": "Suite", "cell": 0, "options": sorted({str(r["suite"]) for r in rows})},
               {"name": "attack", "label": "Attack", "cell": 1, "options": sorted({str(r["attack"]) for r in rows})},
               {"name": "arm", "label": "Arm", "cell": 4,
                "options": [a for a in ARM_LABELS.values() if any(r["arm"] == a for r in rows)]},
               {"name": "outcome", "label": "Outcome", "cell": 5,
                "options": [o for o in OUTCOMES if counts.get(o)], "counts": dict(counts)},
               {"name": "guard", "label": "Guard", "cell": 6,
                "options": [g for g in GUARD_STATES if any(r["guard"] == g for r in rows)]}]
    return {"id": f"{part.anchor}-traces", "title": "Trace browser", "browser": True, "kind": "security",
            "table_id": f"{part.anchor}-trace-browser", "intro": intro, "rows": rows, "columns": columns,
            "filters": filters, "search": {"label": "Task id", "cells": "2,3"}}


__all__ = ["ARM_LABELS", "GUARD_STATES", "NO_TRACE", "OUTCOMES", "guard_state", "outcome_of", "record_view",
           "trace_section"]
