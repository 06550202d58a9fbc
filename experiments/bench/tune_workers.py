"""Scale-out of `saag-opt tune`: a 12-point grid, 1 vs 2 vs 4 worker processes on one journal study.

The LM is the scripted OpenAI-compatible server answering every chat request after `--latency`
seconds (200 ms; one thread per request, so the server never queues). The grid is mechanism
{r1, r2, gate+r1} x prompt {v1, v2} x saag_informed {true, false}; every trial evaluates `--limit`
val examples of shipped:bfcl one at a time (evaluate workers = 1), so a trial is a chain of LM calls:
the work is LM latency, not CPU. The base agent's answer is a deterministic function of the query
(one example in three calls the first tool with no arguments, which the reviewer rejects; the revision
adds an argument and is approved).

Each worker count starts from nothing: a fresh dspy cache, a fresh base-prediction cache and a
fresh journal. As `tune --processes N` does, the base agent's answers are asked for once before the
workers start (inside the wall time); a reviewer call two configurations share (r1 and r2 open
with the same review) is sent once even when two workers run them at once (the second waits for the
first's reply: lm.inflight), so `LM calls` stays at the 1-worker count. The worker processes are the
ones `saag-opt tune --workers N` starts (tune.workers.Supervisor), including N = 1.

  trials/min (study)  = 12 / (last trial's end - first trial's start), read from the storage (a
                        repeat answered from a stored result would not count: there is none here): the
                        steady-state throughput of the study;
  trials/min (wall)   = 12 / wall time including starting the worker processes (python + dspy
                        imports, ~3-5 s each on 2 busy cores), what a 12-trial run feels like.

`ratio=<study trials/min with 4 workers / with 1>` is the LAST line (goal >= 3.0).

Run: .venv/bin/python experiments/bench/tune_workers.py [--latency 0.2] [--limit 20] [--workers 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="saag-opt-bench-tune-"))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["SAAG_OPT_PROMPTS"] = str(ROOT / "prompts")
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
sys.path.insert(0, str(ROOT))

import optuna

from saag_opt.data import load_dataset
from saag_opt.testing import Reply, ScriptedOpenAIServer
from saag_opt.tune.run import warm_base_answers
from saag_opt.tune.space import load_space
from saag_opt.tune.storage import open_storage, parse_storage
from saag_opt.tune.study import TuneSettings, open_study
from saag_opt.tune.workers import Supervisor, WorkerJob

GRID = 12


def handler() -> Any:
    """Base: first tool, with an argument unless the query hashes to 0 mod 3; reviewer: reject a call without one."""
    examples = load_dataset("shipped:bfcl")

    def reply(request: dict) -> Reply:
        text = "\n".join(str(m.get("content")) for m in request["messages"])
        if "tools" in request:
            revised = "Reviewer feedback" in text
            query = next((ex.query for ex in examples if ex.query and ex.query in text), text)
            bare = zlib.crc32(query.encode()) % 3 == 0 and not revised
            return Reply(tool_calls=[{"name": request["tools"][0]["function"]["name"],
                                      "arguments": {} if bare else {"x": 1}}])
        tentative = request["messages"][-1]["content"].split("[[ ## tentative_calls ## ]]")[-1]
        error = '"arguments": {}' in tentative
        return Reply(text=f"[[ ## error ## ]]\n{error}\n\n[[ ## feedback ## ]]\nAdd the argument.\n\n"
                          "[[ ## completed ## ]]")

    return reply


def write_space(path: Path, url: str, limit: int) -> Path:
    path.write_text(f'[fixed]\nbase = "fake@{url}"\nreviewer = "fake@{url}"\ndataset = "shipped:bfcl"\n'
                    f'limit = {limit}\nworkers = 1\n'
                    '[search]\nmechanism = ["r1", "r2", "gate+r1"]\nprompt = ["reviewer@v1", "reviewer@v2"]\n'
                    'saag_informed = [true, false]\n', encoding="utf-8")
    return path


def measure(workers: int, space_path: Path, server: ScriptedOpenAIServer) -> tuple[float, float, int]:
    """(study trials/min, wall trials/min, LM calls) for one worker count, from a fresh state."""
    work = WORK / f"w{workers}"
    os.environ["DSPY_CACHEDIR"] = str(work / "dspy")
    os.environ["SAAG_OPT_CACHE"] = str(work / "cache")
    space = load_space(space_path)
    settings = TuneSettings(sampler="grid", trials=None)
    storage = parse_storage(f"journal:{work / 'study.journal'}")
    study, _ = open_study(space, open_storage(storage), "bench", settings, create=True)
    job = WorkerJob(str(space_path), {}, storage.text, "bench", str(work / "trials"), settings.__dict__, 0)
    before = len(server.chat_requests)
    started = time.monotonic()
    warm_base_answers(space, work / "base", {})  # what `tune --processes N` does first
    Supervisor(job, workers, work / "logs").run(study, space, settings, storage)
    wall = time.monotonic() - started
    trials = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    evaluated = {t.user_attrs.get("config_key") for t in trials if "duplicate_of" not in t.user_attrs}
    if len(evaluated) != GRID:
        raise SystemExit(f"{workers} workers evaluated {len(evaluated)} configurations, expected {GRID}")
    span = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
    return 60 * GRID / span, 60 * GRID / wall, len(server.chat_requests) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rates: dict[int, float] = {}
    try:
        with ScriptedOpenAIServer(handler(), latency=args.latency) as server:
            space = write_space(WORK / "space.toml", server.url, args.limit)
            print(f"{GRID}-point grid, {args.limit} val examples per trial, {args.latency * 1000:.0f} ms per LM call")
            print(f"{'workers':>7}  {'trials/min (study)':>18}  {'trials/min (wall)':>17}  {'LM calls':>8}")
            for n in args.workers:
                study_rate, wall_rate, calls = measure(n, space, server)
                rates[n] = study_rate
                print(f"{n:>7}  {study_rate:>18.1f}  {wall_rate:>17.1f}  {calls:>8}")
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    low, high = min(rates), max(rates)
    print(f"ratio={rates[high] / rates[low]:.2f}")


if __name__ == "__main__":
    main()
