"""Tune runs: the help/harm Pareto scatter, the trials table, each parameter's effect.

Reads the run through ``runfiles.read_run``: ``trials.jsonl`` as ``TrialRow`` (one row per optuna
trial) and ``summary.json`` as ``TuneSummary``, whose ``test`` holds the feasible Pareto set
re-evaluated on the test split (each an evaluate summary: accuracy, help/harm with McNemar p and CI)
with its tune metrics (``cost_per_item_usd``, ``seconds_per_item``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from saag_opt.errors import ConfigError
from saag_opt.report import charts
from saag_opt.report.format import ci_points, pct, ratio
from saag_opt.report.pages.base import Part, header_meta, new_part, p_value, param_text, sec, table, usd
from saag_opt.runfiles import Run
from saag_opt.tune.results import TestResult, TrialRow, TuneSummary
from saag_opt.tune.storage import parse_storage


def tune_part(run: Run, index: int) -> Part:
    """``runs/<ts>-tune/``: trials.jsonl (one row per optuna trial) and summary.json."""
    header = run.header
    summary: TuneSummary | None = run.summary
    part = new_part("tune", f"Tune {header.run_id}: optuna over reviewer configurations", index)
    named = (("study", summary.study), ("sampler", summary.sampler), ("storage", summary.storage)) if summary else ()
    part.meta = header_meta(header) + [(k, v) for k, v in named if v]
    if summary is not None:
        part.meta, part.links = _storage_entries(summary.storage, part.meta)
    rows = [_trial_view(t) for t in run.records]
    tested = {t.trial: t for t in summary.test} if summary else {}
    dots, links = _pareto_points(rows, tested)
    if dots:
        part.sections.append(_pareto_section(dots, links, rows, part))
    if rows:
        part.sections.append(_trials_section(rows, part))
        part.sections.append(_effects_section(rows, sorted({k for t in rows for k in t["params"]}), part))
    if tested:
        part.sections.append(_test_section(tested, part))
    return part


def _storage_entries(storage: str, meta: list[tuple[str, str]]
                     ) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The storage as a link to its file (sqlite or journal) and the optuna-dashboard command that opens it."""
    try:
        spec = parse_storage(storage)
    except ConfigError:  # a summary written by hand or by an older version: leave the plain text
        return meta, []
    study_file = spec.file
    kept = [(k, v) for k, v in meta if k != "storage" or study_file is None]
    links = [("storage", study_file.resolve().as_uri(), storage)] if study_file is not None else []
    return kept + [("open with", spec.dashboard_command)], links


def _trial_view(row: TrialRow) -> dict[str, Any]:
    values = row.values or {}
    return {"number": row.number, "state": row.state, "params": row.params, "help": values.get("help"),
            "harm": values.get("harm"), "cost": row.metrics.get("cost_per_item_usd"), "feasible": row.feasible,
            "pareto": row.pareto, "repeat": row.duplicate_of is not None}


def _test_rates(test: TestResult | None) -> tuple[float | None, float | None]:
    """Help and harm of a configuration re-evaluated on TEST (None when it failed or was not re-evaluated)."""
    if test is None or test.summary is None:
        return None, None
    return test.summary.help_harm.helpfulness, test.summary.help_harm.harmfulness


def _pareto_points(rows: Sequence[Mapping[str, Any]], tested: Mapping[int, TestResult]
                   ) -> tuple[list[dict[str, Any]], list[list[tuple[float, float]]]]:
    """A point per completed trial, and per re-evaluated one a TEST point linked to it."""
    dots: list[dict[str, Any]] = []
    links: list[list[tuple[float, float]]] = []
    for t in rows:
        if t["help"] is None or t["harm"] is None:
            continue
        shape = "pareto" if t["pareto"] else ("dot" if t["feasible"] is not False else "cross")
        flags = (" (infeasible)" if t["feasible"] is False else "") + (" Pareto" if t["pareto"] else "")
        dots.append({"x": t["harm"], "y": t["help"], "shape": shape, "label": f"#{t['number']}",
                     "title": f"trial {t['number']}: help {pct(t['help'])}%, harm {pct(t['harm'])}%{flags}"})
        test_help, test_harm = _test_rates(tested.get(t["number"]))
        if test_help is not None and test_harm is not None:
            dots.append({"x": test_harm, "y": test_help, "shape": "test", "label": "",
                         "title": f"trial {t['number']} re-evaluated on TEST: help {pct(test_help)}%, "
                                  f"harm {pct(test_harm)}%"})
            links.append([(t["harm"], t["help"]), (test_harm, test_help)])
    return dots, links


def _pareto_section(dots: Sequence[Mapping[str, Any]], links: Sequence[Sequence[tuple[float, float]]],
                    rows: Sequence[Mapping[str, Any]], part: Part) -> dict[str, Any]:
    front = sorted((t["harm"], t["help"]) for t in rows if t["pareto"] and t["help"] is not None)
    return {
        "id": f"{part.anchor}-pareto", "title": "Help vs harm: the Pareto front",
        "intro": "Each trial on the tuning split: ● feasible, ✕ infeasible (violates a constraint), "
                 "◎ Pareto-optimal among the feasible trials (joined by the dashed front), ◇ the same "
                 "configuration re-evaluated on TEST (which no trial saw), linked to its tuning point by a "
                 "dotted line. Up and to the left is better.",
        "charts": [dict(charts.scatter(dots, x_label="harmfulness (lower is better)",
                                       y_label="helpfulness (higher is better)",
                                       x_range=(0.0, max(0.1, max(p["x"] for p in dots))), y_range=(0.0, 1.0),
                                       lines=[front] if len(front) > 1 else [], links=links,
                                       x_fmt="{:.1%}", y_fmt="{:.0%}",
                                       legend=[("dot", "feasible"), ("cross", "infeasible"),
                                               ("pareto", "Pareto-optimal"), ("test", "on TEST")]),
                        kind="scatter", title="Pareto front")]}


def _trials_section(rows: Sequence[Mapping[str, Any]], part: Part) -> dict[str, Any]:
    params = sorted({k for t in rows for k in t["params"]})
    table_rows = [[t["number"], t["state"]] + [param_text(t["params"].get(k)) for k in params]
                  + [pct(t["help"]), pct(t["harm"]), usd(t["cost"]),
                     {True: "yes", False: "no", None: "-"}[t["feasible"]], "yes" if t["pareto"] else "",
                     "yes" if t["repeat"] else ""] for t in rows]
    return {"id": f"{part.anchor}-trials", "title": "Trials",
            "intro": "Every trial in trials.jsonl. A repeated configuration is answered from the stored result.",
            "tables": [table("Trials", ["trial", "state"] + params + ["help %", "harm %", "cost / item $",
                                                                   "feasible", "Pareto", "repeat"],
                             table_rows, numeric=[0] + list(range(2 + len(params), 5 + len(params))))]}


def _test_section(tested: Mapping[int, TestResult], part: Part) -> dict[str, Any]:
    rows = []
    for number, test in sorted(tested.items()):
        evaluated = test.summary
        hh = evaluated.help_harm if evaluated is not None else None
        rows.append([number, ", ".join(f"{k}={param_text(v)}" for k, v in test.params.items()),
                     pct(evaluated.reviewed.accuracy if evaluated else None),
                     pct(hh.helpfulness if hh else None), pct(hh.harmfulness if hh else None),
                     ratio(hh.ratio if hh else None), p_value(hh.p_value if hh else None),
                     ci_points(hh.net_change_ci95 if hh else None), usd(test.metrics.get("cost_per_item_usd")),
                     sec(test.metrics.get("seconds_per_item"))])
    return {"id": f"{part.anchor}-tunetest", "title": "Pareto configurations on TEST",
            "intro": "The feasible Pareto set re-evaluated on the test split, against the base agent.",
            "tables": [table("Pareto configurations on TEST",
                             ["trial", "configuration", "accuracy %", "help %", "harm %", "help:harm", "McNemar p",
                              "net 95% CI", "cost / item $", "mean s"], rows, numeric=[0, 2, 3, 4, 5, 6, 8, 9])]}


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
