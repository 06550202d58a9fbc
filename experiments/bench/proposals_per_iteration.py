"""Do several proposals per GEPA iteration pay for themselves? ``--proposals 1`` against ``--proposals N``.

Runs ``saag-opt optimize`` twice on the same data, seed and rollout budget (``--max-metric-calls``),
differing only in ``--proposals`` (gepa's ``SameParentSampling``: N proposals from the same parent,
each on its own minibatch), with ``--no-test``: the question is what the budget buys on train/val.
Per arm it reads the run's files (summary.json, reflections.jsonl, quarantine.json): reflections
written, proposals that entered the pool, proposals the rails quarantined, the best val accuracy and
how many val examples the top candidate gained over the seed, rollouts spent and wall seconds.

Both arms share one LM cache (``SAAG_OPT_CACHE``, default a fresh folder of the bench's own): the
base agent's answers are identical in both, so the second arm replays the ones the first asked;
reviewer and reflection calls differ between arms and are real. ``--order`` says which arm runs
first (the other's wall time then excludes most base calls: compare seconds with that in mind).

Run (one llama server at a time; nothing else running):
  python experiments/bench/proposals_per_iteration.py [--model local] [--dataset bfcl:single_turn]
      [--proposals 3] [--train-limit 20] [--val-limit 10] [--max-metric-calls 60] [--saag-informed]

Last line: ``proposals=<N> pool_1=<k> pool_N=<k> pool_ratio=<N/1> top_val_1=<f> top_val_N=<f>
seconds_ratio=<N/1>``; pool = candidates that entered GEPA's pool besides the seed, top = the highest val
accuracy in the pool (``best`` leaves the seed only past the rails' margin; each arm's line names it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from saag_opt.optimize.callbacks import QUARANTINE_FILE  # noqa: E402
from saag_opt.optimize.reflections import REFLECTIONS_FILE, read_reflections  # noqa: E402


def run_arm(proposals: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One optimize run with ``--proposals proposals``; what it bought, read from its run directory."""
    runs, store = work / f"runs-{proposals}", work / f"store-{proposals}"
    if args.seed_store is not None and not store.exists():  # each arm saves its candidates in a copy of its own
        shutil.copytree(args.seed_store, store)
    command = [args.saag_opt, "optimize", "--base", args.model, "--reviewer", args.model, "--reflection", args.model,
               "--dataset", args.dataset, "--prompt", args.prompt, "--mechanism", args.mechanism,
               "--train-limit", str(args.train_limit), "--val-limit", str(args.val_limit),
               "--max-metric-calls", str(args.max_metric_calls), "--minibatch", str(args.minibatch),
               "--accept", "equal", "--seed", "0", "--no-test", "--proposals", str(proposals),
               "--store", str(store), "--runs-dir", str(runs)] + (["--saag-informed"] if args.saag_informed else [])
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"optimize --proposals {proposals} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    run_dir = max(runs.glob("*-optimize"))
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    quarantine = run_dir / QUARANTINE_FILE
    refused = json.loads(quarantine.read_text(encoding="utf-8")).get("quarantined", []) if quarantine.is_file() else []
    reflections = run_dir / REFLECTIONS_FILE
    scores = summary.get("val_scores") or [0.0]
    n_val = max((c["n_val"] for c in summary.get("candidates") or []), default=args.val_limit)
    return {"proposals": proposals, "run": str(run_dir), "seconds": seconds,
            "reflections": sum(1 for _ in read_reflections(reflections)) if reflections.is_file() else 0,
            "pool": len(scores) - 1, "quarantined": len(refused), "rollouts": summary.get("metric_calls"),
            "seed_val": scores[0], "top_val": max(scores), "top_gain": round((max(scores) - scores[0]) * n_val),
            "best": summary.get("best_version"), "seed": summary.get("seed_version")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--dataset", default="bfcl:single_turn")
    parser.add_argument("--prompt", default="reviewer@v2")
    parser.add_argument("--mechanism", default="r2")
    parser.add_argument("--proposals", type=int, default=3, help="N, the arm compared with 1")
    parser.add_argument("--train-limit", type=int, default=20)
    parser.add_argument("--val-limit", type=int, default=10)
    parser.add_argument("--max-metric-calls", type=int, default=60)
    parser.add_argument("--minibatch", type=int, default=3)
    parser.add_argument("--saag-informed", action="store_true")
    parser.add_argument("--seed-store", type=Path, default=None,
                        help="a prompt store holding --prompt, copied for each arm (default: a fresh store)")
    parser.add_argument("--order", choices=("1-first", "n-first"), default="1-first")
    parser.add_argument("--saag-opt", default=str(Path(sys.executable).with_name("saag-opt")))
    args = parser.parse_args(argv)
    if args.proposals < 2:
        parser.error("--proposals must be at least 2 (it is compared with 1)")
    work = Path(tempfile.mkdtemp(prefix="saag-opt-bench-proposals-"))
    os.environ.setdefault("SAAG_OPT_CACHE", str(work / "cache"))
    order = (1, args.proposals) if args.order == "1-first" else (args.proposals, 1)
    arms = {n: run_arm(n, args, work) for n in order}
    for n in order:
        arm = arms[n]
        print(f"proposals={n}: {arm['reflections']} reflections, {arm['pool']} entered the pool, "
              f"{arm['quarantined']} quarantined, {arm['rollouts']} rollouts, top candidate val "
              f"{arm['top_val']:.3f} (seed {arm['seed_val']:.3f}, {arm['top_gain']:+d} val examples), best "
              f"{arm['best']}, {arm['seconds']:.0f} s; run {arm['run']}", flush=True)
    one, many = arms[1], arms[args.proposals]
    pool_ratio = many["pool"] / one["pool"] if one["pool"] else float("inf" if many["pool"] else "nan")
    print(f"proposals={args.proposals} pool_1={one['pool']} pool_N={many['pool']} pool_ratio={pool_ratio:.2f} "
          f"top_val_1={one['top_val']:.3f} top_val_N={many['top_val']:.3f} "
          f"seconds_ratio={many['seconds'] / one['seconds']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
