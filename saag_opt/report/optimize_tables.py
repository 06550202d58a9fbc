"""Terminal tables for ``saag-opt optimize``: seed vs best on TEST, candidates, and cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from saag_opt.report.format import num, pct, ratio


def seed_vs_best_table(test: Mapping[str, Any]) -> Table:
    """Accuracy on TEST: one row per category (and overall), one column per condition.

    Transposed on purpose: BFCL has up to 13 categories, conditions are at most three, so this
    fits an 80-column terminal where a row per condition would not.
    """
    versions = test["versions"]
    seed = versions[test["seed"]]
    labels = [(test["seed"], "seed")] + ([(test["best"], "best")] if test["best"] != test["seed"] else [])
    table = Table(title="TEST accuracy %: base vs seed vs best")
    table.add_column("category")
    table.add_column("base", justify="right")
    for version, role in labels:
        table.add_column(f"{role} ({version})", justify="right")
    for cat in sorted(seed["categories"]):
        table.add_row(cat, pct(seed["base_categories"].get(cat)),
                      *[pct(versions[v]["categories"].get(cat)) for v, _ in labels])
    table.add_section()
    table.add_row("[bold]overall[/]", pct(seed["base_accuracy"]), *[pct(versions[v]["accuracy"]) for v, _ in labels])
    return table


def help_harm_table(test: Mapping[str, Any]) -> Table:
    """Per version: help, harm, ratio and McNemar p against the base agent alone, and test cost."""
    versions = test["versions"]
    labels = [(test["seed"], "seed")] + ([(test["best"], "best")] if test["best"] != test["seed"] else [])
    table = Table(title="TEST: help / harm vs the base agent alone")
    for name, justify in (("condition", "left"), ("help %", "right"), ("harm %", "right"), ("ratio", "right"),
                          ("McNemar p", "right"), ("cost $", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for version, role in labels:
        row = versions[version]
        hh = row["help_harm"]
        table.add_row(f"{role} ({version})", pct(hh.get("helpfulness")), pct(hh.get("harmfulness")),
                      ratio(hh.get("ratio")), num(hh.get("mcnemar_p")), num(row.get("dollars"), ".4f"))
    return table


def candidates_table(summary: Mapping[str, Any]) -> Table:
    """GEPA pool: candidate index, prompt version, val score."""
    table = Table(title="GEPA candidates (val accuracy)")
    for name, justify in (("#", "right"), ("version", "left"), ("val", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    scores = summary.get("val_scores") or []
    for idx, version in sorted(((int(k), v) for k, v in summary.get("versions", {}).items())):
        mark = " (best)" if version == summary.get("best_version") else ""
        table.add_row(str(idx), f"{version}{mark}", num(scores[idx]) if idx < len(scores) else "-")
    return table


def cost_table(costs: Mapping[str, Any]) -> Table:
    """Spend per role: calls, cache hits, tokens, dollars, seconds."""
    table = Table(title="Cost by role, GEPA phase (test evaluations: cost $ column above)")
    for name in ("role", "calls", "cache hits", "tokens", "$", "seconds"):
        table.add_column(name, justify="left" if name == "role" else "right")
    for role, acct in (costs.get("roles") or {}).items():
        tokens = int(acct.get("prompt_tokens", 0)) + int(acct.get("completion_tokens", 0))
        table.add_row(role, str(acct.get("calls", 0)), str(acct.get("cache_hits", 0)), str(tokens),
                      num(acct.get("dollars"), ".4f"), num(acct.get("seconds"), ".1f"))
    return table


def print_optimize_report(console: Console, summary: Mapping[str, Any]) -> None:
    """The whole end-of-run report from ``OptimizeResult.to_dict()``."""
    console.print(candidates_table(summary))
    if summary.get("test"):
        console.print(seed_vs_best_table(summary["test"]))
        console.print(help_harm_table(summary["test"]))
        vs = summary["test"].get("best_vs_seed")
        if vs:
            console.print(f"best vs seed on test: {vs['best_only_right']} examples only best got right, "
                          f"{vs['seed_only_right']} only seed; McNemar p = {num(vs['mcnemar_p'])}")
    console.print(cost_table(summary.get("costs") or {}))
    console.print(f"stopped by: {summary.get('stopped_by')}; rollouts: {summary.get('metric_calls')}; "
                  f"best prompt: reviewer@{summary.get('best_version')} (alias 'best'); run: {summary.get('run_dir')}")


__all__ = ["candidates_table", "cost_table", "help_harm_table", "print_optimize_report", "seed_vs_best_table"]
