"""Recompute an experiment's tables from its committed run records (and collect new runs into them).

Every number in ``experiments/results/<name>.md`` and ``<name>.json`` comes from the compressed run
records beside them, ``experiments/results/<name>/<group>/<variant>/records.jsonl.gz``, read back as
the package reads any run (``runfiles.read_run``), through its own statistics (``summarise_pairs``,
``HelpHarm``), so anyone can check them:

    python experiments/recompute.py exp1             # rewrite exp1.md / exp1.json from the records
    python experiments/recompute.py exp1 --check     # exit 1 if the committed exp1.json differs
    python experiments/recompute.py exp1 --collect runs/exp1 --meta 'load=...'   # import finished runs
    python experiments/recompute.py exp1 --restore-base-cache   # on a new machine, before adding runs

Collecting a run also keeps the base agent's first answers it computed (``base-predictions.jsonl.gz``
beside its records); ``--restore-base-cache`` puts them back into the base-prediction cache, so a
condition added later (on a new machine, with empty caches) replays the base arm the
earlier runs already paid for instead of recomputing it.

A run directory's path relative to the collected folder is ``<group>/<variant>`` (the experiment
scripts pass ``--runs-dir OUT/<model>/<setting>/<variant>``); the newest finished run in each folder is
taken. Groups that share their first path component (one model) are also pooled. Collected files
carry no absolute paths (they are replaced by ``<path>/<basename>``) and no model weights.

A group may hold conversation runs instead (``evaluate`` on ``bfcl:multi_turn_*`` or ``tau2:<domain>``,
``EpisodeRecord`` rows): each reviewed condition is then paired with the base rows of its own run (same
entries, trials and seeds) through the package's ``summarise_episodes``, with what only a conversation
has: BFCL's leaderboard number and abstention turns, tau2's pass^k (``pass_hat_k_by_condition``), steps
withheld / revised, time per entry and per step. tau2 groups are shown beside the reviewer paper's
per-domain table (``PAPER_TAU2``).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import pickle
import platform
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import saag_opt.optimize.summary  # noqa: E402, F401 - registers optimize runs with read_run (exp3 has one)
from saag_opt.atomic import JsonShelf  # noqa: E402
from saag_opt.compare.comparison import holm  # noqa: E402
from saag_opt.data.tau2 import task_id_of  # noqa: E402
from saag_opt.evaluate.conversations import pass_hat_k_by_condition  # noqa: E402
from saag_opt.evaluation.conversation_records import VERB as MULTI_TURN_VERB  # noqa: E402 - also registers multi-turn runs
from saag_opt.evaluation.conversation_records import (  # noqa: E402
    EpisodeRecord,
    conversation_counts,
    leaderboard_share,
    summarise_episodes,
)
from saag_opt.evaluation.helpharm import HelpHarm, mcnemar_exact  # noqa: E402
from saag_opt.evaluation.paired import summarise_pairs  # noqa: E402
from saag_opt.evaluation.results import ExampleRecord  # noqa: E402 - also registers evaluate runs
from saag_opt.optimize.callbacks import QUARANTINE_FILE  # noqa: E402
from saag_opt.optimize.candidates import by_component, lineage_change  # noqa: E402
from saag_opt.optimize.summary import CandidateHelpHarm  # noqa: E402
from saag_opt.paths import base_predictions_dir  # noqa: E402
from saag_opt.report.format import flips  # noqa: E402
from saag_opt.runfiles import Run, RunHeader, read_costs, read_header, read_run  # noqa: E402

R = TypeVar("R", bound=ExampleRecord)

RESULTS = ROOT / "experiments" / "results"
ALPHA = 0.05
Z95 = 1.959963984540054
ABS_PATH = re.compile(r"(?<![\w.:/])/(?:[\w.+-]+/)*([\w.+-]+)")
"""An absolute POSIX path inside a string (the last component is kept)."""
PRIVATE_ROOTS = ("/root/", "/home/", "/tmp/", "/work/", "/Users/", "/var/")
"""Path prefixes that must never appear in a committed file."""
TAU2_CATEGORY = "tau2_"
"""The category prefix of tau2 tasks (``tau2_<domain>``, ``data.tau2.episode_from_task``)."""
PAPER_TAU2: dict[str, Any] = {
    "paper": "Ta, Zhu and Shayandeh, Reinforced Agent: Inference-Time Feedback for Tool-Calling Agents "
             "(arXiv 2604.27233; GEM workshop at ACL 2026)",
    "source": "Table 3 (Table 8 in its appendix) and Table 9, as read from the paper by secondary sources "
              "(its full text was not available to this project); the averages check arithmetically",
    "metric": "pass rate per domain, the average of 3 benchmark runs",
    "domains": ["airline", "retail", "telecom"],
    "rows": [
        {"config": "4o baseline", "condition": "base alone", "base": "gpt-4o-2024-11-20 (temperature 0, seed 42)",
         "reviewer": None, "pass": {"airline": 0.420, "retail": 0.629, "telecom": 0.412}, "mean": 0.487},
        {"config": "4o-r5-4o-v1", "condition": "r5, reviewer prompt v1", "base": "gpt-4o-2024-11-20 (temperature 0, seed 42)",
         "reviewer": "gpt-4o", "pass": {"airline": 0.407, "retail": 0.626, "telecom": 0.640}, "mean": 0.558},
    ],
    "latency_per_episode": {"base_seconds": 158.7, "seconds": 384.3, "overhead_x": 2.4,
                            "reviewer_calls_per_turn": 0.96, "configuration": "not stated"},
}
"""The reviewer paper's tau2-bench numbers (the project's research notes on the paper), shown beside ours."""


# -- statistics ----------------------------------------------------------------------------------------


def wilson(correct: int, n: int) -> list[float] | None:
    """95% Wilson score interval of a proportion (exact enough at n = 10, unlike the normal one)."""
    if n == 0:
        return None
    p = correct / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return [round(max(0.0, centre - half), 12), round(min(1.0, centre + half), 12)]  # 1 - 1e-16 is 1


def min_discordant() -> int:
    """Fewest discordant pairs that can reach McNemar p < 0.05 (all of them in one direction)."""
    d = 1
    while mcnemar_exact(d, 0) >= ALPHA:
        d += 1
    return d


def min_split(discordant: int) -> int | None:
    """Smallest majority k of ``discordant`` pairs with McNemar p < 0.05 (None: no split can reach it)."""
    for k in range((discordant + 1) // 2, discordant + 1):
        if mcnemar_exact(k, discordant - k) < ALPHA:
            return k
    return None


def detectable(n: int, accuracy: float | None, discordant: int) -> dict[str, Any]:
    """What the sample could have detected: the smallest significant net change and the CI width."""
    d_min = min_discordant()
    k = min_split(discordant)
    return {
        "n": n,
        "min_discordant_for_p05": d_min,
        "min_net_change_for_p05": d_min / n if n else None,
        "observed_discordant": discordant,
        "majority_needed_at_observed_discordant": k,
        "min_net_change_at_observed_discordant": (2 * k - discordant) / n if (k is not None and n) else None,
        "accuracy_ci_half_width": ((lambda ci: (ci[1] - ci[0]) / 2)(wilson(round((accuracy or 0) * n), n))
                                   if n else None),
    }


# -- records -> numbers ----------------------------------------------------------------------------------


def funnel(records: Iterable[ExampleRecord]) -> dict[str, int]:
    """Where the final predictions stop in the (gold-aware) SAAG cascade, and how many are correct."""
    stages: Counter[str] = Counter()
    for record in records:
        report = record.saag or {}
        if record.error is not None:
            stages["error"] += 1
        elif not report.get("applicable", False):
            stages["not_applicable"] += 1
        else:
            reached = report.get("stage_reached")
            stages["passed" if reached == "passed" else f"stage{reached}_fail"] += 1
        stages["correct"] += record.correct
    order = ["stage1_fail", "stage2_fail", "stage3_fail", "passed", "not_applicable", "error", "correct"]
    return {key: stages.get(key, 0) for key in order}


def funnel_modes(records: Iterable[ExampleRecord]) -> list[str]:
    """The stage-3 grounding modes the stored (evaluation-side) reports were made with."""
    return sorted({str((r.saag or {}).get("grounding", "paper")) for r in records if r.saag})


def repair_rounds(records: Sequence[ExampleRecord]) -> dict[str, Any] | None:
    """SAAG self-repair by round: when the cascade first passed, and final correctness per outcome.

    ``rounds[i]`` reviews the i-th tentative prediction (0 = the base call), so a first
    ``saag_pass`` at index r means the r-th repair fixed what the cascade saw. None for mechanisms
    without SAAG rounds.
    """
    # A gated reviewer's only round on a clean call is the SAAG gate: that is not self-repair.
    saag_rows = [r for r in records if r.rounds and all(x.reviewer == "saag" for x in r.rounds)
                 and not r.condition.startswith("gate+")]
    if not saag_rows:
        return None
    outcome: dict[str, list[int]] = {}
    for record in saag_rows:
        passes = [x.index for x in record.rounds if x.verdict == "saag_pass"]
        key = "base_passed" if passes and passes[0] == 0 else (
            f"passed_after_{passes[0]}" if passes else "never_passed")
        cell = outcome.setdefault(key, [0, 0])
        cell[0] += 1
        cell[1] += record.correct
    entered = sum(n for k, (n, _) in outcome.items() if k != "base_passed")

    def sort_key(key: str) -> tuple[int, int]:
        if key == "base_passed":
            return (0, 0)
        return (2, 0) if key == "never_passed" else (1, int(key.rsplit("_", 1)[1]))

    return {"entered_repair": entered,
            "by_outcome": {k: {"n": outcome[k][0], "correct": outcome[k][1]} for k in sorted(outcome, key=sort_key)},
            "repair_calls_per_entered": (sum(r.agent_calls for r in saag_rows) / entered) if entered else None}


def accuracy_stats(label: str, rows: Sequence[ExampleRecord]) -> dict[str, Any]:
    """One condition's accuracy with its Wilson CI, calls per item, latency and per category (any record kind)."""
    n, correct = len(rows), sum(r.correct for r in rows)
    categories: dict[str, list[int]] = {}
    for r in rows:
        cell = categories.setdefault(r.category, [0, 0])
        cell[0] += 1
        cell[1] += r.correct
    ok = [r.seconds for r in rows if r.error is None]
    return {
        "condition": label, "n": n, "correct": correct, "accuracy": correct / n if n else None,
        "accuracy_ci95": wilson(correct, n), "errors": sum(r.error is not None for r in rows),
        "reviewer_unusable": sum(r.reviewer_unusable for r in rows),
        "cost": {"agent_calls_per_item": sum(r.agent_calls for r in rows) / n if n else None,
                 "reviewer_calls_per_item": sum(r.reviewer_calls for r in rows) / n if n else None},
        "latency_mean_seconds": sum(ok) / len(ok) if ok else None,
        "categories": {c: {"n": v[0], "correct": v[1], "accuracy": v[1] / v[0]} for c, v in sorted(categories.items())},
    }


def condition_stats(label: str, rows: Sequence[ExampleRecord]) -> dict[str, Any]:
    """One single-turn condition: ``accuracy_stats``, the SAAG funnel and self-repair by round."""
    stats = accuracy_stats(label, rows)
    stats["cost"]["dollars"] = 0.0  # the single-turn experiments ran on the embedded model
    return {**stats, "funnel": funnel(rows), "funnel_grounding": funnel_modes(rows), "repair": repair_rounds(rows)}


def paired(a_label: str, b_label: str, a: Mapping[str, ExampleRecord], b: Mapping[str, ExampleRecord]) -> dict[str, Any]:
    """B against A on their shared error-free examples: help (A wrong, B right), harm, McNemar, CI."""
    ids = sorted(i for i in set(a) & set(b) if a[i].error is None and b[i].error is None)
    table = HelpHarm.from_pairs([(a[i].correct, b[i].correct) for i in ids])
    return {"a": a_label, "b": b_label, **table.to_dict(),
            "detectable": detectable(len(ids), table.base_accuracy, table.fixed + table.broken)}


def pairwise(variants: dict[str, dict[str, R]]) -> list[dict[str, Any]]:
    """Every pair of conditions, B against A (labels in order)."""
    labels = sorted(variants)
    return [paired(x, y, variants[x], variants[y]) for i, x in enumerate(labels) for y in labels[i + 1:]]


def category_help_harm(pairs: Sequence[tuple[ExampleRecord | None, ExampleRecord]]) -> dict[str, Any]:
    """Help and harm against the base within each category (the paper's per-category table)."""
    by: dict[str, list[tuple[bool, bool]]] = {}
    for base, row in pairs:
        if base is not None and base.error is None and row.error is None:
            by.setdefault(row.category, []).append((base.correct, row.correct))
    return {c: HelpHarm.from_pairs(cells).to_dict() for c, cells in sorted(by.items())}


def versus_base(hh: HelpHarm, overhead_x: float | None, gated_share: float | None,
                pairs: Sequence[tuple[ExampleRecord | None, ExampleRecord]]) -> dict[str, Any]:
    """One condition against the base: the help/harm table, latency overhead, what n could detect, per category."""
    return {**hh.to_dict(), "latency_overhead_x": overhead_x, "gated_share": gated_share,
            "detectable": detectable(hh.n, hh.base_accuracy, hh.fixed + hh.broken),
            "categories": category_help_harm(pairs)}


def split_runs(runs: dict[str, list[R]], key: Callable[[R], str]) -> tuple[
        dict[str, dict[str, R]], dict[str, dict[str, R]], dict[str, R], int]:
    """Per condition label its rows by ``key``, the base rows of its own run; the first run's base rows; disagreements.

    A label is the variant (its folder), or ``variant:condition`` when one run holds several
    conditions; ``disagreements`` counts base rows that differ in correctness between runs.
    """
    variants: dict[str, dict[str, R]] = {}
    own: dict[str, dict[str, R]] = {}
    bases: dict[str, R] = {}
    disagreements = 0
    for variant, records in sorted(runs.items()):
        conditions = sorted({r.condition for r in records} - {"base"})
        run_bases = {key(r): r for r in records if r.condition == "base"}
        for condition in conditions:
            label = variant if len(conditions) == 1 else f"{variant}:{condition}"
            variants[label] = {key(r): r for r in records if r.condition == condition}
            own[label] = run_bases
        for r in records:
            if r.condition != "base":
                continue
            if key(r) in bases and bases[key(r)].correct != r.correct:
                disagreements += 1
            bases.setdefault(key(r), r)
    return variants, own, bases, disagreements


def group_stats(runs: dict[str, list[ExampleRecord]]) -> dict[str, Any]:
    """All conditions of one single-turn group: base once, each variant vs base, each pair of variants."""
    variants, _, bases, base_disagreements = split_runs(runs, lambda r: r.example_id)
    out: dict[str, Any] = {"base_disagreements": base_disagreements,
                           "conditions": [condition_stats("base", list(bases.values()))]}
    out["conditions"] += [condition_stats(label, list(rows.values())) for label, rows in variants.items()]
    out["vs_base"] = {}
    for label, rows in variants.items():
        pairs = [(bases.get(i), rows[i]) for i in sorted(rows)]
        summary = summarise_pairs(label, pairs, gated=label.startswith("gate"))
        out["vs_base"][label] = versus_base(summary.help_harm, summary.latency.overhead_x, summary.gated_share, pairs)
    out["pairwise"] = pairwise(variants)
    return out


# -- conversations (multi-turn BFCL, tau2) -----------------------------------------------------------------


def entry_key(record: ExampleRecord) -> str:
    """An entry's key in a group: tau2's task ids repeat across domains (pooled groups), so the category is in it."""
    return f"{record.category}/{record.example_id}"


def is_tau2(records: Iterable[ExampleRecord]) -> bool:
    """The records are tau2 tasks (their category is ``tau2_<domain>``)."""
    return any(r.category.startswith(TAU2_CATEGORY) for r in records)


def _pass_hat_k(rows: Sequence[EpisodeRecord]) -> dict[int, float]:
    """tau2's pass^k of one condition's rows (``pass_hat_k_by_condition``)."""
    return next(iter(pass_hat_k_by_condition(rows).values()), {})


def conversation_condition(label: str, rows: Sequence[EpisodeRecord], tau2: bool) -> dict[str, Any]:
    """One condition of a conversation group (accuracy = valid entries, tau2: reward 1).

    ``accuracy_stats``, the package's conversation counts, reviewer calls per turn and step, LM seconds
    per step; BFCL's leaderboard number, or tau2's mean reward and pass^k (over every task, and per domain).
    """
    ok = [r for r in rows if r.error is None]
    counts = conversation_counts(rows)
    steps = [s for r in ok for t in r.turns for s in t.steps]
    reviewer = sum(r.reviewer_calls for r in ok)
    out = {**accuracy_stats(label, rows), "conversation": counts.model_dump(mode="json"),
           "reviewer_calls_per_turn": reviewer / counts.turns if counts.turns else None,
           "reviewer_calls_per_step": reviewer / counts.steps if counts.steps else None,
           "steps_per_entry": counts.steps / counts.episodes if counts.episodes else None,
           "seconds_per_step": sum(s.seconds for s in steps) / len(steps) if steps else None,
           "untimed_replays": sum(r.untimed_replays for r in ok), "tokens": sum(r.tokens for r in rows)}
    if tau2:
        rewards = [(r.judgement.reward or 0.0) if r.judgement is not None else 0.0 for r in rows]
        out["mean_reward"] = sum(rewards) / len(rewards) if rewards else None
        out["pass_hat_k"] = _pass_hat_k(rows)
        by_category = {c: [r for r in rows if r.category == c] for c in sorted({r.category for r in rows})}
        out["pass_hat_k_by_category"] = {c: _pass_hat_k(here) for c, here in by_category.items()}
        out["tasks_by_category"] = {c: len({task_id_of(r.example_id) for r in here}) for c, here in by_category.items()}
    else:
        out["leaderboard"] = leaderboard_share(rows)
    return out


def conversation_vs_base(label: str, pairs: Sequence[tuple[EpisodeRecord, EpisodeRecord]], tau2: bool) -> dict[str, Any]:
    """A reviewed condition against the base rows of its own run, through the package's ``summarise_episodes``."""
    condition = pairs[0][1].condition if pairs else label
    summary = summarise_episodes("", label, pairs, experimental=False, gated=condition.startswith("gate"))
    latency = summary.latency
    out = {**versus_base(summary.help_harm, latency.overhead_x, summary.gated_share, pairs),
           "base_mean_seconds": latency.base_mean_seconds, "final_mean_seconds": latency.final_mean_seconds,
           "untimed_replays": latency.untimed_replays, "errors": summary.errors,
           "abstention": summary.abstention_help_harm.to_dict() if summary.abstention_help_harm else None}
    if tau2:
        both = pass_hat_k_by_condition([r for pair in pairs for r in pair])
        out["pass_hat_k"] = {"base": both.get("base", {}), "reviewed": both.get(condition, {})}
    else:
        out["leaderboard"] = {"base": summary.leaderboard.get("base"), "reviewed": summary.leaderboard.get(label)}
    return out


def conversation_group_stats(runs: dict[str, list[EpisodeRecord]]) -> dict[str, Any]:
    """All conditions of one conversation group; each reviewed condition against its own run's base rows."""
    variants, own, bases, disagreements = split_runs(runs, entry_key)
    tau2 = is_tau2(r for records in runs.values() for r in records)
    conditions = [conversation_condition("base", list(bases.values()), tau2)]
    conditions += [conversation_condition(label, list(rows.values()), tau2) for label, rows in variants.items()]
    unpaired = {label: sum(k not in own[label] for k in rows) for label, rows in variants.items()}
    vs_base = {label: {**conversation_vs_base(label, [(own[label][k], rows[k]) for k in sorted(rows) if k in own[label]],
                                              tau2), "unpaired": unpaired[label]}
               for label, rows in variants.items()}
    return {"kind": "conversation", "benchmark": "tau2" if tau2 else "bfcl", "base_disagreements": disagreements,
            "conditions": conditions, "vs_base": vs_base, "pairwise": pairwise(variants)}


def family(runs: dict[str, list[ExampleRecord]]) -> str:
    """What a group's runs are: ``single`` (single-call evaluate), ``bfcl`` or ``tau2`` conversations (pooled apart)."""
    records = [r for rows in runs.values() for r in rows]
    if not any(isinstance(r, EpisodeRecord) for r in records):
        return "single"
    return "tau2" if is_tau2(records) else "bfcl"


def stats_of(group: str, runs: dict[str, list[ExampleRecord]]) -> dict[str, Any]:
    """``group_stats`` or ``conversation_group_stats``, by the kind of record the group's runs hold."""
    conversations = {v: [r for r in records if isinstance(r, EpisodeRecord)] for v, records in runs.items()}
    held = sum(map(len, conversations.values()))
    if held == 0:
        return group_stats(runs)
    if held != sum(map(len, runs.values())):
        raise SystemExit(f"group {group} mixes conversation runs and single-call runs; collect them into "
                         "separate groups (the scripts' OUT/<model>/<dataset>/<variant> layout does)")
    return conversation_group_stats(conversations)


# -- beside the papers -------------------------------------------------------------------------------------


def _domain(category: str) -> str:
    return category.removeprefix(TAU2_CATEGORY)


def beside_papers(groups: dict[str, dict[str, Any]], models: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    """tau2: our pass^1 per domain and condition (per model, from the unpooled groups) beside ``PAPER_TAU2``.

    Our per-domain mean is over the paper's domains, unweighted as the paper's average is, and only
    when every one of them was run. None when the experiment has no tau2 group.
    """
    ours: dict[str, dict[str, Any]] = {}
    for group, stats in groups.items():
        if stats.get("benchmark") != "tau2" or group.split("/")[-1].startswith("pooled"):
            continue
        head = group.split("/", 1)[0]
        mine = ours.setdefault(head, {"models": models.get(head, {}), "conditions": {}, "tasks": {}, "trials": {},
                                      "latency": {}})
        for cond in stats["conditions"]:
            cell = mine["conditions"].setdefault(cond["condition"], {"pass_hat_1": {}})
            for category, ks in cond["pass_hat_k_by_category"].items():
                if 1 in ks:
                    cell["pass_hat_1"][_domain(category)] = ks[1]
        base = stats["conditions"][0]
        for category, tasks in base["tasks_by_category"].items():
            mine["tasks"][_domain(category)] = tasks
            mine["trials"][_domain(category)] = base["categories"][category]["n"] / tasks
        domains = "+".join(_domain(c) for c in base["categories"])
        reviewer_calls = {c["condition"]: c["reviewer_calls_per_turn"] for c in stats["conditions"]}
        mine["latency"][domains] = {label: {"base_seconds": hh["base_mean_seconds"], "seconds": hh["final_mean_seconds"],
                                            "overhead_x": hh["latency_overhead_x"],
                                            "reviewer_calls_per_turn": reviewer_calls.get(label)}
                                    for label, hh in stats["vs_base"].items()}
    if not ours:
        return None
    paper_domains = PAPER_TAU2["domains"]
    for mine in ours.values():
        for cell in mine["conditions"].values():
            done = [cell["pass_hat_1"][d] for d in paper_domains if d in cell["pass_hat_1"]]
            cell["paper_domains_mean"] = sum(done) / len(done) if len(done) == len(paper_domains) else None
    return {"tau2": {"paper": PAPER_TAU2, "ours": ours}}


# -- runs -------------------------------------------------------------------------------------------------


def read_runs(name: str) -> dict[Path, Run]:
    """Every collected run under ``experiments/results/<name>/``, by its path there, read typed (``read_run``)."""
    return {path.parent.relative_to(RESULTS / name): read_run(path.parent)
            for path in sorted((RESULTS / name).rglob("run.json"))}


def load_results(runs: dict[Path, Run]) -> dict[str, dict[str, list[ExampleRecord]]]:
    """``{group: {variant: records}}`` of the runs that kept their records."""
    groups: dict[str, dict[str, list[ExampleRecord]]] = {}
    for rel, run in runs.items():
        if (run.path / "records.jsonl.gz").is_file() or (run.path / "records.jsonl").is_file():
            groups.setdefault(str(rel.parent), {})[rel.name] = run.records
    return groups


def run_provenance(runs: dict[Path, Run]) -> list[dict[str, Any]]:
    """Per run: command arguments, commit, wall seconds (from run.json: its attempts' spans, summed).

    A conversation run adds its entries and wall seconds per entry; a run whose ``costs.json`` was
    collected, its spend by role.
    """
    out = []
    for rel, run in runs.items():
        header = run.header
        wall = sum(end - start for start, end in attempt_spans(header)) if header.created and header.finished else None
        row: dict[str, Any] = {"run": str(rel), "verb": header.verb, "status": header.status,
                               "git_revision": header.git_revision, "args": header.args_passed,
                               "created": header.created, "wall_seconds": wall}
        if header.verb == MULTI_TURN_VERB:
            entries = len({entry_key(r) for r in run.records})
            row["entries"] = entries
            row["wall_seconds_per_entry"] = wall / entries if wall is not None and entries else None
        costs = read_costs(run.path)
        if costs is not None:
            row["dollars"] = {role: cell.get("dollars") for role, cell in (costs.get("roles") or {}).items()}
        out.append(row)
    return out


def recompute(name: str) -> dict[str, Any]:
    """The experiment's JSON: per group (and pooled per model), every condition and comparison."""
    collected = read_runs(name)
    groups = load_results(collected)
    families = {group: family(runs) for group, runs in groups.items()}
    pools: dict[str, dict[str, list[ExampleRecord]]] = {}
    members: dict[str, set[str]] = {}
    for group, runs in groups.items():
        head = group.split("/", 1)[0]
        if head != group:
            mixed = len({families[g] for g in groups if g.startswith(head + "/")}) > 1
            key = f"{head}/pooled" + (f"-{families[group]}" if mixed else "")  # never BFCL with tau2
            members.setdefault(key, set()).add(group)
            for variant, records in runs.items():
                pools.setdefault(key, {}).setdefault(variant, []).extend(records)
    meta_path = RESULTS / name / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    pooled = str(meta.get("pooled", "true")).lower() != "false"  # groups of different samples: not one table
    pools = {k: v for k, v in pools.items() if len(members[k]) > 1 and pooled}
    stats = {g: stats_of(g, r) for g, r in {**groups, **pools}.items()}
    out = {"experiment": name, "meta": meta, "runs": run_provenance(collected), "groups": stats}
    gepa = gepa_runs(collected)
    if gepa:
        out["gepa"] = gepa
    questions = confirmatory(name, groups, gepa)
    if questions is not None:
        out["confirmatory"] = questions
    models = {str(rel).split("/", 1)[0]: dict(run.header.models) for rel, run in collected.items()}
    papers = beside_papers(stats, models)
    if papers is not None:
        out["beside_papers"] = papers
    return out


CONFIRMATORY: dict[str, tuple[str, tuple[tuple[str, str, str], ...]]] = {
    "exp8": ("bfcl_single_turn-primary", (
        ("Does GEPA's best beat its seed?", "informed-v2", "add-informed"),
        ("Does it beat saag+abstain?", "abstain", "add-informed"),
    )),
}
"""Per experiment, as its protocol pre-registered them (docs/exp8-protocol.md): the group (the last part of its
name) and each question's two arms, B against A; B is a GEPA arm, named by its runs-dir folder, whose best is
evaluated as ``<arm>-<version>``. Answered together, Holm-corrected over the questions asked."""


def confirmatory(name: str, groups: dict[str, dict[str, list[ExampleRecord]]],
                 gepa: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The experiment's pre-registered questions, each B against A on the primary sample (McNemar, Holm).

    A GEPA arm whose best stayed its seed answers "does it beat its seed" with no comparison (no candidate
    cleared the val margin, a null result) and is otherwise the seed: the seed's own run stands for it.
    A question whose arms have not both run yet is listed as pending.
    """
    if name not in CONFIRMATORY:
        return None
    where, questions = CONFIRMATORY[name]
    runs = next((r for g, r in groups.items() if g.split("/")[-1] == where), {})
    variants = split_runs(runs, lambda r: r.example_id)[0] if runs else {}
    out: list[dict[str, Any]] = []
    for question, a, arm in questions:
        row: dict[str, Any] = {"question": question, "a": a, "arm": arm, "b": None, "status": "pending"}
        run = next((info for rel, info in gepa.items() if rel.split("/")[-1] == arm), None)
        if run is not None and run["best"] == run["seed"]:
            seed_run = f"{arm.split('-', 1)[1]}-{run['seed']}"  # add-informed's seed ran as informed-v2
            row["seed_stayed_best"] = True
            if a == seed_run:
                row["status"] = "null: no candidate cleared the val margin (best is the seed)"
                out.append(row)
                continue
            row["b"] = seed_run if seed_run in variants else None
        else:
            row["b"] = next((v for v in sorted(variants) if v.startswith(f"{arm}-")), None)
        if row["b"] is not None and a in variants:
            row.update(status="answered", **paired(a, row["b"], variants[a], variants[row["b"]]))
        out.append(row)
    asked = [r for r in out if r["status"] == "answered"]
    for row, adjusted in zip(asked, holm([r["mcnemar_p"] for r in asked])):
        row["holm_p"] = adjusted
        row["significant"] = adjusted < ALPHA
    return out


def gepa_runs(runs: dict[Path, Run]) -> dict[str, dict[str, Any]]:
    """Per optimize run: what stopped it, its seed and best, each candidate's val help/harm and edit, the quarantine.

    From its ``summary.json`` (the candidates' counts, ``optimize.candidates``) and ``quarantine.json``
    (the proposals the rails refused); the reasons stay in the run's prompt store, not collected.
    """
    out: dict[str, dict[str, Any]] = {}
    for rel, run in runs.items():
        if run.header.verb != "optimize" or not (run.path / "summary.json").is_file():
            continue
        summary = json.loads((run.path / "summary.json").read_text(encoding="utf-8"))
        quarantine = run.path / QUARANTINE_FILE
        refused = json.loads(quarantine.read_text(encoding="utf-8")).get("quarantined", []) if quarantine.is_file() else []
        recorded = "candidates" in summary  # a run older than per-candidate counts kept neither them nor its quarantine
        flips_file = run.path / FLIPS_FILE
        flips = json.loads(flips_file.read_text(encoding="utf-8")) if flips_file.is_file() else {}
        candidates = [{**flips.get(str(c["candidate"]), {}), **c} for c in summary.get("candidates") or []]
        out[str(rel)] = {"seed": summary.get("seed_version"), "best": summary.get("best_version"),
                         "stopped_by": summary.get("stopped_by"), "metric_calls": summary.get("metric_calls"),
                         "candidates": candidates, "quarantined": len(refused) if recorded else None,
                         "by_component": by_component(CandidateHelpHarm.model_validate(c) for c in candidates)}
    return out


FLIPS_FILE = "val_flips.json"
"""Per candidate, the edited predictors and the val examples gained and lost against the parent, read from the
run's gepa state at collection for a run whose summary predates those fields (``candidates.from_state``'s)."""


def state_flips(run: Path) -> dict[str, dict[str, Any]] | None:
    """``FLIPS_FILE``'s content from ``run``'s gepa state; None when its summary has them or it kept no state."""
    summary, state_file = run / "summary.json", run / "gepa" / "gepa_state.bin"
    candidates = json.loads(summary.read_text(encoding="utf-8")).get("candidates") if summary.is_file() else None
    if not candidates or "gained" in candidates[0] or not state_file.is_file():
        return None
    with state_file.open("rb") as handle:
        state = pickle.load(handle)  # noqa: S301 - the run's own state file, written by gepa on this machine
    view = SimpleNamespace(**state)  # the attributes candidates.lineage_change reads
    out: dict[str, dict[str, Any]] = {}
    for idx in range(len(view.program_candidates)):
        _, components, flips = lineage_change(view, idx)
        out[str(idx)] = {"components": components, "gained": flips[0] if flips else None,
                         "lost": flips[1] if flips else None}
    return out


def _confirmatory_lines(questions: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["", "## Confirmatory questions (pre-registered)", "",
             "On the primary sample, B against A on the same examples (fixed = A wrong and B right); McNemar exact, "
             "Holm-corrected over the questions answered; detectable = the smallest net change this n could show "
             "at p < 0.05.", "",
             "| question | A | B | n | fixed | broken | net change (B - A) | 95% CI | McNemar p | Holm p | answer |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for q in questions:
        if q["status"] != "answered":
            lines.append(f"| {q['question']} | {q['a']} | {q['b'] or q['arm']} | - | - | - | - | - | - | - | "
                         f"{q['status']} |")
            continue
        answer = "yes" if q["significant"] and q["net_change"] > 0 else (
            "no: B is worse" if q["significant"] else
            f"not shown (detectable: {_pct(q['detectable']['min_net_change_for_p05'])})")
        lines.append(f"| {q['question']} | {q['a']} | {q['b']} | {q['n']} | {q['fixed']} | {q['broken']} | "
                     f"{_pct(q['net_change'])} | {_ci(q['net_change_ci95'])} | {_p(q['mcnemar_p'])} | "
                     f"{_p(q['holm_p'])} | {answer} |")
    return lines


def _gepa_lines(gepa: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["", "## GEPA runs", "",
             "Each candidate on val (fixed = a wrong base call the review made right, broken = a right one made "
             "wrong); the edit is the rule-level change from its parent. `best` leaves the seed only past the rails' "
             "val margin.", ""]
    for run, info in gepa.items():
        lines += [f"### {run}", "", f"seed {info['seed']}, best {info['best']}, stopped by {info['stopped_by']} after "
                  f"{info['metric_calls']} rollouts" + ("" if info["quarantined"] is None else
                                                        f"; {info['quarantined']} proposal(s) quarantined by the rails") + "."]
        if info["quarantined"] is None:
            lines += ["", "(The run predates per-candidate help/harm: its summary keeps val scores only.)", ""]
            continue
        lines += ["", "| candidate | version | parent | val acc | vs parent | fixed | broken | help | harm | edit |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in info["candidates"]:
            edit = "; ".join(c.get("edit") or []).replace("|", "/") or "(seed)"
            parent = "-" if c.get("parent") is None else c["parent"]
            lines.append(f"| {c['candidate']} | {c.get('version') or '-'} | {parent} | {_pct(c['val_accuracy'])} | "
                         f"{flips(c.get('gained'), c.get('lost'))} | {c['fixed']} | {c['broken']} | "
                         f"{_pct(c.get('help'))} | {_pct(c.get('harm'))} | {edit} |")
        lines.append("")
    moved: dict[str, dict[str, int]] = {}
    for info in gepa.values():
        for name, row in (info.get("by_component") or {}).items():
            total = moved.setdefault(name, dict.fromkeys(row, 0))
            for key, value in row.items():
                total[key] += value
    if moved:
        lines += ["### Which component moved val outcomes", "",
                  "Over every GEPA run above, the candidates whose edit changed one predictor (`review`: the "
                  "instructions; `report`: the note the informed reviewer reads above the SAAG report): how many "
                  "changed any val outcome against their parent, and the val examples gained and lost.", "",
                  "| edited | candidates | moved any val outcome | gained | lost |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {row['candidates']} | {row['moved']} | {row['gained']} | {row['lost']} |"
                  for name, row in sorted(moved.items())]
        lines.append("")
    return lines


# -- rendering -------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(ci: Sequence[float] | None) -> str:
    return "-" if not ci or ci[0] is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _ratio(x: float | str | None) -> str:
    return "-" if x is None else ("inf" if x == "inf" else f"{float(x):.2f}")


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ks(values: Mapping[str, float] | None) -> list[str]:
    """pass^k keys in order (JSON made them strings)."""
    return sorted(values or {}, key=int)


VS_BASE_INTRO = ("Against the base alone (help = fixed / base wrong, harm = broken / base right; McNemar exact; "
                 "net-change CI = paired bootstrap; detectable = smallest net change that could reach p < 0.05 "
                 "at this n, all discordant pairs one way):")


def _vs_base_lines(stats: dict[str, Any], intro: str = VS_BASE_INTRO) -> list[str]:
    lines = ["", intro, "",
             "| condition | n | fixed | broken | help | harm | net change | 95% CI | McNemar p | detectable |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, hh in stats["vs_base"].items():
        lines.append(f"| {label} | {hh['n']} | {hh['fixed']} | {hh['broken']} | {_pct(hh['helpfulness'])} | "
                     f"{_pct(hh['harmfulness'])} | {_pct(hh['net_change'])} | {_ci(hh['net_change_ci95'])} | "
                     f"{_p(hh['mcnemar_p'])} | {_pct(hh['detectable']['min_net_change_for_p05'])} |")
    if any(len(hh["categories"]) > 1 for hh in stats["vs_base"].values()):
        lines += ["", "Against the base alone, per category (fixed / broken; help, harm; McNemar p):", "",
                  "| condition | category | n | base | reviewed | fixed | broken | help | harm | ratio | McNemar p |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, hh in stats["vs_base"].items():
            for cat, cell in hh["categories"].items():
                lines.append(f"| {label} | {cat} | {cell['n']} | {_pct(cell['base_accuracy'])} | "
                             f"{_pct(cell['final_accuracy'])} | {cell['fixed']} | {cell['broken']} | "
                             f"{_pct(cell['helpfulness'])} | {_pct(cell['harmfulness'])} | {_ratio(cell['ratio'])} | "
                             f"{_p(cell['mcnemar_p'])} |")
    return lines


def _pairwise_lines(stats: dict[str, Any], unit: str = "examples") -> list[str]:
    if not stats["pairwise"]:
        return []
    lines = ["", f"Between conditions (B against A on the same {unit}; fixed = A wrong and B right):", "",
             "| A | B | n | fixed | broken | net change (B - A) | 95% CI | McNemar p |",
             "|---|---|---|---|---|---|---|---|"]
    for pw in stats["pairwise"]:
        lines.append(f"| {pw['a']} | {pw['b']} | {pw['n']} | {pw['fixed']} | {pw['broken']} | "
                     f"{_pct(pw['net_change'])} | {_ci(pw['net_change_ci95'])} | {_p(pw['mcnemar_p'])} |")
    return lines


def _per_category_lines(stats: dict[str, Any], title: str = "Accuracy per category:") -> list[str]:
    cats = sorted({k for c in stats["conditions"] for k in c["categories"]})
    if len(cats) <= 1:
        return []
    lines = ["", title, "", "| condition | " + " | ".join(cats) + " |", "|---|" + "---|" * len(cats)]
    for c in stats["conditions"]:
        cells = [f"{c['categories'][k]['correct']}/{c['categories'][k]['n']}" if k in c["categories"] else "-"
                 for k in cats]
        lines.append(f"| {c['condition']} | " + " | ".join(cells) + " |")
    return lines


def _latency_shown(meta: dict[str, Any]) -> bool:
    return str(meta.get("latency_meaningful", "true")).lower() != "false"


def _single_turn_lines(stats: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """A single-call group: accuracy, against the base, latency, between conditions, funnel, repair, per category."""
    lines = []
    if stats["base_disagreements"]:
        lines.append(f"Base rows disagree between runs on {stats['base_disagreements']} examples "
                     "(the first run's base is used).\n")
    lines += ["| condition | n | accuracy | 95% CI (Wilson) | agent calls/ex | reviewer calls/ex | unusable | errors |",
              "|---|---|---|---|---|---|---|---|"]
    for c in stats["conditions"]:
        cost = c["cost"]
        lines.append(f"| {c['condition']} | {c['n']} | {_pct(c['accuracy'])} | {_ci(c['accuracy_ci95'])} | "
                     f"{cost['agent_calls_per_item']:.2f} | {cost['reviewer_calls_per_item']:.2f} | "
                     f"{c['reviewer_unusable']} | {c['errors']} |")
    lines += _vs_base_lines(stats)
    overheads = [(label, hh) for label, hh in stats["vs_base"].items() if hh["latency_overhead_x"] is not None]
    if overheads and _latency_shown(meta):
        lines += ["", "Latency (mean seconds per example of the executed condition over the base alone's; the "
                  "base call's own time is counted once, from when it was made):", "",
                  "| condition | overhead x | gated share (no LLM review) |", "|---|---|---|"]
        for label, hh in overheads:
            gated = "-" if hh["gated_share"] is None else _pct(hh["gated_share"])
            lines.append(f"| {label} | {hh['latency_overhead_x']:.2f} | {gated} |")
    lines += _pairwise_lines(stats)
    modes = sorted({m for c in stats["conditions"] for m in c["funnel_grounding"]})
    lines += ["", "Failure funnel of the executed call (gold-aware cascade, grounding "
              f"{'/'.join(modes) or '-'}: the first stage that fails):", "",
              "| condition | stage 1 (name) | stage 2 (structure) | stage 3 (grounding) | passed | n/a | correct |",
              "|---|---|---|---|---|---|---|"]
    for c in stats["conditions"]:
        f = c["funnel"]
        lines.append(f"| {c['condition']} | {f['stage1_fail']} | {f['stage2_fail']} | {f['stage3_fail']} | "
                     f"{f['passed']} | {f['not_applicable']} | {f['correct']} |")
    repairs = [(c["condition"], c["repair"]) for c in stats["conditions"] if c["repair"]]
    if repairs:
        lines += ["", "Self-repair by round (gold-free cascade inside the mechanism; `passed after r` = "
                  "the r-th repair made the cascade pass; correct = executed call right):", "",
                  "| condition | entered repair | outcome: n (correct) | repair calls per entered |", "|---|---|---|---|"]
        for label, rep in repairs:
            outcomes = ", ".join(f"{k.replace('_', ' ')}: {v['n']} ({v['correct']})" for k, v in rep["by_outcome"].items())
            calls = rep["repair_calls_per_entered"]
            lines.append(f"| {label} | {rep['entered_repair']} | {outcomes} | {'-' if calls is None else f'{calls:.2f}'} |")
    return lines + _per_category_lines(stats)


def _conversation_lines(stats: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """A conversation group's tables (the JSON's numbers, nothing recomputed here).

    Validity (tau2: success and pass^k), against its own base, abstention, inside the conversations,
    time per entry and per step, per turn, between conditions, per category.
    """
    tau2 = stats["benchmark"] == "tau2"
    entry = "task trial" if tau2 else "entry"
    lines = []
    if stats["base_disagreements"]:
        lines.append(f"Base rows disagree between runs on {stats['base_disagreements']} entries (the base row below "
                     "is the first run's; each condition is still paired with its own run's).\n")
    lines.append("Each reviewed condition is paired, entry by entry, with the base rows of its own run (the same "
                 "entries, trials and seeds). " + (
                     "Success = tau2's reward is 1 (`evaluate_simulation`); pass^k is tau2's, over each task's trials."
                     if tau2 else "Valid = BFCL's checkers all pass; leaderboard = `multi_turn_checker` alone, "
                     "BFCL's own number.") + "\n")
    conditions = stats["conditions"]
    ks = _ks(conditions[0].get("pass_hat_k")) if tau2 else []
    if tau2:
        lines += ["| condition | task trials | success | 95% CI (Wilson) | mean reward | "
                  + "".join(f"pass^{k} | " for k in ks)
                  + "agent calls/trial | reviewer calls/trial | reviewer calls/turn | unusable | errors |",
                  "|---|---|---|---|---|" + "---|" * len(ks) + "---|---|---|---|---|"]
    else:
        lines += ["| condition | entries | valid | 95% CI (Wilson) | leaderboard | agent calls/entry | "
                  "reviewer calls/entry | reviewer calls/turn | unusable | errors |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in conditions:
        cost = c["cost"]
        head = f"| {c['condition']} | {c['n']} | {_pct(c['accuracy'])} | {_ci(c['accuracy_ci95'])} | "
        middle = (_num(c["mean_reward"], 3) + " | " + "".join(f"{_pct(c['pass_hat_k'].get(k))} | " for k in ks)
                  if tau2 else f"{_pct(c['leaderboard'])} | ")
        lines.append(head + middle + f"{_num(cost['agent_calls_per_item'])} | {_num(cost['reviewer_calls_per_item'])} | "
                     f"{_num(c['reviewer_calls_per_turn'])} | {c['reviewer_unusable']} | {c['errors']} |")
    lines += _vs_base_lines(stats, VS_BASE_INTRO.replace("Against the base alone", "Against the base of its own run, "
                                                         f"per {entry}"))
    abstaining = [c for c in conditions if c["conversation"]["abstain_turns"]]
    if abstaining:
        lines += ["", "Abstention turns (the truth is to call nothing: BFCL's miss_func / miss_param turns), on their own; "
                  "against the base, fixed = the base called and the condition left the turn alone:", "",
                  "| condition | abstention turns | left without a call | rate | fixed | broken | McNemar p |",
                  "|---|---|---|---|---|---|---|"]
        for c in abstaining:
            counts, hh = c["conversation"], (stats["vs_base"].get(c["condition"]) or {}).get("abstention")
            versus = (f"{hh['fixed']} | {hh['broken']} | {_p(hh['mcnemar_p'])}" if hh else "- | - | -")
            lines.append(f"| {c['condition']} | {counts['abstain_turns']} | {counts['abstained']} | "
                         f"{_pct(counts['abstention_rate'])} | {versus} |")
    lines += ["", "Inside the conversations (withheld = the review let none of a step's proposed calls run; revised = "
              "the calls that ran are not the ones proposed; cut off = the step limit ended the entry; repeats = "
              "steps that ran a call, same name and arguments, already run earlier in their turn):", "",
              f"| condition | turns | steps | steps/{entry} | proposed calls | executed calls | steps withheld (calls) | "
              "steps revised | withheld/step | revised/step | steps reviewed | cut off | repeats |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in conditions:
        k = c["conversation"]
        lines.append(f"| {c['condition']} | {k['turns']} | {k['steps']} | {_num(c['steps_per_entry'])} | "
                     f"{k['proposed_calls']} | {k['executed_calls']} | {k['withheld_steps']} ({k['withheld_calls']}) | "
                     f"{k['revised_steps']} | {_pct(k['withheld_per_step'])} | {_pct(k['revised_per_step'])} | "
                     f"{k['reviewed_steps']} | {k['cut_off']} | {k['repeated_steps']} |")
    if _latency_shown(meta):
        lines += ["", f"Time (LM seconds per {entry} and per step; a reply replayed from a cache counts at its original "
                  "call's time, `untimed` replies at about 0 s; overhead = the condition's mean over its own base's):", "",
                  f"| condition | s/{entry} | s/step | base s/{entry} | overhead x | gated steps (no LLM review) | untimed |",
                  "|---|---|---|---|---|---|---|"]
        for c in conditions:
            hh = stats["vs_base"].get(c["condition"])
            versus = (f"{_num(hh['base_mean_seconds'], 1)} | {_num(hh['latency_overhead_x'])} | "
                      f"{'-' if hh['gated_share'] is None else _pct(hh['gated_share'])}" if hh else "- | - | -")
            lines.append(f"| {c['condition']} | {_num(c['latency_mean_seconds'], 1)} | {_num(c['seconds_per_step'], 1)} | "
                         f"{versus} | {c['untimed_replays']} |")
    if not tau2 and any(c["conversation"]["per_turn"] for c in conditions):
        lines += ["", "Per turn (valid through = no failure at this turn or before):", "",
                  "| condition | turn | reached | valid through | abstention | executed calls | steps withheld | steps revised |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in conditions:
            for t in c["conversation"]["per_turn"]:
                lines.append(f"| {c['condition']} | {t['turn']} | {t['reached']} | {t['passed']} | {t['abstain']} | "
                             f"{t['executed_calls']} | {t['withheld_steps']} | {t['revised_steps']} |")
    lines += _pairwise_lines(stats, "entries")
    return lines + _per_category_lines(stats, "Success per domain:" if tau2 else "Valid per category:")


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _models(models: Mapping[str, str]) -> str:
    return ", ".join(f"{role} {model}" for role, model in models.items()) or "-"


def _beside_papers_lines(papers: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The reviewer paper's tau2 table with ours below it (its models, metric and source said)."""
    tau2 = papers["tau2"]
    paper, ours = tau2["paper"], tau2["ours"]
    domains = paper["domains"]
    others = sorted({d for mine in ours.values() for c in mine["conditions"].values() for d in c["pass_hat_1"]}
                    - set(domains))
    lines = ["", "## Beside the papers: tau2-bench", "",
             f"The paper's rows are **{paper['paper']}**: {paper['metric']} ({paper['source']}). Its base agent is "
             f"{paper['rows'][0]['base']}; r5 = at most 5 review loops. Ours is tau2's pass^1 (each task's share of "
             "successful trials, averaged over tasks) on the tasks run here (below; which tasks the paper ran is not "
             "known to us), with our models: compare the direction of the change, not the levels.", "",
             _row(["", "models", "condition", *domains, f"mean of the {len(domains)}", *others]),
             _row(["---"] * (4 + len(domains) + len(others)))]
    for row in paper["rows"]:
        models = f"base {row['base']}" + (f", reviewer {row['reviewer']}" if row["reviewer"] else "")
        lines.append(_row([f"paper ({row['config']})", models, row["condition"],
                           *(_pct(row["pass"].get(d)) for d in domains), _pct(row["mean"]), *("-" for _ in others)]))
    for head, mine in ours.items():
        for label, cell in mine["conditions"].items():
            p1 = cell["pass_hat_1"]
            lines.append(_row([f"ours ({head})", _models(mine["models"]), label, *(_pct(p1.get(d)) for d in domains),
                               _pct(cell["paper_domains_mean"]), *(_pct(p1.get(d)) for d in others)]))
    for head, mine in ours.items():
        ran = ", ".join(f"{d} {mine['tasks'][d]} tasks x {mine['trials'][d]:g} trials"
                        for d in [*(d for d in domains if d in mine["tasks"]), *sorted(set(mine["tasks"]) - set(domains))])
        lines += ["", f"Tasks run ({head}): {ran}."]
    if _latency_shown(meta):
        lat = paper["latency_per_episode"]
        lines += ["", "Time per episode (the paper: wall seconds, configuration timed "
                  f"{lat['configuration']}; ours: LM seconds per task trial):", "",
                  "| | domain | condition | base s/episode | s/episode | overhead x | reviewer calls/turn |",
                  "|---|---|---|---|---|---|---|",
                  f"| paper | all | with the reviewer | {lat['base_seconds']:.1f} | {lat['seconds']:.1f} | "
                  f"{lat['overhead_x']:.1f} | {lat['reviewer_calls_per_turn']:.2f} |"]
        for head, mine in ours.items():
            for domain, by in mine["latency"].items():
                for label, cell in by.items():
                    lines.append(f"| ours ({head}) | {domain} | {label} | {_num(cell['base_seconds'], 1)} | "
                                 f"{_num(cell['seconds'], 1)} | {_num(cell['overhead_x'])} | "
                                 f"{_num(cell['reviewer_calls_per_turn'])} |")
    return lines


def _run_cost_lines(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Wall seconds per entry of conversation runs and the spend of runs whose ledger was collected."""
    shown = [r for r in runs if "entries" in r or "dollars" in r]
    if not shown:
        return []
    lines = ["", "Wall time per entry (run.json's attempts, start to end, over the entries finished, base and reviewed "
             "runs of each; the pause between a resumed run's attempts is left out when its run.json says when the "
             "attempt before ended) and spend (costs.json, dollars, every role):", "",
             "| run | entries | wall s/entry | $ |", "|---|---|---|---|"]
    for r in shown:
        dollars = (r.get("dollars") or {}).get("total")
        lines.append(f"| {r['run']} | {r.get('entries', '-')} | {_num(r.get('wall_seconds_per_entry'), 1)} | "
                     f"{_num(dollars, 4)} |")
    return lines


def render(data: dict[str, Any]) -> str:
    """The Markdown page of an experiment (the same numbers as the JSON)."""
    meta = data["meta"]
    lines = [f"# {meta.get('title', data['experiment'])}", ""]
    if meta.get("summary"):
        lines += [meta["summary"], ""]
    lines += ["Recompute: `python experiments/recompute.py " + data["experiment"] + "` (from the records in "
              f"`experiments/results/{data['experiment']}/`; `--check` compares with the committed JSON).", ""]
    for key in ("command", "machine", "load", "wall", "scaled_down", "notes"):
        if meta.get(key):
            lines.append(f"- **{key.replace('_', ' ')}**: {meta[key]}")
    lines += ["", "## Runs", "", "| run | status | commit | wall (s) | created |", "|---|---|---|---|---|"]
    for run in data["runs"]:
        wall = "-" if run["wall_seconds"] is None else f"{run['wall_seconds']:.0f}"
        lines.append(f"| {run['run']} | {run['status']} | {(run['git_revision'] or '-')[:10]} | {wall} | {run['created']} |")
    lines += _run_cost_lines(data["runs"])
    if data.get("beside_papers"):
        lines += _beside_papers_lines(data["beside_papers"], meta)
    if data.get("confirmatory"):
        lines += _confirmatory_lines(data["confirmatory"])
    for group, stats in data["groups"].items():
        lines += ["", f"## {group}", ""]
        lines += _conversation_lines(stats, meta) if stats.get("kind") == "conversation" else _single_turn_lines(stats, meta)
    if data.get("gepa"):
        lines += _gepa_lines(data["gepa"])
    return "\n".join(lines) + "\n"


# -- collecting runs -----------------------------------------------------------------------------------


def strip_paths(value: Any) -> Any:
    """The same JSON value with every absolute path replaced by ``<path>/<basename>``."""
    if isinstance(value, dict):
        return {k: strip_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_paths(v) for v in value]
    if isinstance(value, str) and "/" in value:
        return ABS_PATH.sub(lambda m: f"<path>/{m.group(1)}" if m.group(0).count("/") > 1 else m.group(0), value)
    return value


def _gzip_bytes(text: str) -> bytes:
    """Deterministic gzip (no timestamp, no file name), so re-collecting the same run changes nothing."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as handle:
        handle.write(text.encode("utf-8"))
    return buffer.getvalue()


def collect(name: str, source: Path, meta: dict[str, str], *, partial: bool = False) -> None:
    """Copy the newest finished run of every folder under ``source`` into ``experiments/results/<name>/``.

    ``partial`` also takes runs that were stopped before the end (their status stays in the Runs
    table; only the examples they finished are in the records). A run inside another run (optimize's
    test comparison) is part of it: its records are the outer run's, so it is not taken. A tune run
    has no records of its own: its trials and test re-evaluations are taken instead (``tune_runs``).
    """
    found: dict[Path, Path] = {}
    headers = sorted(source.rglob("run.json"))
    runs = {header.parent for header in headers}
    for header in headers:
        run = header.parent
        if any(outer in runs for outer in run.parents):
            continue
        if read_header(run).verb == "tune":
            found.update({run.parent.relative_to(source) / rel: sub for rel, sub in tune_runs(run, partial).items()})
            continue
        if _collectable(run, partial) and run.parent != source:
            found[run.parent.relative_to(source)] = run  # sorted: the newest timestamp wins
    if not found:
        raise SystemExit(f"no finished runs under {source}")
    for rel, run in sorted(found.items()):
        dest = RESULTS / name / rel
        dest.mkdir(parents=True, exist_ok=True)
        if (run / "records.jsonl").is_file():  # an optimize run without a test phase has none: its summary is it
            rows = [strip_paths(json.loads(line))
                    for line in (run / "records.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
            text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
            (dest / "records.jsonl.gz").write_bytes(_gzip_bytes(text))
        for part in ("run.json", "summary.json", "costs.json", QUARANTINE_FILE):
            if (run / part).is_file():
                payload = strip_paths(json.loads((run / part).read_text(encoding="utf-8")))
                (dest / part).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        flips = state_flips(run)
        if flips is not None:
            (dest / FLIPS_FILE).write_text(json.dumps(flips, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        kept = bundle_base_predictions(run, dest)
        print(f"collected {run.name} -> results/{dest.relative_to(RESULTS)}"
              + (f" (+{kept} base proposals)" if kept else ""))
    update_meta(name, meta)


def _collectable(run: Path, partial: bool) -> bool:
    """Finished (or, with ``partial``, stopped) with at least one record: a run stopped before its first has no numbers.

    A finished optimize run counts without records (``--no-test``): its candidates' val help/harm are its numbers.
    """
    records = run / "records.jsonl"
    header = read_header(run)
    if header.verb == "optimize" and header.status == "success" and (run / "summary.json").is_file():
        return True
    if not (header.status == "success" or partial) or not records.is_file():
        return False
    with records.open(encoding="utf-8") as rows:
        return any(line.strip() for line in rows)


TUNE_FIXED_KEYS = frozenset({"runs_dir", "cache_dir", "split", "limit", "skip", "workers", "max_cost", "seed"})
"""Config fields of a tune's test runs that say where and how much, not which set-up."""


def tune_runs(tune: Path, partial: bool) -> dict[Path, Path]:
    """A tune run's trials and test re-evaluations, each at ``<split>/<base>+<reviewer>/<dataset>/<set-up>``.

    Its configurations differ in base model too, and a group pairs every condition with one base, so
    they are grouped by split (the trials' val, the front's test), model pair and dataset, like the
    experiment scripts' own runs; the variant names what else the configurations differ in
    (``mechanism=r2``, ...). A resumed tune re-evaluates the front again: the newest run of each
    configuration wins.
    """
    runs = [run for phase in ("trials", "test") for run in sorted(tune.glob(f"{phase}/*/"))
            if (run / "run.json").is_file() and _collectable(run, partial)]
    configs = {run: read_header(run).config for run in runs}
    keys = sorted({k for config in configs.values() for k in config} - TUNE_FIXED_KEYS - {"base", "reviewer", "dataset"})
    varying = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs.values()}) > 1]
    def folder(value: Any) -> str:  # exp*_*.sh's tag(): a spec as one path component
        return re.sub(r"[:/@]", "_", str(value))

    out: dict[Path, Path] = {}
    for run, config in configs.items():
        pair = "+".join(folder(config.get(role)) for role in ("base", "reviewer"))
        variant = ",".join(f"{k}={config.get(k)}" for k in varying) or str(config.get("mechanism"))
        out[Path(str(config.get("split"))) / pair / folder(config.get("dataset")) / variant.replace("/", "_")] = run
    return out


# -- carrying the base agent's first answers to the next machine -----------------------------------


BASE_BUNDLE = "base-predictions.jsonl.gz"
"""Beside a collected run's records: the base-prediction cache entries written while it ran."""


def _read_bundle(path: Path) -> dict[str, Any]:
    """A bundle's entries by key; a damaged bundle ends the command with its file:line, not a traceback."""
    if not path.is_file():
        return {}
    found: dict[str, Any] = {}
    line = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for text in handle:
                line += 1  # read in the handlers below
                if text.strip():
                    row = json.loads(text)
                    found[row["key"]] = row["entry"]
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # not gzip, or cut short
        raise SystemExit(f"{_shown(path)}:{line + 1}: unreadable ({str(exc) or type(exc).__name__}); "
                         "restore the file from git") from None
    except (ValueError, KeyError, TypeError) as exc:
        reason = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise SystemExit(f"{_shown(path)}:{line}: not a base-prediction row ({reason}); "
                         "restore the file from git") from None
    return found


def attempt_spans(header: RunHeader) -> list[tuple[float, float]]:
    """(start, end) in epoch seconds of each attempt of a run (the first and every resume).

    An attempt ends where the next resume says the one before it ended (``previous_end``); a resume
    recorded without it (older runs, or an attempt killed before it could write its end) bounds the
    attempt before by the resume itself, so the time between the attempts is counted in.
    """
    def epoch(stamp: str) -> float:
        return datetime.fromisoformat(stamp).timestamp()

    resumes = [r for r in (header.model_extra or {}).get("resumes") or [] if isinstance(r, dict) and r.get("at")]
    starts = [epoch(header.created), *(epoch(r["at"]) for r in resumes)]
    ends = [epoch(r.get("previous_end") or r["at"]) for r in resumes]
    ends.append(epoch(header.finished) if header.finished else math.inf)
    return list(zip(starts, ends))


def bundle_base_predictions(run: Path, dest: Path, shelf: Path | None = None) -> int:
    """Keep, beside ``dest``'s records, the base-prediction entries ``run`` wrote; the number kept.

    Why: a later condition on the same entries (gate+r2 after r2, a tune trial, a resumed run on a new
    machine) replays the base agent's first answers instead of recomputing them, as it would on the
    machine that made them; the cache is keyed by model, prompt and what the agent saw, never gold.
    An entry is taken when its file was written while one of the run's attempts ran (a bundle
    collected before keeps its entries, so a run collected again after a resume on another machine
    keeps the earlier attempts' too); one that carries a machine path is left out (it would be
    recomputed), because a committed file may hold none and an edited entry would replay an answer
    the model never gave.
    """
    spans = attempt_spans(read_header(run))
    found = _read_bundle(dest / BASE_BUNDLE)
    for path in sorted((shelf or base_predictions_dir()).glob("*/*.json")):
        written = path.stat().st_mtime
        if path.stem not in found and any(start - 1.0 <= written <= end + 1.0 for start, end in spans):
            text = path.read_text(encoding="utf-8")
            if not any(root in text for root in PRIVATE_ROOTS):
                try:
                    found[path.stem] = json.loads(text)
                except ValueError:
                    continue  # a half-written entry is a miss for the cache too
    if found:
        rows = "".join(json.dumps({"key": key, "entry": found[key]}, sort_keys=True) + "\n" for key in sorted(found))
        (dest / BASE_BUNDLE).write_bytes(_gzip_bytes(rows))
    return len(found)


def restore_base_predictions(name: str, shelf: Path | None = None) -> tuple[int, int]:
    """Write every base proposal bundled under ``experiments/results/<name>/`` into the cache.

    Returns ``(written, already there)``; an entry the cache holds is never overwritten.
    """
    if not (RESULTS / name).is_dir():
        raise SystemExit(f"no experiment {name!r} under {_shown(RESULTS)}")
    target = JsonShelf(shelf or base_predictions_dir())
    written = present = 0
    for bundle in sorted((RESULTS / name).rglob(BASE_BUNDLE)):
        for key, entry in _read_bundle(bundle).items():
            if target.path(key).is_file():
                present += 1
            else:
                target.save(key, entry)
                written += 1
    return written, present


def update_meta(name: str, meta: dict[str, str]) -> None:
    """Merge provenance into ``experiments/results/<name>/meta.json`` (the machine is recorded once)."""
    meta_path = RESULTS / name / "meta.json"
    current = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    current.setdefault("machine", f"{platform.machine()}, {platform.system()}, python {platform.python_version()}")
    current.update(meta)
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: recompute (default), ``--check`` or ``--collect``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="experiment name (a folder under experiments/results/)")
    parser.add_argument("--collect", type=Path, help="import the finished runs under this folder first")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="provenance to store in meta.json (title, summary, command, load, wall, scaled_down, "
                             "notes; latency_meaningful=false hides the latency table of a shared-CPU run; pooled=false "
                             "keeps a model's groups apart when they hold different samples)")
    parser.add_argument("--partial", action="store_true", help="--collect also takes runs stopped before the end")
    parser.add_argument("--check", action="store_true", help="compare with the committed JSON; write nothing")
    parser.add_argument("--restore-base-cache", action="store_true",
                        help="only write the experiment's bundled base proposals into the base-prediction cache "
                             "(before resuming or adding a condition on a new machine)")
    args = parser.parse_args(argv)
    if args.restore_base_cache:
        written, present = restore_base_predictions(args.name)
        print(f"{written} base proposals written to {base_predictions_dir()} ({present} already there)")
        return 0
    meta = dict(item.split("=", 1) for item in args.meta)
    if args.collect is not None:
        collect(args.name, args.collect, meta, partial=args.partial)
    elif meta and not args.check:
        update_meta(args.name, meta)
    data = json.loads(json.dumps(recompute(args.name)))
    json_path, md_path = RESULTS / f"{args.name}.json", RESULTS / f"{args.name}.md"
    if args.check:
        committed = json.loads(json_path.read_text(encoding="utf-8"))
        if committed != data:
            print(f"{_shown(json_path)} differs from the numbers recomputed from the records", file=sys.stderr)
            return 1
        print(f"{_shown(json_path)}: matches the records")
        return 0
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    md_path.write_text(render(data), encoding="utf-8")
    print(f"wrote {_shown(json_path)} and {_shown(md_path)}")
    return 0


def _shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it (a results folder elsewhere: as it is)."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


if __name__ == "__main__":
    raise SystemExit(main())
