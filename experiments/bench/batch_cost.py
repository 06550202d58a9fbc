"""Dollars of an `r2` evaluate with and without `--batch` (scripted server, offline).

The same examples, world and mechanism run twice, each with fresh LM and base-prediction caches so
every call is paid: once with ordinary calls, once with `--batch` (each round of independent calls
one Batch API job on the scripted server's `/v1/files` + `/v1/batches`). The scripted model is
priced at gpt-4o-mini's rates from dspy's bundled price map (a free scripted server would cost $0
both ways); tokens are the server's usage counts, identical in both runs. `--failed-lines RATE`
makes that share of batch lines fail provider-side, so those requests are paid again at the full
price (the fallback): the ratio then sits above the batch discount.

World: the base agent's first answer lacks arguments on one example in three (the reviewer rejects
it, the revision fixes it), as in experiments/bench/concurrency.py.

`ratio=<batch dollars / direct dollars>` is the LAST line (goal <= 0.55).

Run: .venv/bin/python experiments/bench/batch_cost.py [--n 100] [--failed-lines 0.02]
     [--batch-delay 0.5]
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

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="saag-opt-bench-batch-"))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["SAAG_OPT_PROMPTS"] = str(ROOT / "prompts")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # r2_world, beside this script

from r2_world import examples, handler  # noqa: E402

from saag_opt.data.jsonl import write_examples  # noqa: E402
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import EvaluationResult, run_evaluation  # noqa: E402
from saag_opt.lm.specs import ModelSpec  # noqa: E402
from saag_opt.lm.spend import accounting  # noqa: E402
from saag_opt.testing import ScriptedOpenAIServer  # noqa: E402

PRICED_AS = "gpt-4o-mini"


def run(server: ScriptedOpenAIServer, data: Path, name: str, *, batch: bool) -> tuple[EvaluationResult, float]:
    """One evaluate run with its own fresh caches; returns it and its wall seconds."""
    os.environ["DSPY_CACHEDIR"] = str(WORK / f"dspy-{name}")  # read when the run configures the LM cache
    config = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v2",
                            mechanism="r2", dataset=str(data), workers=16, runs_dir=WORK / f"runs-{name}",
                            cache_dir=WORK / f"base-{name}", retry_base_delay=0.05, batch=batch)
    start = time.perf_counter()
    result = run_evaluation(config)
    return result, time.perf_counter() - start


def main() -> None:
    """Parse flags, run both ways, print the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--failed-lines", type=float, default=0.02, help="share of batch lines that fail")
    parser.add_argument("--batch-delay", type=float, default=0.5, help="seconds per batch stage on the server")
    args = parser.parse_args()
    price = accounting.model_price(ModelSpec("openai", PRICED_AS))
    assert price is not None, f"{PRICED_AS} is not in dspy's price map"
    accounting.model_price = lambda spec: price  # type: ignore[assignment]  # the scripted model, priced
    data = WORK / "bench.jsonl"
    write_examples(data, examples(args.n))
    try:
        with ScriptedOpenAIServer(handler, batch_delay=args.batch_delay) as server:
            server.batch_desk.failing = lambda body: zlib.crc32(repr(body).encode()) % 10_000 < args.failed_lines * 10_000
            direct, direct_wall = run(server, data, "direct", batch=False)
            direct_calls = len(server.chat_requests)
            server.reset()
            batched, batch_wall = run(server, data, "batch", batch=True)
            batches, fallbacks = server.batches, len(server.chat_requests)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    one, half = direct.summary.costs["roles"]["total"], batched.summary.costs["roles"]["total"]
    same = [(r.example_id, r.condition, r.final) for r in direct.records] == [
        (r.example_id, r.condition, r.final) for r in batched.records]
    print(f"examples={args.n} mechanism=r2 priced_as={PRICED_AS} failed_lines={args.failed_lines:g} "
          f"same_records={same}")
    print(f"direct: calls={one['calls']} server_calls={direct_calls} tokens={one['prompt_tokens']}+"
          f"{one['completion_tokens']} wall={direct_wall:.1f}s dollars=${one['dollars']:.6f}")
    print(f"batch:  calls={half['calls']} batch_calls={half['batch_calls']} batches={len(batches)} "
          f"fallbacks={fallbacks} tokens={half['prompt_tokens']}+{half['completion_tokens']} "
          f"wall={batch_wall:.1f}s dollars=${half['dollars']:.6f}")
    print(f"ratio={half['dollars'] / one['dollars']:.3f}")


if __name__ == "__main__":
    main()
