"""The example browser: a real table of examples, and each example's details as compact JSON.

The table filters by category, outcome and stage of failure; the page's script expands a row from
the JSON.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from saag_opt.data import load_dataset
from saag_opt.errors import SaagOptError
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.report.pages.base import Part

OUTCOMES = ("fixed", "broken", "unchanged-right", "unchanged-wrong", "error")
"""Outcome of an example between a reference and a target condition (base -> reviewed, A -> B)."""


_TEXT_LIMIT = 400
"""Characters kept of a query, a feedback or a call in the example browser (keeps 1k examples < 1 MB)."""



def _calls(call: Any) -> Any:
    """A prediction for the browser's JSON: ``[[name, arguments], ...]``; ``[]`` = no call.

    A string says why there is nothing to show. Structured rather than a JSON string: escaping
    quotes twice costs ~15% of the page.
    """
    if call is None:
        return "no prediction"
    calls = call.calls if hasattr(call, "calls") else call.get("calls", [])
    if not calls:
        status = call.status if hasattr(call, "status") else call.get("status", "empty")
        raw = (call.raw if hasattr(call, "raw") else call.get("raw")) or ""
        if status == "unparsable":
            return f"unparsable output: {cut(raw, 200)}" if raw else "unparsable output"
        return f"no call; the agent answered: {cut(raw, 200)}" if raw.strip() else []
    return [[c.get("name"), _clip(c.get("arguments"))] for c in calls]


def _clip(value: Any) -> Any:
    """Arguments with long strings cut (keeps the page small; the full call is in records.jsonl)."""
    if isinstance(value, str):
        return cut(value, 200)
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value[:20]]
    return value


def cut(text: str | None, limit: int = _TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (the full text stays in records.jsonl)."""
    if text is None:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def stage_of(report: Mapping[str, Any] | None) -> str:
    """Where a prediction's SAAG cascade stopped: ``1``/``2``/``3``, ``passed`` or ``n/a``."""
    if not report:
        return "n/a"
    if not report.get("applicable", True):
        return "n/a"
    stage = report.get("stage_reached")
    return "passed" if stage == "passed" or report.get("passed") else str(stage)


class _Keyed(Protocol):
    @property
    def example_id(self) -> str: ...
    @property
    def condition(self) -> str: ...


_R = TypeVar("_R", bound=_Keyed)


def by_example(records: Iterable[_R]) -> dict[str, dict[str, _R]]:
    """Records grouped per example (or entry), then per condition, in the order they were read."""
    grouped: dict[str, dict[str, _R]] = {}
    for record in records:
        grouped.setdefault(record.example_id, {})[record.condition] = record
    return grouped


def outcome(ref_ok: bool, target_ok: bool, error: bool = False) -> str:
    """Fixed / broken / unchanged-right / unchanged-wrong (or error) from reference to target."""
    if error:
        return "error"
    if ref_ok != target_ok:
        return "fixed" if target_ok else "broken"
    return "unchanged-right" if ref_ok else "unchanged-wrong"


def saag_brief(report: Mapping[str, Any] | None) -> dict[str, Any]:
    """Where a SAAG report stopped and its corrections, as the browser shows them."""
    brief: dict[str, Any] = {"stage": stage_of(report)}
    corrections = [cut(c, 300) for c in (report or {}).get("corrections") or []]
    if corrections:
        brief["corrections"] = corrections
    return brief


def _condition_view(label: str, record: ExampleRecord) -> dict[str, Any]:
    """One condition of one example, empty fields left out.

    ``final`` is kept only when it is not simply the last call of the chain base -> revisions (the
    browser's JavaScript fills it in).
    """
    rounds = []
    last = _calls(record.base) if record.base is not None else None
    for r in record.rounds:
        item: dict[str, Any] = {"verdict": r.verdict}
        if r.reviewer != "llm":
            item["reviewer"] = r.reviewer
        if r.feedback:
            item["feedback"] = cut(r.feedback)
        if r.revised is not None:
            item["revised"] = last = _calls(r.revised)
        if r.note:
            item["note"] = cut(r.note)
        rounds.append(item)
    view: dict[str, Any] = {"label": label, "correct": record.correct, "saag": saag_brief(record.saag)}
    final = _calls(record.final)
    if final != last:
        view["final"] = final
    if record.truth_reason and record.truth_reason != "ok":
        view["truth"] = record.truth_reason
    if rounds:
        view["rounds"] = rounds
    if record.candidates:
        view["candidates"] = [{"i": c.index, "t": c.temperature, "call": _calls(c.prediction), "score": c.score,
                               "passed": c.passed} for c in record.candidates]
        view["selected"] = record.selected
    if record.gated:
        view["gated"] = True
    if record.error:
        view["error"] = cut(record.error)
    return view


def browser_section(records: Sequence[ExampleRecord], conditions: Sequence[tuple[str, str]],
                    pair: tuple[str, str], queries: Mapping[str, str], part: Part) -> dict[str, Any] | None:
    """Rows for the example browser (a real table) and the per-example details (embedded JSON).

    ``conditions``: ``(condition in records, label)`` in display order; ``pair``: the reference and
    target conditions the outcome compares.
    """
    ref_key, target_key = pair
    labels = dict(conditions)
    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for example_id, conds in by_example(records).items():
        ref, target = conds.get(ref_key), conds.get(target_key)
        if target is None:
            continue
        first = conds.get("base") or target
        base_call = target.base or (conds["base"].final if "base" in conds else None)
        base_saag = target.base_saag or (conds["base"].saag if "base" in conds else None)
        error = any(r.error for r in conds.values())
        result = outcome(bool(ref and ref.correct), target.correct, error)
        stage = stage_of(base_saag)
        rows.append({"i": len(details), "id": example_id, "category": first.category, "outcome": result,
                     "stage": stage, "ref_ok": bool(ref and ref.correct), "target_ok": target.correct})
        base_brief = saag_brief(base_saag)
        views = [_condition_view(labels.get(k, k), conds[k]) for k, _ in conditions if k in conds and k != "base"]
        for view in views:  # the common case (call approved as is): the browser reuses the base call's report
            if view["saag"] == base_brief:
                del view["saag"]
        details.append({"query": cut(queries.get(example_id)), "base": _calls(base_call), "base_saag": base_brief,
                        "conditions": views})
    if not rows:
        return None
    part.data["examples"] = details
    counts = Counter(r["outcome"] for r in rows)
    return {"id": f"{part.anchor}-examples", "title": "Example browser", "browser": True,
            "intro": f"One row per example; outcome compares {labels.get(ref_key, ref_key)} (reference) with "
                     f"{labels.get(target_key, target_key)} (target). Stage = where the base call's SAAG cascade "
                     "stopped. Expand a row for the query, the base call, every review round, the final call, its "
                     "SAAG report and correctness.",
            "rows": rows, "ref_label": labels.get(ref_key, ref_key), "target_label": labels.get(target_key, target_key),
            "categories": sorted({r["category"] for r in rows}),
            "outcomes": [o for o in OUTCOMES if counts.get(o)], "outcome_counts": dict(counts),
            "stages": [s for s in ("1", "2", "3", "passed", "n/a") if any(r["stage"] == s for r in rows)]}


def load_queries(spec: str | None, ids: Iterable[str]) -> tuple[dict[str, str], str | None]:
    """Query text per example id from the run's dataset, or ({}, why not) when it cannot be loaded."""
    wanted = set(ids)
    if not spec:
        return {}, "the run does not name its dataset, so queries are not shown"
    try:
        examples = load_dataset(spec)
    except (SaagOptError, OSError) as exc:
        return {}, f"queries not shown: dataset {spec!r} could not be loaded here ({str(exc).splitlines()[0]})"
    return {e.id: e.query for e in examples if e.id in wanted}, None
