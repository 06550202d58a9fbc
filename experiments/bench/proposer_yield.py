"""Usable proposals per reflection: the edit proposer against the rewrite proposer, on the same inputs.

Replays the reflections optimize runs recorded (``<run>/reflections.jsonl``: each proposal's parent
text and reflective dataset, as GEPA built them from its minibatches) through the reflection model
three times: dspy's rewrite proposer (``--proposer rewrite``, as optimize configures it: its
additional instructions and ``max_chars``), the edit proposer as optimize runs it by default
(``--proposer add``: one new rule) and with every op (``--proposer edit``: add, replace or delete),
each at most two schema-constrained requests; reflections with the same inputs count once, and the
rewrite proposer is not asked for the report note (a rewrite run evolves the instructions only), so
each proposer's fraction is over the reflections it would be asked. A proposal is *usable* when the proposer returned a text
and GEPA's rails would let it into the pool (``rails.quarantine_reason`` against its parent; the copy
checks run without the minibatch's examples, which the record does not hold). Every request is real
when ``SAAG_OPT_CACHE`` is unset (the bench then uses an empty LM cache of its own); one llama server at a time.

Prints one line per reflection and proposer (with the edit's rule-level change), a line with every
proposer's usable fraction and seconds, then last ``usable_edit=<fraction> usable_rewrite=<fraction>
ratio=<edit/rewrite>``, where the edit proposer is the default one (``add``); goal: usable_edit >= 0.5
and ratio >= 3 (``inf`` when no rewrite was usable).

Run:
  saag-opt optimize --base local --reviewer local ... (any run; its reflections.jsonl is the input)
  python experiments/bench/proposer_yield.py RUN_DIR [RUN_DIR ...] [--model local:qwen2.5-coder-1.5b] [--limit 12]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SAAG_OPT_CACHE", tempfile.mkdtemp(prefix="saag-opt-bench-yield-"))  # empty: real calls

import dspy  # noqa: E402

from saag_opt.agents.report_note import is_note  # noqa: E402
from saag_opt.lm import CostLedger, open_lm, parse_model_spec  # noqa: E402
from saag_opt.lm.disk_cache import configure_lm_cache  # noqa: E402
from saag_opt.optimize import rails  # noqa: E402
from saag_opt.optimize.candidates import candidate_edit  # noqa: E402
from saag_opt.optimize.edit_proposer import EditMemory  # noqa: E402
from saag_opt.optimize.reflections import REFLECTIONS_FILE, read_reflections  # noqa: E402
from saag_opt.optimize.wiring import GepaSettings, build_proposer  # noqa: E402

PROPOSERS = ("rewrite", "add", "edit")
"""dspy's whole rewrite, and the edit proposer as ``--proposer add`` (optimize's default) and ``--proposer edit``."""


def _asked(name: str, row: dict[str, Any]) -> list[str]:
    """The components of ``row`` that proposer ``name`` would be asked for: a rewrite run evolves no report note."""
    return [c for c in row["components"] if name != "rewrite" or not is_note(c)]


def _propose(proposer: Any, lm: Any, row: dict[str, Any], components: list[str]) -> tuple[dict[str, str], str | None]:
    """The proposer's texts for one recorded reflection, and why they are not usable (None = usable)."""
    parent = row["parent"]
    try:
        with dspy.context(lm=lm):
            texts = proposer(candidate=dict(parent), reflective_dataset=row["dataset"],
                             components_to_update=components)
    except Exception as exc:  # noqa: BLE001 - a failed proposal is counted as unusable, with its reason
        return {}, f"{type(exc).__name__}: {str(exc)[:120]}"
    return texts, "no text" if not texts else rails.quarantine_reason({**parent, **texts}, parent)


def distinct(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reflections with the same inputs once (a resumed run records the reflection it was stopped in again)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        key = json.dumps({k: row[k] for k in ("parent", "components", "dataset")}, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="optimize run directories with reflections.jsonl")
    parser.add_argument("--model", default="local:qwen2.5-coder-1.5b", help="the reflection model")
    parser.add_argument("--limit", type=int, default=12, help="replay at most this many reflections in all")
    parser.add_argument("--only", choices=PROPOSERS, help="run one proposer (no ratio): for quick iteration")
    args = parser.parse_args(argv)
    missing = [str(run / REFLECTIONS_FILE) for run in args.runs if not (run / REFLECTIONS_FILE).is_file()]
    if missing:
        sys.exit(f"no recorded reflections: {', '.join(missing)} (give optimize run directories)")
    rows = distinct([row for run in args.runs for row in read_reflections(run / REFLECTIONS_FILE)])[: args.limit]
    if not rows:
        sys.exit("no recorded reflection in the runs given (run optimize with a budget that reflects)")
    configure_lm_cache()
    lm = open_lm(parse_model_spec(args.model), role="reflection", ledger=CostLedger(), temperature=1.0,
                 max_tokens=16000)
    proposers = {name: build_proposer(GepaSettings(max_metric_calls=1, log_dir=Path(tempfile.mkdtemp()),
                                                   reflection_lm=lm, proposer=name), EditMemory())
                 for name in PROPOSERS if args.only in (None, name)}
    usable = dict.fromkeys(proposers, 0)
    asked = dict.fromkeys(proposers, 0)
    seconds = dict.fromkeys(proposers, 0.0)
    for n, row in enumerate(rows, start=1):
        for name, proposer in proposers.items():
            components = _asked(name, row)
            if not components:
                print(f"[{n}/{len(rows)}] {name:7s} not asked (a rewrite run evolves no report note)", flush=True)
                continue
            asked[name] += 1
            started = time.monotonic()
            texts, why = _propose(proposer, lm, row, components)
            seconds[name] += time.monotonic() - started
            usable[name] += why is None
            lengths = ", ".join(f"{len(t)} chars" for t in texts.values()) or "-"
            print(f"[{n}/{len(rows)}] {name:7s} {'usable' if why is None else 'refused'} ({lengths}; "
                  f"{time.monotonic() - started:.1f} s){'' if why is None else ': ' + str(why)[:160]}", flush=True)
            if texts and name != "rewrite":
                print("    " + "; ".join(candidate_edit(dict(row["parent"]), {**row["parent"], **texts})[:2])[:300],
                      flush=True)
    fraction = {k: v / asked[k] if asked[k] else float("nan") for k, v in usable.items()}
    print(f"model={args.model} reflections={len(rows)} " + " ".join(
        f"asked_{k}={asked[k]} usable_{k}={v:.2f} seconds_{k}={seconds[k]:.1f}" for k, v in fraction.items()))
    if args.only:
        return 0
    ratio = fraction["add"] / fraction["rewrite"] if fraction["rewrite"] else float("inf" if fraction["add"] else "nan")
    print(f"usable_edit={fraction['add']:.2f} usable_rewrite={fraction['rewrite']:.2f} ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
