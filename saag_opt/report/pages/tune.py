"""Tune runs (issue 9): the help/harm Pareto scatter, the trials table, each parameter's effect.

Reads ``trials.jsonl`` (one row per optuna trial: ``number``, ``params``, ``state``, ``values``
as ``{"help", "harm"}`` or a list in ``summary.objectives`` order, ``constraint`` (optuna's
convention: <= 0 is feasible) or ``feasible``, ``cost_per_item_usd``, ``pareto``, ``repeat`` (or ``duplicate_of``),
``run_dir``) and ``summary.json`` (``objectives``, ``pareto``: the feasible front with each
configuration's ``test`` re-evaluation: ``accuracy``, ``help_harm``, ``cost_per_item_usd``,
``mean_seconds``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from saag_opt.report import charts
from saag_opt.report.format import ci_points, pct, ratio
from saag_opt.report.pages.base import (
    Part,
    header_meta,
    new_part,
    p_value,
    param_text,
    read_json,
    read_jsonl,
    sec,
    table,
    usd,
)
from saag_opt.runfiles import RunHeader


def tune_part(run_dir: Path, header: RunHeader, index: int) -> Part:
    """``runs/<ts>-tune/``: trials.jsonl (one row per optuna trial) and summary.json (issue 9)."""
    summary = read_json(run_dir / "summary.json") or {}
    trials = read_jsonl(run_dir / "trials.jsonl")
    part = new_part("tune", f"Tune {header.run_id}: optuna over reviewer configurations", index)
    part.meta = header_meta(header) + [(k, str(summary[k])) for k in ("study", "sampler", "storage") if summary.get(k)]
    names = list((summary.get("objectives") or {"help": "maximize", "harm": "minimize"}).keys())
    rows = [_trial_view(t, names) for t in trials]
    tested = {int(p["number"]): p for p in summary.get("pareto") or [] if isinstance(p, Mapping) and "number" in p}
    dots: list[dict[str, Any]] = []
    links: list[list[tuple[float, float]]] = []
    for t in rows:
        if t["help"] is None or t["harm"] is None:
            continue
        shape = "pareto" if t["pareto"] else ("dot" if t["feasible"] is not False else "cross")
        flags = (" (infeasible)" if t["feasible"] is False else "") + (" Pareto" if t["pareto"] else "")
        dots.append({"x": t["harm"], "y": t["help"], "shape": shape, "label": f"#{t['number']}",
                     "title": f"trial {t['number']}: help {pct(t['help'])}%, harm {pct(t['harm'])}%{flags}"})
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
            "intro": "Each trial on the tuning split: ● feasible, ✕ infeasible (violates a constraint), "
                     "◎ Pareto-optimal among the feasible trials (joined by the dashed front), ◇ the same "
                     "configuration re-evaluated on TEST (which no trial saw), linked to its tuning point by a "
                     "dotted line. Up and to the left is better.",
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
        table_rows = [[t["number"], t["state"]] + [param_text(t["params"].get(k)) for k in params]
                      + [pct(t["help"]), pct(t["harm"]), usd(t["cost"]),
                         {True: "yes", False: "no", None: "-"}[t["feasible"]], "yes" if t["pareto"] else "",
                         "yes" if t["repeat"] else ""] for t in rows]
        part.sections.append({
            "id": f"{part.anchor}-trials", "title": "Trials",
            "intro": "Every trial in trials.jsonl. A repeated configuration is answered from the stored result.",
            "tables": [table("Trials", ["trial", "state"] + params + ["help %", "harm %", "cost / item $",
                                                                       "feasible", "Pareto", "repeat"],
                              table_rows, numeric=[0] + list(range(2 + len(params), 5 + len(params))))]})
        part.sections.append(_effects_section(rows, params, part))
    pareto_rows = []
    for number, item in sorted(tested.items()):
        test = item.get("test") or {}
        hh = test.get("help_harm") or test
        pareto_rows.append([number, ", ".join(f"{k}={param_text(v)}" for k, v in (item.get("params") or {}).items()),
                            pct(test.get("accuracy")), pct(hh.get("helpfulness")), pct(hh.get("harmfulness")),
                            ratio(hh.get("ratio")), p_value(hh.get("mcnemar_p")), ci_points(hh.get("net_change_ci95")),
                            usd(test.get("cost_per_item_usd")), sec(test.get("mean_seconds"))])
    if pareto_rows:
        part.sections.append({"id": f"{part.anchor}-tunetest", "title": "Pareto configurations on TEST",
                              "intro": "The feasible Pareto set re-evaluated on the test split, against the "
                                       "base agent.",
                              "tables": [table("Pareto configurations on TEST",
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
            "cost": _first(row.get("cost_per_item_usd"), (row.get("metrics") or {}).get("cost_per_item_usd"),
                           (row.get("user_attrs") or {}).get("cost_per_item_usd")),
            "feasible": feasible, "pareto": bool(row.get("pareto")),
            "repeat": bool(row.get("repeat")) or row.get("duplicate_of") is not None}


def _first(*values: Any) -> Any:
    """The first value that is not None (tune writes cost under ``metrics``; older rows at the top)."""
    return next((v for v in values if v is not None), None)


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
                    cells.setdefault((param_text(value), param_text(value)), []).append(t)
        table_rows, groups = [], []
        for (_, value), items in sorted(cells.items(), key=lambda kv: kv[0][0]):
            mean_help = sum(t["help"] for t in items) / len(items)
            mean_harm = sum(t["harm"] for t in items) / len(items)
            table_rows.append([value, len(items), pct(mean_help), pct(mean_harm)])
            groups.append({"label": f"{value} (n={len(items)})", "values": {"help": mean_help, "harm": mean_harm}})
        chart = dict(charts.hbars(groups, [{"key": "help", "label": "mean helpfulness"},
                                           {"key": "harm", "label": "mean harmfulness"}], vmax=1.0),
                     kind="hbars", title=f"Effect of {param}", caption=f"Effect of {param}")
        blocks.append({"charts": [chart], "tables": [table(f"Effect of {param}", [param, "trials", "mean help %",
                                                                                   "mean harm %"], table_rows,
                                                            numeric=[1, 2, 3])]})
    return {"id": f"{part.anchor}-effects", "title": "Effect of each searched parameter",
            "intro": "Mean help and harm of the completed trials at each value (numeric ranges in three equal-count "
                     "bins). Marginal means over a non-random design: read them as hints, not as causal effects.",
            "blocks": blocks}
