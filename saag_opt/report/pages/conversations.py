"""The conversation browser: per entry, turns -> steps -> proposal, reviews, executed calls, tool results.

One row per entry (a real table: id, category, outcome between a reference and a target condition,
the target's failing check); each row's details are compact JSON that the page's script draws:
every condition's run turn by turn, side by side or one at a time, with the checker's verdict and
the turn where it failed. Generic over the episode record model (``evaluation.conversation_records``): it reads
records as plain dicts (``model_dump``), so a record model that adds fields (a user simulator's
turns, a reward breakdown) renders without a change here:

* a turn's own ``messages`` (a user simulator's) are shown; else the dataset's user turns, when the
  run's dataset can still be loaded;
* every field of the verdict (``judgement``) beyond the known ones, and every field of the record
  beyond ``EpisodeRecord``'s, is listed as ``key: value`` under the verdict.

Pure: no LM; the dataset is read only for the user turns' text.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from saag_opt.errors import SaagOptError
from saag_opt.evaluation.conversation_records import EpisodeRecord, JudgementRecord
from saag_opt.report.pages.base import Part
from saag_opt.report.pages.browser import OUTCOMES, by_example, cut, outcome

_TEXT = 600
"""Characters kept of a tool result, a feedback or a user message on the page (records keep more)."""
_DETAILS = 1500
"""Characters kept of the checker's evidence."""
_KNOWN_VERDICT = set(JudgementRecord.model_fields)
_KNOWN_RECORD = set(EpisodeRecord.model_fields)
FLIPPED = "flipped"
"""The outcome filter's extra choice: fixed or broken (the entries the review helped or harmed)."""


def _call_list(calls: Sequence[Mapping[str, Any]] | None) -> list[list[Any]]:
    """``[[name, arguments], ...]`` with long strings cut (the browser's call format)."""
    return [[c.get("name"), _clip(c.get("arguments") or {})] for c in calls or ()]


def _clip(value: Any) -> Any:
    if isinstance(value, str):
        return cut(value, 200)
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value[:20]]
    return value


def _prediction(call: Mapping[str, Any] | None) -> dict[str, Any]:
    """A ``CallRecord`` dict as ``{"calls": [...], "text": ...}`` (text only when the agent said something)."""
    if not call:
        return {"calls": []}
    out: dict[str, Any] = {"calls": _call_list(call.get("calls"))}
    raw = (call.get("raw") or "").strip()
    if not out["calls"] and raw:
        out["text"] = cut(raw, _TEXT)
    if call.get("status") == "unparsable":
        out["unparsable"] = True
    return out


def _step(step: Mapping[str, Any]) -> dict[str, Any]:
    """One step: the proposal, each review, what ran and what came back; empty fields left out."""
    view: dict[str, Any] = {"i": step.get("index", 0), "proposed": _prediction(step.get("proposed"))}
    rounds = []
    for r in step.get("rounds") or ():
        item: dict[str, Any] = {"verdict": r.get("verdict")}
        if r.get("reviewer") not in (None, "llm"):
            item["reviewer"] = r["reviewer"]
        if r.get("feedback"):
            item["feedback"] = cut(r["feedback"], _TEXT)
        if r.get("revised"):
            item["revised"] = _prediction(r["revised"])
        if r.get("note"):
            item["note"] = cut(r["note"], _TEXT)
        rounds.append(item)
    if rounds:
        view["rounds"] = rounds
    if step.get("candidates"):
        view["candidates"] = [{"i": c.get("index"), "call": _prediction(c.get("prediction")), "score": c.get("score"),
                               "passed": c.get("passed")}
                              for c in step["candidates"]]
        view["selected"] = step.get("selected")
    final = _prediction(step.get("final"))
    if final != view["proposed"]:
        view["final"] = final
    if step.get("executed"):
        view["executed"] = _call_list(step["executed"])
    if step.get("results"):
        view["results"] = [[r.get("name"), cut(r.get("content"), _TEXT), bool(r.get("executed", True))]
                           for r in step["results"]]
    marks = [m for m in ("withheld", "revised", "gated", "cached") if step.get(m)]
    if marks:
        view["marks"] = marks
    for key in ("ruling", "notes"):
        if step.get(key):
            view[key] = step[key]
    return view


def _messages(messages: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    return [[str(m.get("role", "user")), cut(str(m.get("content") or ""), _TEXT)] for m in messages]


def _turn(turn: Mapping[str, Any], failed_turn: int | None) -> dict[str, Any]:
    view: dict[str, Any] = {"i": turn.get("index", 0), "steps": [_step(s) for s in turn.get("steps") or ()]}
    marks = [m for m in ("abstain", "cut_off") if turn.get(m)]
    if failed_turn is not None and failed_turn == view["i"]:
        marks.append("checker failed here")
    if marks:
        view["marks"] = marks
    if turn.get("added_tools"):
        view["added"] = list(turn["added_tools"])
    if turn.get("messages"):  # a record model that keeps its turns' own messages (a user simulator's)
        view["user"] = _messages(turn["messages"])
    return view


def _extra(values: Mapping[str, Any], known: set[str]) -> list[list[str]]:
    """``[key, value as text]`` for the fields a subclass added (a reward breakdown, ...)."""
    out = []
    for key, value in values.items():
        if key in known or value in (None, [], {}, ""):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
        out.append([key, cut(text, _DETAILS)])
    return out


def _verdict(record: Mapping[str, Any]) -> dict[str, Any]:
    judgement = record.get("judgement") or {}
    view: dict[str, Any] = {"valid": bool(record.get("correct"))}
    for key in ("error_type", "message", "failed_turn"):
        if judgement.get(key) is not None:
            view[key] = cut(str(judgement[key]), _TEXT) if key == "message" else judgement[key]
    if judgement.get("checks"):
        view["checks"] = judgement["checks"]
    if judgement.get("details"):
        view["details"] = cut(json.dumps(judgement["details"], ensure_ascii=False, default=str, indent=1), _DETAILS)
    extra = _extra(judgement, _KNOWN_VERDICT) + _extra(record, _KNOWN_RECORD)
    if extra:
        view["extra"] = extra
    if record.get("error"):
        view["error"] = cut(record["error"], _TEXT)
    return view


def condition_view(label: str, record: EpisodeRecord) -> dict[str, Any]:
    """One condition of one entry: its verdict and its turns (the browser's JSON)."""
    data = record.model_dump(mode="json")
    verdict = _verdict(data)
    return {"label": label, "verdict": verdict,
            "turns": [_turn(t, verdict.get("failed_turn")) for t in data.get("turns") or ()],
            "seconds": round(float(data.get("seconds") or 0.0), 3), "reviewer_calls": data.get("reviewer_calls", 0)}


def conversation_section(records: Sequence[EpisodeRecord], conditions: Sequence[tuple[str, str]],
                         pair: tuple[str, str], user_turns: Mapping[str, list[list[list[str]]]],
                         part: Part) -> dict[str, Any] | None:
    """Rows for the conversation browser and each entry's details (embedded JSON), None without records.

    ``conditions``: ``(condition in records, label)`` in display order; ``pair``: the reference and
    target conditions the outcome compares; ``user_turns``: per entry id, per turn, its user
    messages ``[role, text]`` (from the dataset; a turn's own messages win).
    """
    ref_key, target_key = pair
    labels = dict(conditions)
    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for entry_id, conds in by_example(records).items():
        ref, target = conds.get(ref_key), conds.get(target_key)
        if target is None:
            continue
        error = any(r.error for r in conds.values())
        result = outcome(bool(ref and ref.correct), target.correct, error)
        failed = target.judgement.error_type if target.judgement is not None else None
        check = "error" if target.error else (failed or ("valid" if target.correct else "invalid"))
        rows.append({"i": len(details), "id": entry_id, "category": target.category, "outcome": result,
                     "stage": check, "ref_ok": bool(ref and ref.correct), "target_ok": target.correct,
                     "turns": len(target.turns)})
        views = [condition_view(labels.get(k, k), conds[k]) for k, _ in conditions if k in conds]
        details.append({"id": entry_id, "user": user_turns.get(entry_id, []), "conditions": views,
                        "ref": labels.get(ref_key, ref_key), "target": labels.get(target_key, target_key)})
    if not rows:
        return None
    part.data["episodes"] = details
    counts = Counter(r["outcome"] for r in rows)
    flipped = counts.get("fixed", 0) + counts.get("broken", 0)
    ref_label, target_label = labels.get(ref_key, ref_key), labels.get(target_key, target_key)
    return {"id": f"{part.anchor}-conversations-browser", "title": "Conversation browser", "browser": True,
            "kind": "conversations", "stage_label": "Failed check", "table_id": f"{part.anchor}-browser",
            "intro": f"One row per entry; outcome compares {ref_label} (reference) with {target_label} (target): "
                     "fixed = the review helped, broken = it harmed ('flipped' shows both). Failed check = the "
                     f"checker's error type for {target_label}. Expand a row for every turn: the user's messages, "
                     "each step's proposal, review verdicts and feedback, the calls that ran and what they returned, "
                     "withheld (never executed) and revised marks, and the verdict with the turn where it failed; "
                     "the conditions side by side or one at a time.",
            "rows": rows, "ref_label": ref_label, "target_label": target_label,
            "categories": sorted({r["category"] for r in rows}),
            "outcomes": ([FLIPPED] if flipped else []) + [o for o in OUTCOMES if counts.get(o)],
            "outcome_counts": dict(counts) | ({FLIPPED: flipped} if flipped else {}),
            "stages": sorted({r["stage"] for r in rows})}


def load_user_turns(spec: str | None, ids: Iterable[str]) -> tuple[dict[str, list[list[list[str]]]], str | None]:
    """Per entry id, per turn, the user messages from the run's dataset of conversations, or ({}, why not)."""
    from saag_opt.data.catalog import load_episodes  # noqa: PLC0415 - loads BFCL's data

    wanted = set(ids)
    if not spec:
        return {}, "the run does not name its dataset, so the user turns are not shown"
    try:
        episodes = load_episodes(spec)
    except (SaagOptError, OSError, ImportError) as exc:
        return {}, f"user turns not shown: dataset {spec!r} could not be loaded here ({str(exc).splitlines()[0]})"
    return {e.id: [_messages(t.messages) for t in e.turns] for e in episodes if e.id in wanted}, None


__all__ = ["FLIPPED", "condition_view", "conversation_section", "load_user_turns"]
