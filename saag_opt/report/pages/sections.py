"""Sections shared by several run kinds.

SAAG funnel and metric distributions, accuracy per category, help and harm with bootstrap CIs,
latency and cost, reviewer-unusable counts, and the whole block a compare summary yields (compare
runs and optimize's TEST phase).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from saag_opt.compare.comparison import CompareSummary, SideSummary
from saag_opt.evaluation.categories import CategoryScore
from saag_opt.evaluation.helpharm import HelpHarm, bootstrap_rate_ci
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.model import CascadeReport
from saag_opt.report import charts
from saag_opt.report.format import ci_points, pct, points, ratio, stars
from saag_opt.report.pages.base import Part, num, p_value, rate_ci, sec, share, table, times
from saag_opt.report.score_tables import METRIC_LABELS, STAGE_NAMES
from saag_opt.saag import aggregate, metric_values

METRICS: dict[str, str] = {key: " ".join(label.split()) for key, label in METRIC_LABELS.items()}
"""The eight SAAG metrics in cascade order, named as the terminal tables name them (one spacing)."""


def _cascade(report: Mapping[str, Any] | None) -> list[Any]:
    """Call reports (``CascadeReport``) of a stored PredictionReport dict; [] when not applicable."""
    if not report or not report.get("applicable", True):
        return []
    out = []
    for call in report.get("calls") or []:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in call.items()
                                  if k in CascadeReport.__dataclass_fields__}
        out.append(CascadeReport(**fields))
    return out


def funnel_section(conditions: Sequence[tuple[str, Sequence[Mapping[str, Any] | None]]], part: Part) -> list[dict]:
    """Stage funnel and metric distributions of each condition's final predictions."""
    groups: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    panels: list[dict[str, Any]] = []
    series = [{"key": "reached", "label": "reached the stage"}, {"key": "passed", "label": "passed the stage"}]
    for label, reports in conditions:
        calls = [c for r in reports for c in _cascade(r)]
        if not calls:
            continue
        stats = aggregate(calls)
        values = metric_values(calls)
        for stage, name in STAGE_NAMES.items():
            reached, passed = stats.reached[stage], stats.passed[stage]
            groups.append({"label": f"{label}: {name}",
                           "values": {"reached": reached, "passed": passed},
                           "texts": {"reached": f"{reached} reached", "passed": f"{passed} passed"}})
            rows.append([label, name, reached, passed, share(passed, stats.n_calls), share(passed, reached)])
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
              "tables": [table("Stage funnel", ["condition", "stage", "reached", "passed", "passed, % of calls",
                                                 "pass rate at stage"], rows, numeric=[2, 3, 4, 5])]}
    metrics = {"id": f"{part.anchor}-metrics", "title": "SAAG metric distributions (stage-conditional)",
               "intro": "Each histogram is over the calls that reached the metric's stage only (named under it), "
                        "so means of different stages are over different calls and must not be compared as if "
                        "they were over the same population. PDS is per out-of-schema parameter.",
               "panels": panels,
               "tables": [table("Metric means (stage-conditional)", ["condition", "metric", "mean", "n", "over"],
                                 [[p["label"], m["title"], num(m["mean"]), m["n"], m["over"]]
                                  for p in panels for m in p["panels"]], numeric=[2, 3])]}
    return [funnel, metrics]


def accuracy_section(categories: Mapping[str, Mapping[str, CategoryScore]], series: Sequence[tuple[str, str]],
                     part: Part, overall: Mapping[str, float | None], title: str) -> dict[str, Any]:
    """Per-category truth accuracy for one or more conditions (``categories[cat][key]``, ``merge_categories``)."""
    keys = [k for k, _ in series]
    groups: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    for cat, cells in sorted(categories.items()):
        accuracy = {k: cells[k].accuracy if k in cells else None for k in keys}
        groups.append({"label": cat, "values": accuracy})
        n = next((c.n for c in cells.values()), None)
        rows.append([cat, n if n is not None else "-"] + [pct(accuracy[k]) for k in keys])
    rows.append(["all", sum(r[1] for r in rows if isinstance(r[1], int))] + [pct(overall.get(k)) for k in keys])
    chart = charts.hbars(groups, [{"key": k, "label": label} for k, label in series], vmax=1.0)
    return {"id": f"{part.anchor}-accuracy", "title": title,
            "intro": "Ground-truth accuracy (BFCL semantics) per dataset category.",
            "charts": [dict(chart, kind="hbars", title=title)],
            "tables": [table(title, ["category", "n"] + [f"{label} accuracy %" for _, label in series], rows,
                              numeric=list(range(1, 2 + len(series))))]}


def help_harm_rows(label: str, hh: HelpHarm, seed: int = 0) -> tuple[dict, list]:
    """A chart group (help and harm rates with bootstrap CIs) and a table row for one comparison."""
    help_ci = bootstrap_rate_ci(hh.fixed, hh.base_wrong, seed=seed)
    harm_ci = bootstrap_rate_ci(hh.broken, hh.base_right, seed=seed)
    group = {"label": label, "values": {"help": hh.helpfulness, "harm": hh.harmfulness},
             "cis": {"help": help_ci, "harm": harm_ci},
             "texts": {"help": f"help {pct(hh.helpfulness)}% ({hh.fixed}/{hh.base_wrong})",
                       "harm": f"harm {pct(hh.harmfulness)}% ({hh.broken}/{hh.base_right})"}}
    row = [label, hh.n, hh.fixed, hh.broken, pct(hh.helpfulness), rate_ci(help_ci), pct(hh.harmfulness),
           rate_ci(harm_ci), ratio(hh.ratio), points(hh.net_change), ci_points(hh.net_change_ci95),
           p_value(hh.p_value)]
    return group, row


HELP_HARM_COLUMNS = ["comparison", "n", "fixed", "broken", "help %", "help 95% CI", "harm %", "harm 95% CI",
                     "help:harm", "net change", "net 95% CI", "McNemar p"]


def help_harm_section(items: Sequence[tuple[str, HelpHarm]], part: Part, seed: int = 0) -> dict[str, Any]:
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
            "tables": [table("Help and harm", HELP_HARM_COLUMNS, rows, numeric=list(range(1, 12)))]}


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
        tables.append(table("Latency per example", ["condition", "base mean s", "with review mean s",
                                                     "overhead x", "reviewer calls / example"], latency,
                             numeric=[1, 2, 3, 4]))
    if rows:
        tables.append(table("Cost per LM role", ["part", "role", "calls", "cache hits", "tokens", "dollars",
                                                  "seconds", "errors", "models"], rows, numeric=[2, 3, 4, 5, 6, 7]))
    if not tables:
        return None
    return {"id": f"{part.anchor}-costs", "title": "Latency and cost per role",
            "intro": "From costs.json (the LM ledger of the run). Cache hits cost ~0 s and $0, so a repeated run "
                     "understates latency; the cache-hit column shows how much was replayed.",
            "tables": tables}


def unusable_section(counts: Mapping[str, int | None], part: Part) -> dict[str, Any] | None:
    """Reviewer-unusable counts per condition (conditions without a count are left out)."""
    rows = [[label, value] for label, value in counts.items() if value is not None]
    if not rows:
        return None
    return {"id": f"{part.anchor}-unusable", "title": "Reviewer output unusable",
            "intro": "Reviews whose output could not be read (the mechanism fell back as documented).",
            "tables": [table("Reviewer-unusable counts", ["condition", "unusable reviews"], rows, numeric=[1])]}


def reviewed_conditions(records: Sequence[ExampleRecord]) -> list[str]:
    """The reviewed (non-base) conditions of a run's records, in order of first appearance."""
    return list(dict.fromkeys(r.condition for r in records if r.condition != "base"))


def merge_categories(by_key: Mapping[str, Mapping[str, CategoryScore]]) -> dict[str, dict[str, CategoryScore]]:
    """``{condition: {category: score}}`` turned into ``{category: {condition: score}}``."""
    out: dict[str, dict[str, CategoryScore]] = {}
    for key, cats in by_key.items():
        for cat, score in cats.items():
            out.setdefault(cat, {})[key] = score
    return out


def _latency_row(label: str, side: SideSummary) -> list[Any]:
    lat = side.latency
    return [label, sec(lat.base_mean_seconds), sec(lat.final_mean_seconds), times(lat.overhead_x),
            num(side.reviewer_calls_per_item, 2)]


def compare_sections(summary: CompareSummary, labels: Sequence[str], part: Part, *, seed: int = 0,
                     prefix: str = "") -> list[dict[str, Any]]:
    """The sections of a compare summary (a compare run, or optimize's TEST phase); ``labels`` name the versions.

    Accuracy per category (base and one column per version), help/harm (each vs base, and each pair
    paired), the pair matrix when there are more than two versions (``pairs_section``), latency and
    cost.
    """
    sides, base = summary.sides, summary.base
    label = dict(zip(summary.keys, labels))
    cats = merge_categories({"base": base.categories} | {s.key: s.accuracy.categories for s in sides})
    accuracy = accuracy_section(cats, [("base", "base"), *((s.key, label[s.key]) for s in sides)], part,
                                {"base": base.accuracy} | {s.key: s.accuracy.accuracy for s in sides},
                                f"{prefix}Truth accuracy per category: base, {', '.join(labels)}")
    helpharm = help_harm_section([*((f"base -> {label[s.key]}", s.help_harm) for s in sides),
                                  *((f"{label[p.ref]} -> {label[p.target]} (paired)", p.to_help_harm())
                                    for p in summary.pairs)], part, seed)
    helpharm["title"] = f"{prefix}Help and harm"
    ledgers: list[tuple[str, Mapping[str, Any] | None]] = [("shared base pass", summary.base_costs)] \
        if summary.base_costs else []
    ledgers += [(label[s.key], s.costs) for s in sides]
    out = [accuracy, helpharm] + ([pairs_section(summary, label, part)] if len(sides) > 2 else [])
    costs = cost_section(ledgers, [_latency_row(label[s.key], s) for s in sides], part)
    if costs is not None:
        out.append(costs)
    if prefix:
        for section in out:
            section["id"] += "-test"
            if not section["title"].startswith(prefix):
                section["title"] = prefix + section["title"]
    return out


def pairs_section(summary: CompareSummary, labels: Mapping[str, str], part: Part) -> dict[str, Any]:
    """Every pair of versions: the matrix of net changes with significance marks, and one row per pair.

    Why a matrix: with N versions the N(N-1)/2 tests read best as a grid (row minus column); the
    marks use the Holm-adjusted p, so reading the whole grid keeps the family-wise error at 5%.
    """
    keys = summary.keys
    by_pair = {(p.ref, p.target): p for p in summary.pairs}

    def cell(row: str, col: str) -> str:
        if row == col:
            return "·"
        p = by_pair.get((col, row)) or by_pair[(row, col)]
        change = None if p.net_change is None else (p.net_change if p.target == row else -p.net_change)
        return f"{points(change)} {stars(p.holm_p)}".rstrip()

    matrix = [[labels[r], *(cell(r, c) for c in keys)] for r in keys]
    rows = [[f"{labels[p.target]} vs {labels[p.ref]}", p.n, p.b_only_right, p.a_only_right, points(p.net_change),
             ci_points(p.net_change_ci95), p_value(p.mcnemar_p), p_value(p.holm_p), stars(p.holm_p) or "-"]
            for p in summary.pairs]
    return {"id": f"{part.anchor}-pairs", "title": "Every pair of versions",
            "intro": f"Each cell is the row version's accuracy minus the column version's on the examples both "
                     f"answered without error (percentage points). Marks use McNemar's exact p Holm-adjusted over "
                     f"all {len(summary.pairs)} pairs: * < 0.05, ** < 0.01, *** < 0.001.",
            "tables": [table("Pair matrix: row - column, net accuracy change", ["version", *(labels[k] for k in keys)],
                             matrix, numeric=list(range(1, 1 + len(keys)))),
                       table("Pairs: McNemar exact p and Holm-adjusted p",
                             ["pair", "n", "only later right", "only earlier right", "net change", "net 95% CI",
                              "McNemar p", "Holm p", "significant (Holm)"], rows, numeric=list(range(1, 8)))]}
