"""Usable proposals per reflection: the edit proposer against the rewrite proposer, on the same inputs.

Replays the reflections an optimize run recorded (``<run>/reflections.jsonl``: each proposal's
parent text and reflective dataset, as GEPA built them from its minibatches) through the reflection
model twice: once with dspy's rewrite proposer (``--proposer rewrite``, the configuration optimize
uses: its additional instructions and ``max_chars``) and once with the edit proposer (``--proposer
edit``: one schema-constrained edit, at most two requests). A proposal is *usable* when the proposer
returned a text and GEPA's rails would let it into the pool (``rails.quarantine_reason`` against its
parent; the copy checks run without the minibatch's examples, which the record does not hold).
Both proposers run on an empty LM cache, one llama server at a time.

Prints one line per reflection, then ``usable_edit=<fraction> usable_rewrite=<fraction>
ratio=<edit/rewrite>`` last (goal: usable_edit >= 0.5 and ratio >= 3; the ratio is ``inf`` when no
rewrite was usable).

Run:
  saag-opt optimize --base local --reviewer local ... (any run; its reflections.jsonl is the input)
  python experiments/bench/proposer_yield.py RUN_DIR [--model local:qwen2.5-coder-1.5b] [--limit 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SAAG_OPT_CACHE", tempfile.mkdtemp(prefix="saag-opt-bench-yield-"))  # empty: real calls

import dspy  # noqa: E402

from saag_opt.lm import CostLedger, open_lm, parse_model_spec  # noqa: E402
from saag_opt.lm.disk_cache import configure_lm_cache  # noqa: E402
from saag_opt.optimize import rails  # noqa: E402
from saag_opt.optimize.candidates import candidate_edit  # noqa: E402
from saag_opt.optimize.edit_proposer import EditMemory, EditProposer  # noqa: E402
from saag_opt.optimize.reflections import REFLECTIONS_FILE, read_reflections  # noqa: E402
from saag_opt.optimize.wiring import GepaSettings, build_proposer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="an optimize run directory with reflections.jsonl")
    parser.add_argument("--model", default="local:qwen2.5-coder-1.5b", help="the reflection model")
    parser.add_argument("--limit", type=int, default=8, help="replay at most this many reflections")
    parser.add_argument("--only", choices=("edit", "rewrite"), help="run one proposer (no ratio): for quick iteration")
    parser.add_argument("--add-only", action="store_true", help="the edit proposer as --proposer add")
    args = parser.parse_args()
    rows = list(read_reflections(args.run / REFLECTIONS_FILE))[: args.limit]
    if not rows:
        sys.exit(f"{args.run / REFLECTIONS_FILE}: no recorded reflection (run optimize with a budget that reflects)")
    configure_lm_cache()
    ledger = CostLedger()
    lm = open_lm(parse_model_spec(args.model), role="reflection", ledger=ledger, temperature=1.0, max_tokens=16000)
    rewrite = build_proposer(GepaSettings(max_metric_calls=1, log_dir=Path(tempfile.mkdtemp()), reflection_lm=lm,
                                          proposer="rewrite"), EditMemory())
    edit = EditProposer(lm, add_only=args.add_only)
    usable = {"edit": 0, "rewrite": 0}
    seconds = {"edit": 0.0, "rewrite": 0.0}
    for n, row in enumerate(rows, start=1):
        parent, dataset, components = row["parent"], row["dataset"], row["components"]
        for name, proposer in (("rewrite", rewrite), ("edit", edit)):
            if args.only not in (None, name):
                continue
            started = time.monotonic()
            try:
                with dspy.context(lm=lm):
                    texts = proposer(candidate=dict(parent), reflective_dataset=dataset,
                                     components_to_update=list(components))
            except Exception as exc:  # noqa: BLE001 - a failed proposal is counted as unusable, with its reason
                texts, why = {}, f"{type(exc).__name__}: {str(exc)[:120]}"
            else:
                why = "no text" if not texts else rails.quarantine_reason({**parent, **texts}, parent)
            seconds[name] += time.monotonic() - started
            ok = bool(texts) and why is None
            usable[name] += ok
            lengths = ", ".join(f"{len(t)} chars" for t in texts.values()) or "-"
            change = "; ".join(candidate_edit(dict(parent), {**parent, **texts})[:2])
            print(f"[{n}/{len(rows)}] {name:7s} {'usable' if ok else 'refused'} ({lengths}; "
                  f"{time.monotonic() - started:.1f} s){'' if ok else ': ' + str(why)[:160]}", flush=True)
            if texts and name == "edit":
                print(f"    {change[:300]}", flush=True)
    total = len(rows)
    fraction = {k: v / total for k, v in usable.items()}
    ratio = fraction["edit"] / fraction["rewrite"] if fraction["rewrite"] else float("inf")
    if args.only:
        print(f"usable_{args.only}={fraction[args.only]:.2f} (--only {args.only}: no ratio)")
        return
    print(f"model={args.model} reflections={total} seconds_edit={seconds['edit']:.1f} "
          f"seconds_rewrite={seconds['rewrite']:.1f} edit_requests={edit.tried}")
    print(f"usable_edit={fraction['edit']:.2f} usable_rewrite={fraction['rewrite']:.2f} ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
