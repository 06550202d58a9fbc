"""Offline speed of `evaluate --base local --reviewer local --mechanism r2`: the legacy vs the tuned embedded server.

Same model, same examples, empty LM caches, one run. The examples are cut into blocks; each block
is evaluated by both servers in ABBA order (legacy first in odd blocks, tuned first in even ones),
each on a server started for it (``SAAG_OPT_LOCAL_SPEED`` selects it; one model server at a time),
so drift in the machine's load falls on both alike. Every server writes a per-request trace
(``saag_opt.lm.embedded.server_trace``), which gives load-independent counts next to the seconds: per role,
calls, prompt tokens, tokens reused from the KV/prompt cache, tokens generated, and the seconds of
prompt decoding, generation, sampling, prompt-cache copies and the rest of the server, plus the
client's wait beyond the server time. Also: server CPU seconds, the peak RSS over the model file
(goal <= 3), and whether both servers gave the same records (calls, verdicts, correctness).

A multi-turn dataset (``bfcl:multi_turn_*``, ``tau2:<domain>``) runs its entries the same way
(``evaluate``'s conversation path; tau2's user simulator on the same model, ``--max-steps``), and
the breakdown adds the seconds per step. Its prompts (tool docs, tau2's policy, the history) are
5-8k tokens, so it measures what the prompt cache keeps across the agent, reviewer and user roles.

The last line is ``ratio=<examples per hour, tuned / legacy>`` (goal >= 2 on the 1.5B).

Run (one llama server at a time):
  python experiments/bench/offline_speed.py [--model qwen2.5-coder-1.5b] [--limit 6] [--block 2]
  SAAG_OPT_LOCAL_CTX=16384 python experiments/bench/offline_speed.py --model qwen2.5-coder-1.5b \
      --dataset tau2:airline --limit 1 --block 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="saag-opt-bench-speed-"))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("SAAG_OPT_PROMPTS", str(ROOT / "prompts"))
sys.path.insert(0, str(ROOT))

from saag_opt.data import load_dataset  # noqa: E402
from saag_opt.data.catalog import is_multi_turn_dataset, load_episodes  # noqa: E402
from saag_opt.data.jsonl import write_examples  # noqa: E402
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation  # noqa: E402
from saag_opt.lm import stop_embedded_servers  # noqa: E402
from saag_opt.lm.embedded.model_file import ensure_model_file  # noqa: E402
from saag_opt.lm.embedded.server import SPEED_ENV, SPEEDS, TRACE_ENV, embedded_servers  # noqa: E402

PATHS = ("legacy", "tuned")
ROLE_HEADS = {"You are a function-calling assistant": "base", "<instructions>": "base",
              "# User Simulation": "user"}
"""How a trace line's prompt starts -> its role (the single-call and tau2 agents are ``base``); else reviewer."""
SERVER_PARTS = ("prompt_seconds", "generate_seconds", "sample_seconds", "cache_seconds")
VOLATILE = {"seconds", "run_id", "tokens", "cached", "untimed_replays", "latency"}
"""Record keys that differ between identical answers (time, tokens counted by the client, run ids)."""


def _proc(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = next(int(line.split()[1]) * 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:"))
    return cpu, peak


def llama_build() -> str:
    """The llama.cpp library the servers load and the CPU features it was compiled for.

    Why: prompt decoding speed depends on the build (on an AVX-512 machine, pip's native build decodes
    prompts ~1.3x faster than ``.ci/run``'s portable AVX2 one), and greedy replies may differ across builds.
    """
    import llama_cpp  # noqa: PLC0415 - the local extra; the bench needs it anyway

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    features = " ".join(re.findall(r"(\w+) = 1", info)) or info.strip()
    where = os.environ.get("LLAMA_CPP_LIB_PATH") or "the installed package"
    return f"llama-cpp-python {llama_cpp.__version__} (library from {where}), built for {features}"


def _answer(value: Any) -> Any:
    """A record without its volatile keys (what two servers must agree on)."""
    if isinstance(value, dict):
        return {k: _answer(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_answer(v) for v in value]
    return value


def run_block(path: str, model: str, block: int, data: Path | tuple[int, int], args: argparse.Namespace) -> dict[str, Any]:
    """One evaluate run of one block on a fresh server of ``path``; its wall time, trace and records.

    ``data``: the block's examples as a JSONL file, or (skip, limit) of a multi-turn dataset's entries.
    """
    where = WORK / f"{block:02d}-{path}"
    where.mkdir(parents=True)
    os.environ[SPEED_ENV] = path
    os.environ[TRACE_ENV] = str(where / "trace.jsonl")
    os.environ["DSPY_CACHEDIR"] = str(where / "dspy-cache")  # empty: every LM call is real
    common = {"base": f"local:{model}", "reviewer": f"local:{model}", "prompt": args.prompt, "workers": 1,
              "mechanism": args.mechanism, "runs_dir": where / "runs", "cache_dir": where / "base-cache"}
    if isinstance(data, tuple):
        tau2 = args.dataset.startswith("tau2:")
        config = EvaluateConfig(**common, dataset=args.dataset, split=args.split, skip=data[0], limit=data[1],
                                **({"max_steps": args.max_steps} if tau2 else {}))
    else:
        config = EvaluateConfig(**common, dataset=str(data))
    load = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        if isinstance(data, tuple):
            episodes = run_evaluation(config)
            result: Any = episodes
            n, errors = episodes.summary.n_episodes, episodes.summary.errors
            costs = json.loads((episodes.run_dir / "costs.json").read_text())
            steps = sum(len(turn.steps) for r in episodes.records for turn in r.turns)
        else:
            single = run_evaluation(config)
            result, n, errors, costs, steps = single, single.summary.n_examples, single.summary.errors, \
                single.summary.costs, 0
        wall = time.perf_counter() - started
        server = embedded_servers()[model]
        cpu, peak = _proc(server.process.pid) if server.process is not None else (0.0, 0)
        startup = server.startup_seconds or 0.0
    finally:
        stop_embedded_servers()
    trace = [json.loads(line) for line in (where / "trace.jsonl").read_text().splitlines()]
    return {"path": path, "block": block, "wall": wall - startup, "startup": startup, "cpu": cpu, "peak": peak,
            "load": (load + os.getloadavg()[0]) / 2, "trace": trace, "client": costs["roles"],
            "answers": {r.example_id + "/" + r.condition: _answer(r.model_dump(mode="json")) for r in result.records},
            "n": n, "errors": errors, "steps": steps}


def _role(line: dict[str, Any]) -> str:
    return next((role for head, role in ROLE_HEADS.items() if line["head"].startswith(head)), "reviewer")


def breakdown(runs: list[dict[str, Any]], model_size: int) -> None:
    """Per path: totals, then per role the token counts and where the seconds went."""
    for path in PATHS:
        mine = [r for r in runs if r["path"] == path]
        wall, n = sum(r["wall"] for r in mine), sum(r["n"] for r in mine)
        cpu, peak = sum(r["cpu"] for r in mine), max(r["peak"] for r in mine)
        loads = " ".join(f"{r['load']:.1f}" for r in mine)
        print(f"{path}: {n} examples ({sum(r['errors'] for r in mine)} errors) in {wall:.1f} s "
              f"= {3600 * n / wall:.1f} examples/hour; server CPU {cpu:.1f} s; peak RSS {peak / 2**20:,.0f} MiB "
              f"= {peak / model_size:.2f} x model file; load average per block {loads}")
        if steps := sum(r["steps"] for r in mine):
            print(f"  {steps} agent steps (base and reviewed runs): {wall / steps:.1f} s per step")
        per_role: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for run in mine:
            for line in run["trace"]:
                row = per_role[_role(line)]
                row["calls"] += 1
                for key in ("prompt_tokens", "reused_tokens", "sampled_tokens", "seconds", *SERVER_PARTS):
                    row[key] += line[key]
            for role in ("base", "reviewer", "user"):
                per_role[role]["client_seconds"] += float(run["client"].get(role, {}).get("seconds", 0.0))
        for role, row in sorted(per_role.items()):
            other = row["seconds"] - sum(row[k] for k in SERVER_PARTS)
            print(f"  {role:8s} calls={row['calls']:.0f} prompt_tokens={row['prompt_tokens']:.0f} "
                  f"reused={row['reused_tokens']:.0f} decoded={row['prompt_tokens'] - row['reused_tokens']:.0f} "
                  f"generated={row['sampled_tokens']:.0f} | server {row['seconds']:.1f} s = prompt "
                  f"{row['prompt_seconds']:.1f} + generate {row['generate_seconds']:.1f} + sample "
                  f"{row['sample_seconds']:.1f} + cache {row['cache_seconds']:.1f} + other {other:.1f}; "
                  f"client waited {row['client_seconds'] - row['seconds']:.1f} s more")


def main() -> None:
    """Parse flags, run the blocks ABBA, print the breakdown and the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="embedded model name (local:<name>)")
    parser.add_argument("--limit", type=int, default=6, help="examples (round-robin over the categories)")
    parser.add_argument("--block", type=int, default=2, help="examples per ABBA block")
    parser.add_argument("--dataset", default="shipped:bfcl")
    parser.add_argument("--split", default="test")
    parser.add_argument("--mechanism", default="r2")
    parser.add_argument("--prompt", default="reviewer@v2")
    parser.add_argument("--max-steps", type=int, default=30, help="tau2 datasets: tau2's max_steps per run")
    args = parser.parse_args()
    assert set(PATHS) <= set(SPEEDS)
    model = args.model.removeprefix("local:")
    size = ensure_model_file(model).stat().st_size
    multi_turn = is_multi_turn_dataset(args.dataset)
    examples: list[Any] = (load_episodes if multi_turn else load_dataset)(args.dataset, split=args.split, limit=args.limit)
    print(f"model local:{model} ({size:,} B), {len(examples)} examples of {args.dataset} ({args.split}), "
          f"mechanism {args.mechanism}, blocks of {args.block}, work dir {WORK}; load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    print(llama_build(), flush=True)
    runs = []
    for block, start in enumerate(range(0, len(examples), args.block)):
        data: Path | tuple[int, int] = (start, args.block) if multi_turn else WORK / f"block-{block:02d}.jsonl"
        if isinstance(data, Path):
            write_examples(data, examples[start:start + args.block])
        for path in PATHS if block % 2 == 0 else PATHS[::-1]:
            run = run_block(path, model, block, data, args)
            runs.append(run)
            print(f"block {block} {path}: {run['n']} examples in {run['wall']:.1f} s (server start "
                  f"{run['startup']:.1f} s, not counted), load {run['load']:.1f}", flush=True)
    breakdown(runs, size)
    answers = {path: {k: v for r in runs if r["path"] == path for k, v in r["answers"].items()} for path in PATHS}
    same = sum(answers["legacy"][k] == answers["tuned"].get(k) for k in answers["legacy"])
    print(f"identical records (calls, verdicts, correctness): {same}/{len(answers['legacy'])}")
    wall = {path: sum(r["wall"] for r in runs if r["path"] == path) for path in PATHS}
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"ratio={wall['legacy'] / wall['tuned']:.2f}")


if __name__ == "__main__":
    main()
