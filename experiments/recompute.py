"""Recompute an experiment's tables from its committed run records (and collect new runs into them).

Every number in ``experiments/results/<name>.md`` and ``<name>.json`` comes from the compressed run
records beside them, ``experiments/results/<name>/<group>/<variant>/records.jsonl.gz``, read back as
the package reads any run (``runfiles.read_run``), through its own statistics (``summarise_pairs``,
``HelpHarm``), so anyone can check them:

    python experiments/recompute.py exp1             # rewrite exp1.md / exp1.json from the records
    python experiments/recompute.py exp1 --check     # exit 1 if the committed exp1.json differs
    python experiments/recompute.py exp1 --collect runs/exp1 --meta 'load=...'   # import finished runs

A run directory's path relative to the collected folder is ``<group>/<variant>`` (the experiment
scripts pass ``--runs-dir OUT/<model>/<setting>/<variant>``); the newest finished run in each folder is
taken. Groups that share their first path component (one model) are also pooled. Collected files
carry no absolute paths (they are replaced by ``<path>/<basename>``) and no model weights.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import platform
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import saag_opt.optimize.summary  # noqa: E402, F401 - registers optimize runs with read_run (exp3 has one)
from saag_opt.evaluation.helpharm import HelpHarm, mcnemar_exact  # noqa: E402
from saag_opt.evaluation.paired import summarise_pairs  # noqa: E402
from saag_opt.evaluation.results import ExampleRecord  # noqa: E402 - also registers evaluate runs
from saag_opt.runfiles import Run, read_header, read_run  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
ALPHA = 0.05
Z95 = 1.959963984540054
ABS_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)*([\w.+-]+)")
"""An absolute POSIX path inside a string (the last component is kept)."""
PRIVATE_ROOTS = ("/root/", "/home/", "/tmp/", "/work/", "/Users/", "/var/")
"""Path prefixes that must never appear in a committed file."""


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


def condition_stats(label: str, rows: Sequence[ExampleRecord]) -> dict[str, Any]:
    """One condition: accuracy with its Wilson CI, cost in calls, latency, funnel, per category."""
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
                 "reviewer_calls_per_item": sum(r.reviewer_calls for r in rows) / n if n else None,
                 "dollars": 0.0},
        "latency_mean_seconds": sum(ok) / len(ok) if ok else None,
        "categories": {c: {"n": v[0], "correct": v[1], "accuracy": v[1] / v[0]} for c, v in sorted(categories.items())},
        "funnel": funnel(rows),
        "funnel_grounding": funnel_modes(rows),
        "repair": repair_rounds(rows),
    }


def paired(a_label: str, b_label: str, a: dict[str, ExampleRecord], b: dict[str, ExampleRecord]) -> dict[str, Any]:
    """B against A on their shared error-free examples: help (A wrong, B right), harm, McNemar, CI."""
    ids = sorted(i for i in set(a) & set(b) if a[i].error is None and b[i].error is None)
    table = HelpHarm.from_pairs([(a[i].correct, b[i].correct) for i in ids])
    return {"a": a_label, "b": b_label, **table.to_dict(),
            "detectable": detectable(len(ids), table.base_accuracy, table.fixed + table.broken)}


def category_help_harm(pairs: Sequence[tuple[ExampleRecord | None, ExampleRecord]]) -> dict[str, Any]:
    """Help and harm against the base within each category (the paper's per-category table)."""
    by: dict[str, list[tuple[bool, bool]]] = {}
    for base, row in pairs:
        if base is not None and base.error is None and row.error is None:
            by.setdefault(row.category, []).append((base.correct, row.correct))
    return {c: HelpHarm.from_pairs(cells).to_dict() for c, cells in sorted(by.items())}


def group_stats(runs: dict[str, list[ExampleRecord]]) -> dict[str, Any]:
    """All conditions of one group: base once, each variant vs base, each pair of variants."""
    variants: dict[str, dict[str, ExampleRecord]] = {}
    bases: dict[str, ExampleRecord] = {}
    base_disagreements = 0
    for variant, records in sorted(runs.items()):
        conditions = sorted({r.condition for r in records} - {"base"})
        for condition in conditions:
            label = variant if len(conditions) == 1 else f"{variant}:{condition}"
            variants[label] = {r.example_id: r for r in records if r.condition == condition}
        for r in records:
            if r.condition != "base":
                continue
            if r.example_id in bases and bases[r.example_id].correct != r.correct:
                base_disagreements += 1
            bases.setdefault(r.example_id, r)
    out: dict[str, Any] = {"base_disagreements": base_disagreements,
                           "conditions": [condition_stats("base", list(bases.values()))]}
    out["conditions"] += [condition_stats(label, list(rows.values())) for label, rows in variants.items()]
    out["vs_base"] = {}
    for label, rows in variants.items():
        pairs = [(bases.get(i), rows[i]) for i in sorted(rows)]
        summary = summarise_pairs(label, pairs, gated=label.startswith("gate"))
        hh = summary.help_harm
        out["vs_base"][label] = {
            **hh.to_dict(), "latency_overhead_x": summary.latency.overhead_x, "gated_share": summary.gated_share,
            "detectable": detectable(hh.n, hh.base_accuracy, hh.fixed + hh.broken),
            "categories": category_help_harm(pairs)}
    labels = sorted(variants)
    out["pairwise"] = [paired(x, y, variants[x], variants[y]) for i, x in enumerate(labels) for y in labels[i + 1:]]
    return out


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
    """Per run: command arguments, commit, wall seconds (from run.json)."""
    out = []
    for rel, run in runs.items():
        header = run.header
        wall = ((datetime.fromisoformat(header.finished) - datetime.fromisoformat(header.created)).total_seconds()
                if header.created and header.finished else None)
        out.append({"run": str(rel), "verb": header.verb, "status": header.status,
                    "git_revision": header.git_revision, "args": header.args_passed, "created": header.created,
                    "wall_seconds": wall})
    return out


def recompute(name: str) -> dict[str, Any]:
    """The experiment's JSON: per group (and pooled per model), every condition and comparison."""
    collected = read_runs(name)
    groups = load_results(collected)
    pools: dict[str, dict[str, list[ExampleRecord]]] = {}
    for group, runs in groups.items():
        head = group.split("/", 1)[0]
        if head != group:
            for variant, records in runs.items():
                pools.setdefault(f"{head}/pooled", {}).setdefault(variant, []).extend(records)
    pools = {k: v for k, v in pools.items() if sum(1 for g in groups if g.startswith(k.split("/")[0] + "/")) > 1}
    meta_path = RESULTS / name / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    return {"experiment": name, "meta": meta, "runs": run_provenance(collected),
            "groups": {g: group_stats(r) for g, r in {**groups, **pools}.items()}}


# -- rendering -------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(ci: Sequence[float] | None) -> str:
    return "-" if not ci or ci[0] is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _ratio(x: float | str | None) -> str:
    return "-" if x is None else ("inf" if x == "inf" else f"{float(x):.2f}")


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


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
    for group, stats in data["groups"].items():
        lines += ["", f"## {group}", ""]
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
        lines += ["", "Against the base alone (help = fixed / base wrong, harm = broken / base right; McNemar exact; "
                  "net-change CI = paired bootstrap; detectable = smallest net change that could reach p < 0.05 "
                  "at this n, all discordant pairs one way):", "",
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
        overheads = [(label, hh) for label, hh in stats["vs_base"].items() if hh["latency_overhead_x"] is not None]
        if overheads and str(meta.get("latency_meaningful", "true")).lower() != "false":
            lines += ["", "Latency (mean seconds per example of the executed condition over the base alone's; the "
                      "base call's own time is counted once, from when it was made):", "",
                      "| condition | overhead x | gated share (no LLM review) |", "|---|---|---|"]
            for label, hh in overheads:
                gated = "-" if hh["gated_share"] is None else _pct(hh["gated_share"])
                lines.append(f"| {label} | {hh['latency_overhead_x']:.2f} | {gated} |")
        if stats["pairwise"]:
            lines += ["", "Between conditions (B against A on the same examples; fixed = A wrong and B right):", "",
                      "| A | B | n | fixed | broken | net change (B - A) | 95% CI | McNemar p |",
                      "|---|---|---|---|---|---|---|---|"]
            for pw in stats["pairwise"]:
                lines.append(f"| {pw['a']} | {pw['b']} | {pw['n']} | {pw['fixed']} | {pw['broken']} | "
                             f"{_pct(pw['net_change'])} | {_ci(pw['net_change_ci95'])} | {_p(pw['mcnemar_p'])} |")
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
        cats = sorted({k for c in stats["conditions"] for k in c["categories"]})
        if len(cats) > 1:
            lines += ["", "Accuracy per category:", "", "| condition | " + " | ".join(cats) + " |",
                      "|---|" + "---|" * len(cats)]
            for c in stats["conditions"]:
                cells = [f"{c['categories'][k]['correct']}/{c['categories'][k]['n']}" if k in c["categories"] else "-"
                         for k in cats]
                lines.append(f"| {c['condition']} | " + " | ".join(cells) + " |")
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
    table; only the examples they finished are in the records).
    """
    found: dict[Path, Path] = {}
    for header in sorted(source.rglob("run.json")):
        run = header.parent
        status = read_header(run).status
        if (status == "success" or partial) and (run / "records.jsonl").is_file() and run.parent != source:
            found[run.parent.relative_to(source)] = run  # sorted: the newest timestamp wins
    if not found:
        raise SystemExit(f"no finished runs under {source}")
    for rel, run in sorted(found.items()):
        dest = RESULTS / name / rel
        dest.mkdir(parents=True, exist_ok=True)
        rows = [strip_paths(json.loads(line)) for line in (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        (dest / "records.jsonl.gz").write_bytes(_gzip_bytes(text))
        for part in ("run.json", "summary.json"):
            if (run / part).is_file():
                payload = strip_paths(json.loads((run / part).read_text(encoding="utf-8")))
                (dest / part).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"collected {run.name} -> results/{dest.relative_to(RESULTS)}")
    update_meta(name, meta)


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
                             "notes; latency_meaningful=false hides the latency table of a shared-CPU run)")
    parser.add_argument("--partial", action="store_true", help="--collect also takes runs stopped before the end")
    parser.add_argument("--check", action="store_true", help="compare with the committed JSON; write nothing")
    args = parser.parse_args(argv)
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
            print(f"{json_path.relative_to(ROOT)} differs from the numbers recomputed from the records", file=sys.stderr)
            return 1
        print(f"{json_path.relative_to(ROOT)}: matches the records")
        return 0
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    md_path.write_text(render(data), encoding="utf-8")
    print(f"wrote {json_path.relative_to(ROOT)} and {md_path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
