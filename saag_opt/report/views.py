"""What the HTML report shows, as plain data: one ``Part`` per run, each a list of sections.

``build_part(path)`` reads a run directory (evaluate, compare, optimize, tune) or a ``score --json``
output and returns the sections that run has data for; ``templates/report.html.j2`` draws them.
Nothing here writes HTML or touches an LM. Numbers come from the run's own files (summary.json
for the headline statistics, records.jsonl for per-example views), so the report and the terminal
tables never disagree; the few numbers computed here (per-call SAAG distributions, bootstrap CIs
of the help and harm rates, GEPA's Pareto membership) say in the page how they were computed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonlines

from saag_opt.errors import RunError, SaagOptError
from saag_opt.evaluation.helpharm import bootstrap_rate_ci
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.evaluation.results import read_records as _read_records_file
from saag_opt.report import charts
from saag_opt.report.format import ci_points, pct, points, ratio
from saag_opt.runfiles import RunHeader, read_header

METRICS: dict[str, str] = {
    "fnem": "FNEM function name exact match", "ncs": "NCS nearest-name similarity",
    "rpr": "RPR required-parameter recall", "pds": "PDS parameter drift score",
    "spr": "SPR spurious-parameter rate", "avem": "AVEM argument value exact match",
    "qslo": "QSLO query-span overlap", "vhr": "VHR value hallucination rate",
}
"""The eight SAAG metrics in cascade order (stage 1: fnem, ncs; 2: rpr, pds, spr; 3: avem, qslo, vhr)."""

OUTCOMES = ("fixed", "broken", "unchanged-right", "unchanged-wrong", "error")
"""Outcome of an example between a reference and a target condition (base -> reviewed, A -> B)."""

_TEXT_LIMIT = 400
"""Characters kept of a query, a feedback or a call in the example browser (keeps 1k examples < 1 MB)."""


@dataclass
class Part:
    """One run's share of the page."""

    kind: str
    title: str
    anchor: str
    meta: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


# -- reading ---------------------------------------------------------------------------------------


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: cannot read: {str(exc).splitlines()[0]}") from exc


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    with jsonlines.open(path) as reader:
        for line, row in enumerate(reader, start=1):
            if not isinstance(row, dict):
                raise RunError(f"{path}:{line}: expected a JSON object")
            rows.append(row)
    return rows


def read_records(run_dir: Path) -> list[ExampleRecord]:
    """``records.jsonl`` rows of any verb ([] before the first row is written)."""
    path = run_dir / "records.jsonl"
    return _read_records_file(path) if path.is_file() else []


def build_part(path: str | Path, index: int = 0) -> Part:
    """The report part of one run directory or ``score --json`` output.

    Raises:
        RunError: not a run directory / score output, or its files cannot be read.
    """
    path = Path(path)
    if path.is_file() or not (path / "run.json").exists():
        score = _score_files(path)
        if score is None:
            raise RunError(f"{path}: not a run directory (no run.json) nor a `score --json` output")
        return _score_part(*score, index=index)
    header = read_header(path)
    builder = {"evaluate": _evaluate_part, "compare": _compare_part, "optimize": _optimize_part,
               "tune": _tune_part}.get(header.verb, _evaluate_part)
    part = builder(path, header, index)
    if header.status != "success":
        message = f"run status is {header.status!r}: the numbers below may be partial"
        if header.error is not None:
            message += f" ({header.error.message})"
        part.notes.insert(0, message)
    return part


def _meta(header: RunHeader) -> list[tuple[str, str]]:
    rows = [("run", header.run_id), ("command", header.verb), ("status", header.status),
            ("started", header.created), ("finished", header.finished or "-")]
    rows += [(f"{role} model", spec) for role, spec in header.models.items()]
    dataset = header.dataset
    if dataset:
        rows.append(("dataset", ", ".join(f"{k}={v}" for k, v in dataset.items() if v is not None and k != "ids_hash")))
    if header.git_revision:
        rows.append(("git revision", header.git_revision[:12]))
    return rows


def _new_part(kind: str, title: str, index: int) -> Part:
    return Part(kind=kind, title=title, anchor=f"run{index}")


# -- shared sections -------------------------------------------------------------------------------


def _cascade(report: Mapping[str, Any] | None) -> list[Any]:
    """Call reports (``CascadeReport``) of a stored PredictionReport dict; [] when not applicable."""
    from saag_opt.model import CascadeReport

    if not report or not report.get("applicable", True):
        return []
    out = []
    for call in report.get("calls") or []:
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in call.items()
                  if k in CascadeReport.__dataclass_fields__}
        out.append(CascadeReport(**fields))
    return out


def funnel_section(conditions: Sequence[tuple[str, Sequence[Mapping[str, Any] | None]]], part: Part) -> list[dict]:
    """Stage funnel and metric distributions of each condition's final predictions."""
    from saag_opt.saag import aggregate, metric_values

    groups, rows, panels = [], [], []
    series = [{"key": "reached", "label": "reached the stage"}, {"key": "passed", "label": "passed the stage"}]
    for label, reports in conditions:
        calls = [c for r in reports for c in _cascade(r)]
        if not calls:
            continue
        stats = aggregate(calls)
        values = metric_values(calls)
        for stage, name in ((1, "registry (name)"), (2, "structure (params)"), (3, "grounding (values)")):
            reached, passed = stats.reached[stage], stats.passed[stage]
            groups.append({"label": f"{label}: {stage} {name}",
                           "values": {"reached": reached, "passed": passed},
                           "texts": {"reached": f"{reached} reached", "passed": f"{passed} passed"}})
            rows.append([label, f"{stage} {name}", reached, passed, _pct(passed, stats.n_calls),
                         _pct(passed, reached)])
        metric_panels = []
        for key, title in METRICS.items():
            mean = stats.metrics[key]
            metric_panels.append({"key": key, "title": title, "mean": mean.mean, "n": mean.n, "over": mean.over,
                                  "hist": charts.histogram(values[key])})
        panels.append({"label": label, "n_calls": stats.n_calls, "panels": metric_panels})
    if not groups:
        return []
    top = max(max(g["values"].values()) for g in groups) or 1
    funnel = {"id": f"{part.anchor}-funnel", "title": "SAAG stage funnel",
              "intro": "Calls of the final predictions that reached and passed each cascade stage (strict: a call "
                       "that fails a stage never reaches the next). Abstentions where a call was expected count "
                       "as calls failing stage 1; examples whose gold expects no call are not applicable.",
              "charts": [dict(charts.hbars(groups, series, vmax=top, fmt="{:.0f}", ticks_fmt="{:.0f}"),
                              kind="hbars", title="Calls reaching / passing each stage")],
              "tables": [_table("Stage funnel", ["condition", "stage", "reached", "passed", "passed, % of calls",
                                                 "pass rate at stage"], rows, numeric=[2, 3, 4, 5])]}
    metrics = {"id": f"{part.anchor}-metrics", "title": "SAAG metric distributions (stage-conditional)",
               "intro": "Each histogram is over the calls that reached the metric's stage only (named under it), "
                        "so means of different stages are over different calls and must not be compared as if "
                        "they were over the same population. PDS is per out-of-schema parameter.",
               "panels": panels,
               "tables": [_table("Metric means (stage-conditional)", ["condition", "metric", "mean", "n", "over"],
                                 [[p["label"], m["title"], _num(m["mean"]), m["n"], m["over"]]
                                  for p in panels for m in p["panels"]], numeric=[2, 3])]}
    return [funnel, metrics]


def accuracy_section(categories: Mapping[str, Mapping[str, Any]], series: Sequence[tuple[str, str]],
                     part: Part, overall: Mapping[str, float | None], title: str) -> dict[str, Any]:
    """Per-category truth accuracy for one or more conditions (``categories[cat][key] = {n, accuracy}``)."""
    keys = [k for k, _ in series]
    groups, rows = [], []
    for cat, cells in sorted(categories.items()):
        groups.append({"label": cat, "values": {k: (cells.get(k) or {}).get("accuracy") for k in keys}})
        n = next((c.get("n") for c in cells.values() if c and c.get("n") is not None), None)
        rows.append([cat, n if n is not None else "-"] + [pct((cells.get(k) or {}).get("accuracy")) for k in keys])
    rows.append(["all", sum(r[1] for r in rows if isinstance(r[1], int))] + [pct(overall.get(k)) for k in keys])
    chart = charts.hbars(groups, [{"key": k, "label": label} for k, label in series], vmax=1.0)
    return {"id": f"{part.anchor}-accuracy", "title": title,
            "intro": "Ground-truth accuracy (BFCL semantics) per dataset category.",
            "charts": [dict(chart, kind="hbars", title=title)],
            "tables": [_table(title, ["category", "n"] + [f"{label} accuracy %" for _, label in series], rows,
                              numeric=list(range(1, 2 + len(series))))]}


def help_harm_rows(label: str, hh: Mapping[str, Any], seed: int = 0) -> tuple[dict, list]:
    """A chart group (help and harm rates with bootstrap CIs) and a table row for one comparison."""
    base_wrong = int(hh.get("fixed", 0)) + int(hh.get("both_wrong", 0))
    base_right = int(hh.get("broken", 0)) + int(hh.get("both_right", 0))
    help_ci = bootstrap_rate_ci(int(hh.get("fixed", 0)), base_wrong, seed=seed)
    harm_ci = bootstrap_rate_ci(int(hh.get("broken", 0)), base_right, seed=seed)
    group = {"label": label, "values": {"help": hh.get("helpfulness"), "harm": hh.get("harmfulness")},
             "cis": {"help": help_ci, "harm": harm_ci},
             "texts": {"help": f"help {pct(hh.get('helpfulness'))}% ({hh.get('fixed', 0)}/{base_wrong})",
                       "harm": f"harm {pct(hh.get('harmfulness'))}% ({hh.get('broken', 0)}/{base_right})"}}
    row = [label, hh.get("n", "-"), hh.get("fixed", "-"), hh.get("broken", "-"), pct(hh.get("helpfulness")),
           _ci(help_ci), pct(hh.get("harmfulness")), _ci(harm_ci), ratio(hh.get("ratio")),
           points(hh.get("net_change")), ci_points(hh.get("net_change_ci95")), _p(hh.get("mcnemar_p"))]
    return group, row


HELP_HARM_COLUMNS = ["comparison", "n", "fixed", "broken", "help %", "help 95% CI", "harm %", "harm 95% CI",
                     "help:harm", "net change", "net 95% CI", "McNemar p"]


def help_harm_section(items: Sequence[tuple[str, Mapping[str, Any]]], part: Part, seed: int = 0) -> dict[str, Any]:
    """Help and harm bars with bootstrap CIs, plus the 2x2-derived table with McNemar's exact p."""
    groups, rows = [], []
    for label, hh in items:
        group, row = help_harm_rows(label, hh, seed)
        groups.append(group)
        rows.append(row)
    series = [{"key": "help", "label": "helpfulness (fixed / base wrong)"},
              {"key": "harm", "label": "harmfulness (broken / base right)"}]
    return {"id": f"{part.anchor}-helpharm", "title": "Help and harm",
            "intro": "Helpfulness = share of the reference's errors the target fixed; harmfulness = share of its "
                     "correct answers the target broke. Whiskers: percentile bootstrap 95% CI of each rate "
                     "(2,000 resamples). McNemar's exact p tests fixed vs broken; the net-change CI is the paired "
                     "bootstrap from summary.json.",
            "charts": [dict(charts.hbars(groups, series, vmax=1.0), kind="hbars", title="Help and harm")],
            "tables": [_table("Help and harm", HELP_HARM_COLUMNS, rows, numeric=list(range(1, 12)))]}


def cost_section(ledgers: Sequence[tuple[str, Mapping[str, Any] | None]], latency: Sequence[list[Any]],
                 part: Part) -> dict[str, Any] | None:
    """Latency per condition and calls/tokens/dollars/seconds per LM role."""
    rows = []
    for label, costs in ledgers:
        roles = (costs or {}).get("roles") or {}
        for role, acct in roles.items():
            if not isinstance(acct, Mapping):
                continue
            tokens = int(acct.get("prompt_tokens", 0)) + int(acct.get("completion_tokens", 0))
            dollars = acct.get("dollars")
            rows.append([label, role, acct.get("calls", 0), acct.get("cache_hits", 0), tokens,
                         "-" if dollars is None else f"{float(dollars):.4f}",
                         f"{float(acct.get('seconds', 0.0)):.2f}", acct.get("errors", 0),
                         ", ".join(acct.get("models") or [])])
    tables = []
    if latency:
        tables.append(_table("Latency per example", ["condition", "base mean s", "with review mean s",
                                                     "overhead x", "reviewer calls / example"], latency,
                             numeric=[1, 2, 3, 4]))
    if rows:
        tables.append(_table("Cost per LM role", ["part", "role", "calls", "cache hits", "tokens", "dollars",
                                                  "seconds", "errors", "models"], rows, numeric=[2, 3, 4, 5, 6, 7]))
    if not tables:
        return None
    return {"id": f"{part.anchor}-costs", "title": "Latency and cost per role",
            "intro": "From costs.json (the LM ledger of the run). Cache hits cost ~0 s and $0, so a repeated run "
                     "understates latency; the cache-hit column shows how much was replayed.",
            "tables": tables}


def unusable_section(counts: Mapping[str, Any], part: Part) -> dict[str, Any] | None:
    """Reviewer-unusable counts per condition, when summary.json carries them."""
    rows = [[label, value if not isinstance(value, Mapping) else ", ".join(f"{k}: {v}" for k, v in value.items())]
            for label, value in counts.items() if value is not None]
    if not rows:
        return None
    return {"id": f"{part.anchor}-unusable", "title": "Reviewer output unusable",
            "intro": "Reviews whose output could not be read (the mechanism fell back as documented).",
            "tables": [_table("Reviewer-unusable counts", ["condition", "unusable reviews"], rows, numeric=[1])]}


# -- example browser -------------------------------------------------------------------------------


def _calls(call: Any) -> Any:
    """A prediction for the browser's JSON: ``[[name, arguments], ...]``; ``[]`` = no call; a string
    says why there is nothing to show (structured, not a JSON string: escaping quotes twice costs ~15%)."""
    if call is None:
        return "no prediction"
    calls = call.calls if hasattr(call, "calls") else call.get("calls", [])
    if not calls:
        status = call.status if hasattr(call, "status") else call.get("status", "empty")
        return [] if status != "unparsable" else "unparsable output"
    return [[c.get("name"), _clip(c.get("arguments"))] for c in calls]


def _clip(value: Any) -> Any:
    """Arguments with long strings cut (keeps the page small; the full call is in records.jsonl)."""
    if isinstance(value, str):
        return _cut(value, 200)
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value[:20]]
    return value


def _cut(text: str | None, limit: int = _TEXT_LIMIT) -> str:
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


def outcome(ref_ok: bool, target_ok: bool, error: bool = False) -> str:
    """fixed / broken / unchanged-right / unchanged-wrong (or error) from reference to target."""
    if error:
        return "error"
    if ref_ok != target_ok:
        return "fixed" if target_ok else "broken"
    return "unchanged-right" if ref_ok else "unchanged-wrong"


def _saag_brief(report: Mapping[str, Any] | None) -> dict[str, Any]:
    brief: dict[str, Any] = {"stage": stage_of(report)}
    corrections = [_cut(c, 300) for c in (report or {}).get("corrections") or []]
    if corrections:
        brief["corrections"] = corrections
    return brief


def _condition_view(label: str, record: ExampleRecord) -> dict[str, Any]:
    """One condition of one example; empty fields are left out, and ``final`` only when it is not
    simply the last call of the chain base -> revisions (the browser's JavaScript fills it in)."""
    rounds = []
    last = _calls(record.base) if record.base is not None else None
    for r in record.rounds:
        item: dict[str, Any] = {"verdict": r.verdict}
        if r.reviewer != "llm":
            item["reviewer"] = r.reviewer
        if r.feedback:
            item["feedback"] = _cut(r.feedback)
        if r.revised is not None:
            item["revised"] = last = _calls(r.revised)
        if r.note:
            item["note"] = _cut(r.note)
        rounds.append(item)
    view: dict[str, Any] = {"label": label, "correct": record.correct, "saag": _saag_brief(record.saag)}
    final = _calls(record.final)
    if final != last:
        view["final"] = final
    if record.truth_reason and record.truth_reason != "ok":
        view["truth"] = record.truth_reason
    if rounds:
        view["rounds"] = rounds
    if record.candidates:
        view["candidates"] = [{"i": c.index, "t": c.temperature, "call": _calls(c.prediction), "score": c.score}
                              for c in record.candidates]
        view["selected"] = record.selected
    if record.gated:
        view["gated"] = True
    if record.error:
        view["error"] = _cut(record.error)
    return view


def browser_section(records: Sequence[ExampleRecord], conditions: Sequence[tuple[str, str]],
                    pair: tuple[str, str], queries: Mapping[str, str], part: Part) -> dict[str, Any] | None:
    """Rows for the example browser (a real table) and the per-example details (embedded JSON).

    ``conditions``: ``(condition in records, label)`` in display order; ``pair``: the reference and
    target conditions the outcome compares.
    """
    by_example: dict[str, dict[str, ExampleRecord]] = {}
    for record in records:
        by_example.setdefault(record.example_id, {})[record.condition] = record
    ref_key, target_key = pair
    labels = dict(conditions)
    rows, details = [], []
    for example_id, conds in by_example.items():
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
        base_brief = _saag_brief(base_saag)
        views = [_condition_view(labels.get(k, k), conds[k]) for k, _ in conditions if k in conds and k != "base"]
        for view in views:  # the common case (call approved as is): the browser reuses the base call's report
            if view["saag"] == base_brief:
                del view["saag"]
        details.append({"query": _cut(queries.get(example_id)), "base": _calls(base_call), "base_saag": base_brief,
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
        from saag_opt.data import load_dataset

        examples = load_dataset(spec)
    except (SaagOptError, OSError) as exc:
        return {}, f"queries not shown: dataset {spec!r} could not be loaded here ({str(exc).splitlines()[0]})"
    return {e.id: e.query for e in examples if e.id in wanted}, None


# -- evaluate --------------------------------------------------------------------------------------


def _evaluate_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    summary = _json(run_dir / "summary.json") or {}
    records = read_records(run_dir)
    mechanism = summary.get("mechanism") or header.plugins.get("mechanism", {}).get("spec") or "reviewed"
    part = _new_part("evaluate", f"Evaluate {header.run_id}: base vs {mechanism}", index)
    part.meta = _meta(header) + ([("reviewer prompt", summary["prompt"])] if summary.get("prompt") else [])
    if summary.get("experimental"):
        part.notes.append("experimental mechanism or reviewer variant (SAAG gate / SAAG-informed reviewer)")
    base = [r for r in records if r.condition == "base"]
    final = [r for r in records if r.condition != "base"]
    part.sections += funnel_section([("base", [r.saag for r in base]), (mechanism, [r.saag for r in final])], part)
    if summary:
        cats = _merge_categories({"base": summary["base"].get("categories", {}),
                                  "reviewed": summary["reviewed"].get("categories", {})})
        part.sections.append(accuracy_section(cats, [("base", "base"), ("reviewed", mechanism)], part,
                                              {"base": summary["base"].get("accuracy"),
                                               "reviewed": summary["reviewed"].get("accuracy")},
                                              "Truth accuracy per category"))
        part.sections.append(help_harm_section([(f"base -> {mechanism}", summary.get("help_harm") or {})], part,
                                               seed=int(header.config.get("seed") or 0)))
        lat = summary.get("latency") or {}
        latency = [[mechanism, _sec(lat.get("base_mean_seconds")), _sec(lat.get("final_mean_seconds")),
                    _x(lat.get("overhead_x")), _num(summary.get("reviewer_calls_per_item"), 2)]]
        costs = _json(run_dir / "costs.json") or summary.get("costs")
        _append(part, cost_section([("run", costs)], latency, part))
        _append(part, unusable_section(_unusable(summary, {"reviewed": mechanism}), part))
    queries, why = load_queries(header.dataset.get("spec") or header.config.get("dataset"), {r.example_id for r in records})
    if why and records:
        part.notes.append(why)
    _append(part, browser_section(records, [("base", "base")] + [(c, c) for c in _conditions(final)],
                                  ("base", _conditions(final)[-1] if final else "base"), queries, part))
    return part


def _conditions(records: Sequence[ExampleRecord]) -> list[str]:
    return list(dict.fromkeys(r.condition for r in records if r.condition != "base"))


def _unusable(summary: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """``reviewer_unusable`` wherever summary.json keeps it: top level, or per condition/side."""
    out: dict[str, Any] = {}
    top = summary.get("reviewer_unusable")
    if isinstance(top, Mapping):
        out.update({labels.get(k, k): v for k, v in top.items()})
    elif top is not None:
        out[next(iter(labels.values()), "reviewed")] = top
    for key, label in labels.items():
        block = summary.get(key)
        if isinstance(block, Mapping) and block.get("reviewer_unusable") is not None:
            out[label] = block["reviewer_unusable"]
    return out


def _merge_categories(by_key: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, cats in by_key.items():
        for cat, cell in (cats or {}).items():
            out.setdefault(cat, {})[key] = cell if isinstance(cell, Mapping) else {"accuracy": cell}
    return out


# -- compare ---------------------------------------------------------------------------------------


def _compare_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    summary = _json(run_dir / "summary.json") or {}
    records = read_records(run_dir)
    a, b = summary.get("a") or {}, summary.get("b") or {}
    la, lb = a.get("label", "A"), b.get("label", "B")
    part = _new_part("compare", f"Compare {header.run_id}: A = {la} vs B = {lb}", index)
    part.meta = _meta(header) + [("mode", str(summary.get("mode") or header.config.get("mode"))),
                                 ("matched examples", str(summary.get("matched", "-")))]
    part.notes += list(summary.get("notes") or [])
    cond_a, cond_b = a.get("condition"), b.get("condition")
    by_cond = {c: [r for r in records if r.condition == c] for c in ("base", cond_a, cond_b) if c}
    part.sections += funnel_section([("base", [r.saag for r in by_cond.get("base", [])]),
                                     (f"A {la}", [r.saag for r in by_cond.get(cond_a, [])]),
                                     (f"B {lb}", [r.saag for r in by_cond.get(cond_b, [])])], part)
    if summary:
        part.sections += compare_sections(summary, f"A {la}", f"B {lb}", part, seed=int(header.config.get("seed") or 0))
    spec = header.dataset.get("spec") or ((header.plugins.get("sources") or {}).get("a") or {}).get("dataset")
    queries, why = load_queries(spec, {r.example_id for r in records})
    if why and records:
        part.notes.append(why)
    if cond_a and cond_b:
        _append(part, browser_section(records, [("base", "base"), (cond_a, f"A {la}"), (cond_b, f"B {lb}")],
                                      (cond_a, cond_b), queries, part))
    return part


def compare_sections(summary: Mapping[str, Any], label_a: str, label_b: str, part: Part, *, seed: int = 0,
                     prefix: str = "") -> list[dict[str, Any]]:
    """Accuracy per category (base, A, B), help/harm (each vs base, and A vs B paired), latency and
    cost, reviewer-unusable counts, from a compare ``summary.json`` (also optimize's TEST phase)."""
    a, b = summary.get("a") or {}, summary.get("b") or {}
    base = summary.get("base") or {}
    cats = _merge_categories({"base": base.get("categories", {}), "a": (a.get("accuracy") or {}).get("categories", {}),
                              "b": (b.get("accuracy") or {}).get("categories", {})})
    accuracy = accuracy_section(cats, [("base", "base"), ("a", label_a), ("b", label_b)], part,
                                {"base": base.get("accuracy"), "a": (a.get("accuracy") or {}).get("accuracy"),
                                 "b": (b.get("accuracy") or {}).get("accuracy")},
                                f"{prefix}Truth accuracy per category: base, {label_a}, {label_b}")
    paired = summary.get("paired") or {}
    paired_hh = {"n": paired.get("n"), "fixed": paired.get("b_only_right", 0), "broken": paired.get("a_only_right", 0),
                 "both_right": paired.get("both_right", 0), "both_wrong": paired.get("both_wrong", 0),
                 "net_change": paired.get("net_change"), "net_change_ci95": paired.get("net_change_ci95"),
                 "mcnemar_p": paired.get("mcnemar_p")}
    paired_hh |= _rates(paired_hh)
    helpharm = help_harm_section([(f"base -> {label_a}", a.get("help_harm") or {}),
                                  (f"base -> {label_b}", b.get("help_harm") or {}),
                                  (f"{label_a} -> {label_b} (paired)", paired_hh)], part, seed)
    helpharm["title"] = f"{prefix}Help and harm"
    latency = [[label, _sec((s.get("latency") or {}).get("base_mean_seconds")),
                _sec((s.get("latency") or {}).get("final_mean_seconds")), _x((s.get("latency") or {}).get("overhead_x")),
                _num(s.get("reviewer_calls_per_item"), 2)] for label, s in ((label_a, a), (label_b, b))]
    ledgers = [("shared base pass", summary.get("base_costs"))] if summary.get("base_costs") else []
    ledgers += [(label_a, a.get("costs")), (label_b, b.get("costs"))]
    out = [accuracy, helpharm]
    for section in (cost_section(ledgers, latency, part), unusable_section(_unusable(summary, {"a": label_a,
                                                                                             "b": label_b}), part)):
        if section is not None:
            out.append(section)
    if prefix:
        for section in out:
            section["id"] += "-test"
            if not section["title"].startswith(prefix):
                section["title"] = prefix + section["title"]
    return out


def _rates(hh: Mapping[str, Any]) -> dict[str, Any]:
    wrong = hh["fixed"] + hh["both_wrong"]
    right = hh["broken"] + hh["both_right"]
    helpful = hh["fixed"] / wrong if wrong else None
    harmful = hh["broken"] / right if right else None
    ratio = None if not helpful and not harmful else ("inf" if not harmful else (helpful or 0.0) / harmful)
    return {"helpfulness": helpful, "harmfulness": harmful, "ratio": ratio}


# -- optimize --------------------------------------------------------------------------------------


def _optimize_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    from saag_opt.artifacts import PromptStore, diff_versions

    summary = _json(run_dir / "summary.json") or {}
    artifacts = _json(run_dir / "artifacts.json") or {}
    seed_name = summary.get("seed_version") or str(header.config.get("prompt", "")).rpartition("@")[2]
    part = _new_part("optimize", f"Optimize {header.run_id}: GEPA over the reviewer's instructions", index)
    part.meta = _meta(header) + [("seed prompt", str(header.config.get("prompt"))),
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
                     f"parent to child. ★ = best (highest val score); P = Pareto member. {note}.",
            "charts": [dict(charts.layered_dag(nodes), kind="dag", title="Lineage of prompt versions")],
            "tables": [_table("Prompt versions", ["candidate", "version", "parents", "val score", "metric calls",
                                                  "best", "Pareto"],
                              [[n["idx"], n["id"], ", ".join(n["parents"]) or "-", _num(n["val"]),
                                "-" if n["calls"] is None else n["calls"], "yes" if n["best"] else "",
                                "yes" if n["pareto"] else ""] for n in nodes], numeric=[0, 3, 4])]})
        dots = [{"x": n["calls"], "y": n["val"], "shape": "best" if n["best"] else "dot", "label": n["id"],
                 "title": f"{n['id']}: val {_num(n['val'])} after {n['calls']} metric calls"}
                for n in nodes if n["calls"] is not None and n["val"] is not None]
        if dots:
            ordered = sorted(dots, key=lambda p: p["x"])
            line, running = [], None
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
    test = summary.get("test") or {}
    if test.get("comparison"):
        seed_label, best_label = f"seed {test.get('seed')}", f"best {test.get('best')}"
        sections = compare_sections(test["comparison"], seed_label, best_label, part,
                                    seed=int(header.config.get("seed") or 0), prefix="TEST: ")
        sections[0]["intro"] = ("Seed vs best on the TEST split, which GEPA never saw: reported numbers come from here, "
                                "not from val. " + sections[0]["intro"])
        part.sections += sections
    records = read_records(run_dir)
    if records:
        reviewed = _conditions(records)
        queries, why = load_queries(header.config.get("dataset"), {r.example_id for r in records})
        if why:
            part.notes.append(why)
        pair = (reviewed[0], reviewed[-1]) if len(reviewed) > 1 else ("base", reviewed[0]) if reviewed else None
        if pair:
            _append(part, browser_section(records, [("base", "base")] + [(c, c) for c in reviewed], pair,
                                          queries, part))
    return part


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


# -- tune ------------------------------------------------------------------------------------------


def _tune_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    """``runs/<ts>-tune/``: trials.jsonl (one row per optuna trial) and summary.json (issue 9)."""
    summary = _json(run_dir / "summary.json") or {}
    trials = _jsonl(run_dir / "trials.jsonl")
    part = _new_part("tune", f"Tune {header.run_id}: optuna over reviewer configurations", index)
    part.meta = _meta(header) + [(k, str(summary[k])) for k in ("study", "sampler", "storage") if summary.get(k)]
    names = list((summary.get("objectives") or {"help": "maximize", "harm": "minimize"}).keys())
    rows = [_trial_view(t, names) for t in trials]
    tested = {int(p["number"]): p for p in summary.get("pareto") or [] if isinstance(p, Mapping) and "number" in p}
    dots: list[dict[str, Any]] = []
    links: list[list[tuple[float, float]]] = []
    for t in rows:
        if t["help"] is None or t["harm"] is None:
            continue
        shape = "pareto" if t["pareto"] else ("dot" if t["feasible"] is not False else "cross")
        dots.append({"x": t["harm"], "y": t["help"], "shape": shape, "label": f"#{t['number']}",
                       "title": f"trial {t['number']}: help {pct(t['help'])}%, harm {pct(t['harm'])}%"
                                f"{'' if t['feasible'] is not False else ' (infeasible)'}{' Pareto' if t['pareto'] else ''}"})
        test = (tested.get(t["number"]) or {}).get("test") or {}
        test_help, test_harm = _test_rate(test, "help"), _test_rate(test, "harm")
        if test_help is not None and test_harm is not None:
            dots.append({"x": test_harm, "y": test_help, "shape": "test", "label": "",
                           "title": f"trial {t['number']} re-evaluated on TEST: help {pct(test_help)}%, "
                                    f"harm {pct(test_harm)}%"})
            links.append([(t["harm"], t["help"]), (test_harm, test_help)])
    front = sorted((t["harm"], t["help"]) for t in rows if t["pareto"] and t["help"] is not None)
    if dots:
        part.sections.append({
            "id": f"{part.anchor}-pareto", "title": "Help vs harm: the Pareto front",
            "intro": "Each trial on the tuning split: ● feasible, ✕ infeasible (violates a constraint), ◎ Pareto-optimal "
                     "among the feasible trials (joined by the dashed front), ◇ the same configuration re-evaluated "
                     "on TEST (which no trial saw), linked to its tuning point by a dotted line. Up and to the left "
                     "is better.",
            "charts": [dict(charts.scatter(dots, x_label="harmfulness (lower is better)",
                                           y_label="helpfulness (higher is better)", x_range=(0.0, max(
                                               0.1, max(p["x"] for p in dots))), y_range=(0.0, 1.0),
                                           lines=[front] if len(front) > 1 else [], links=links,
                                           x_fmt="{:.1%}", y_fmt="{:.0%}",
                                           legend=[("dot", "feasible"), ("cross", "infeasible"),
                                                   ("pareto", "Pareto-optimal"), ("test", "on TEST")]),
                            kind="scatter", title="Pareto front")]})
    if rows:
        params = sorted({k for t in rows for k in t["params"]})
        table_rows = [[t["number"], t["state"]] + [_fmt_param(t["params"].get(k)) for k in params]
                      + [pct(t["help"]), pct(t["harm"]), _cost(t["cost"]),
                         {True: "yes", False: "no", None: "-"}[t["feasible"]], "yes" if t["pareto"] else "",
                         "yes" if t["repeat"] else ""] for t in rows]
        part.sections.append({
            "id": f"{part.anchor}-trials", "title": "Trials",
            "intro": "Every trial in trials.jsonl. A repeated configuration is answered from the stored result.",
            "tables": [_table("Trials", ["trial", "state"] + params + ["help %", "harm %", "cost / item $",
                                                                       "feasible", "Pareto", "repeat"],
                              table_rows, numeric=[0] + list(range(2 + len(params), 5 + len(params))))]})
        part.sections.append(_effects_section(rows, params, part))
    pareto_rows = []
    for number, item in sorted(tested.items()):
        test = item.get("test") or {}
        hh = test.get("help_harm") or test
        pareto_rows.append([number, ", ".join(f"{k}={_fmt_param(v)}" for k, v in (item.get("params") or {}).items()),
                            pct(test.get("accuracy")), pct(hh.get("helpfulness")), pct(hh.get("harmfulness")),
                            ratio(hh.get("ratio")), _p(hh.get("mcnemar_p")), ci_points(hh.get("net_change_ci95")),
                            _cost(test.get("cost_per_item_usd")), _sec(test.get("mean_seconds"))])
    if pareto_rows:
        part.sections.append({"id": f"{part.anchor}-tunetest", "title": "Pareto configurations on TEST",
                              "intro": "The feasible Pareto set re-evaluated on the test split, against the base agent.",
                              "tables": [_table("Pareto configurations on TEST",
                                                ["trial", "configuration", "accuracy %", "help %", "harm %",
                                                 "help:harm", "McNemar p", "net 95% CI", "cost / item $",
                                                 "mean s"], pareto_rows, numeric=[0, 2, 3, 4, 5, 6, 8, 9])]})
    return part


def _trial_view(row: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    values = row.get("values")
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        values = dict(zip(names, values))
    values = values if isinstance(values, Mapping) else {}
    constraint = row.get("constraint")
    feasible = row.get("feasible")
    if feasible is None and constraint is not None:
        bounds = list(constraint.values()) if isinstance(constraint, Mapping) else (
            constraint if isinstance(constraint, Sequence) else [constraint])
        feasible = all(float(c) <= 0 for c in bounds if c is not None)
    return {"number": int(row.get("number", 0)), "state": str(row.get("state", "")), "params": row.get("params") or {},
            "help": values.get("help"), "harm": values.get("harm"),
            "cost": row.get("cost_per_item_usd", (row.get("user_attrs") or {}).get("cost_per_item_usd")),
            "feasible": feasible, "pareto": bool(row.get("pareto")), "repeat": bool(row.get("repeat"))}


def _test_rate(test: Mapping[str, Any], which: str) -> float | None:
    hh = test.get("help_harm") or test
    value = hh.get("helpfulness" if which == "help" else "harmfulness", hh.get(which))
    return None if value is None else float(value)


def _effects_section(rows: Sequence[Mapping[str, Any]], params: Sequence[str], part: Part) -> dict[str, Any]:
    """Mean help and harm of the completed trials per value of each searched parameter."""
    blocks = []
    done = [t for t in rows if t["help"] is not None and t["harm"] is not None]
    for param in params:
        values = [t["params"][param] for t in done if param in t["params"]]
        cells: dict[tuple[Any, str], list[Mapping[str, Any]]] = {}
        numeric = bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numeric and len({float(v) for v in values}) > 6:  # a range: three equal-count bins, in order
            ordered = sorted(float(v) for v in values)
            cuts = [ordered[len(ordered) // 3], ordered[2 * len(ordered) // 3]]
            names = [f"< {cuts[0]:g}", f"{cuts[0]:g} to < {cuts[1]:g}", f">= {cuts[1]:g}"]
            for t in done:
                if param in t["params"]:
                    b = sum(float(t["params"][param]) >= c for c in cuts)
                    cells.setdefault((b, names[b]), []).append(t)
        else:
            for t in done:
                if param in t["params"]:
                    value = t["params"][param]
                    cells.setdefault((_fmt_param(value), _fmt_param(value)), []).append(t)
        table_rows, groups = [], []
        for (_, value), items in sorted(cells.items(), key=lambda kv: kv[0][0]):
            mean_help = sum(t["help"] for t in items) / len(items)
            mean_harm = sum(t["harm"] for t in items) / len(items)
            table_rows.append([value, len(items), pct(mean_help), pct(mean_harm)])
            groups.append({"label": f"{value} (n={len(items)})", "values": {"help": mean_help, "harm": mean_harm}})
        chart = dict(charts.hbars(groups, [{"key": "help", "label": "mean helpfulness"},
                                           {"key": "harm", "label": "mean harmfulness"}], vmax=1.0),
                     kind="hbars", title=f"Effect of {param}", caption=f"Effect of {param}")
        blocks.append({"charts": [chart], "tables": [_table(f"Effect of {param}", [param, "trials", "mean help %",
                                                                                   "mean harm %"], table_rows,
                                                            numeric=[1, 2, 3])]})
    return {"id": f"{part.anchor}-effects", "title": "Effect of each searched parameter",
            "intro": "Mean help and harm of the completed trials at each value (numeric ranges in three equal-count "
                     "bins). Marginal means over a non-random design: read them as hints, not as causal effects.",
            "blocks": blocks}


# -- score -----------------------------------------------------------------------------------------


def _score_files(path: Path) -> tuple[Path, Path] | None:
    """(rows, summary) of a ``score --json`` output given either file."""
    from saag_opt.evaluation.score import summary_path

    if path.name.endswith(".summary.json"):
        stem = path.name.removesuffix(".summary.json")
        for candidate in (path.with_name(stem + ".jsonl"), path.with_name(stem + ".json"), path.with_name(stem)):
            if candidate.is_file():
                return candidate, path
        return None
    if path.is_file() and summary_path(path).is_file():
        return path, summary_path(path)
    return None


def _score_part(rows_path: Path, summary_file: Path, *, index: int) -> Part:
    summary = _json(summary_file) or {}
    rows = _jsonl(rows_path)
    part = _new_part("score", f"Score {rows_path.name}: SAAG diagnostics and ground truth", index)
    part.meta = [("predictions scored", str(summary.get("n_predictions", len(rows)))),
                 ("rejected rows", str(summary.get("n_rejected", 0))), ("rows file", rows_path.name),
                 ("accuracy", f"{pct(summary.get('accuracy'))}%")]
    part.sections += funnel_section([("predictions", [r.get("cascade") for r in rows])], part)
    cats = _merge_categories({"score": summary.get("categories") or {}})
    if cats:
        part.sections.append(accuracy_section(cats, [("score", "accuracy")], part, {"score": summary.get("accuracy")},
                                              "Truth accuracy per category"))
    if summary.get("rejections"):
        part.notes.append(f"{len(summary['rejections'])} row(s) rejected; first: {summary['rejections'][0]}")
    browser_rows, details = [], []
    for row in rows:
        stage = stage_of(row.get("cascade"))
        browser_rows.append({"i": len(details), "id": row.get("id"), "category": row.get("category", ""),
                             "outcome": "right" if row.get("correct") else "wrong", "stage": stage,
                             "ref_ok": None, "target_ok": bool(row.get("correct"))})
        details.append({"query": f"example {row.get('example_id')} (queries are not stored by score --json)",
                        "base": f"parse status: {row.get('parse_status')}",
                        "base_saag": _saag_brief(row.get("cascade")),
                        "conditions": [{"label": "prediction", "correct": bool(row.get("correct")),
                                        "truth": row.get("truth_reason", ""), "saag": _saag_brief(row.get("cascade"))}]})
    if browser_rows:
        part.data["examples"] = details
        counts = Counter(r["outcome"] for r in browser_rows)
        part.sections.append({"id": f"{part.anchor}-examples", "title": "Prediction browser", "browser": True,
                              "intro": "One row per scored prediction; stage = where its SAAG cascade stopped.",
                              "rows": browser_rows, "ref_label": None, "target_label": "prediction",
                              "categories": sorted({r["category"] for r in browser_rows}),
                              "outcomes": [o for o in ("right", "wrong") if counts.get(o)], "outcome_counts": dict(counts),
                              "stages": [s for s in ("1", "2", "3", "passed", "n/a")
                                         if any(r["stage"] == s for r in browser_rows)]})
    return part


# -- formatting helpers ----------------------------------------------------------------------------


def _table(caption: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
           numeric: Sequence[int] = ()) -> dict[str, Any]:
    return {"caption": caption, "columns": list(columns), "rows": [[_cell(c) for c in r] for r in rows],
            "numeric": set(numeric)}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _append(part: Part, section: dict[str, Any] | None) -> None:
    if section is not None:
        part.sections.append(section)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}" if whole else "-"


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def _sec(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


def _x(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}x"


def _p(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3g}"


def _ci(ci: Any) -> str:
    """A rate's CI in percent (accuracy *changes* use ``format.ci_points``)."""
    if not ci or ci[0] is None or ci[1] is None:
        return "-"
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _cost(value: Any) -> str:
    return "-" if value is None else f"{float(value):.5f}"


def _fmt_param(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


__all__ = ["METRICS", "OUTCOMES", "Part", "build_part", "load_queries", "outcome", "read_records", "stage_of"]
