"""Wall time of `saag-opt compare` with 2, 3 and 4 prompt versions, and of 3 finished runs, offline.

The scripted server plays test_compare_n's world (base wrong on every 3rd example; v1 approves
everything, v2 fixes and raises false alarms, v3-gepa only fixes; v4 reviews as v3-gepa does, in
other words, so its reviews are asked again while its revisions, the same requests as v3-gepa's,
are cache hits). Each command runs as a user runs it (`python -m saag_opt.cli`,
a new process, fresh caches), so the time includes start-up, the shared base pass and one pass per
version. Then the three evaluate runs of the 3-version comparison are compared as finished runs (no
LM call). Requests are counted at the server: a version adds one pass, the base is paid once.

Run: .venv/bin/python experiments/bench/compare_versions.py [--limit 39]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from saag_opt.artifacts import PromptStore, PromptVersion  # noqa: E402
from saag_opt.data import load_dataset  # noqa: E402
from saag_opt.testing import ScriptedOpenAIServer  # noqa: E402
from tests.compare.test_compare import MARKER  # noqa: E402
from tests.compare.test_compare_n import V3_MARKER, ThreeWorld  # noqa: E402


def _store(root: Path) -> Path:
    store = PromptStore(root)
    store.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "Review the calls."}))
    store.save(PromptVersion(version="v2", program="reviewer", parents=["v1"],
                             instructions={"review": f"Review the calls carefully ({MARKER})."}))
    for name in ("v3-gepa", "v4"):
        store.save(PromptVersion(version=name, program="reviewer", parents=["v2"],
                                 instructions={"review": f"Review the calls, flag only real mistakes ({V3_MARKER}; "
                                                         f"{name})."}))
    return root


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "saag_opt.cli", *args], env=env, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"saag-opt {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=39, help="test examples (the shipped set has 39)")
    limit = parser.parse_args().limit
    work = Path(tempfile.mkdtemp(prefix="saag-opt-compare-bench-"))
    env = os.environ | {"SAAG_OPT_PROMPTS": str(_store(work / "prompts")), "PYTHONPATH": str(ROOT),
                        "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    examples = load_dataset("shipped:bfcl", split="test", limit=limit)
    versions = ["reviewer@v1", "reviewer@v2", "reviewer@v3-gepa", "reviewer@v4"]
    with ScriptedOpenAIServer(ThreeWorld(examples)) as server:
        model = ["--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--limit", str(limit),
                 "--workers", "4"]
        three_runs: Path | None = None
        for n in (2, 3, 4):
            server.reset()
            runs = work / f"runs-{n}"
            cache = {"DSPY_CACHEDIR": str(work / f"dspy-{n}"), "SAAG_OPT_CACHE": str(work / f"cache-{n}")}
            seconds, _ = _run(["compare", *versions[:n], *model, "--runs-dir", str(runs)], env | cache)
            print(f"prompts n_versions={n} examples={limit} seconds={seconds:.1f} requests={len(server.requests)}")
            if n == 3:
                three_runs = next(runs.iterdir())
        assert three_runs is not None
        server.reset()
        dirs = [str(next((three_runs / k).iterdir())) for k in ("a", "b", "c")]
        seconds, printed = _run(["compare", *dirs, "--runs-dir", str(work / "runs-offline")], env)
        print(f"runs n_versions=3 examples={limit} seconds={seconds:.1f} requests={len(server.requests)}")
        print("\n".join(line for line in printed.splitlines() if line.startswith("│ ") and " vs " in line[:10]))


if __name__ == "__main__":
    main()
