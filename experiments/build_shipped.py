"""Regenerate ``datasets/`` (the small shipped datasets) from the installed bfcl-eval data.

    python experiments/build_shipped.py [--out datasets] [--seed 0] [--per-category 30]

Deterministic: the same bfcl-eval version, seed and count give byte-identical files.

* ``bfcl.jsonl``: ``--per-category`` examples from each of simple_python, multiple, parallel,
  parallel_multiple and irrelevance, sampled with ``random.Random(f"{seed}:{category}")`` and kept in
  BFCL file order; BFCL-format rows with BFCL's original function types.
* ``registry-{5,10,15}.jsonl``: the single-call examples of ``bfcl.jsonl`` (simple_python and
  multiple) with registries of 5/10/15 tools; distractors come from every function of BFCL's
  non-live categories (``saag_opt.data.registry_bench``). saag-opt's own example schema.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import random
import sys
from pathlib import Path
from typing import Any

from saag_opt.data.bfcl import BFCL_VERSION, bfcl_data_dir, load_bfcl
from saag_opt.data.catalog import BFCL_GROUPS
from saag_opt.data.jsonl import load_bfcl_jsonl, write_bfcl_rows, write_examples
from saag_opt.data.registry_bench import build_registry_benchmark, function_pool, is_single_call

CATEGORIES = BFCL_GROUPS["non_live"]
SIZES = (5, 10, 15)


def _read(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fp:
        return [json.loads(line) for line in fp if line.strip()]


def bfcl_rows(data: Path, seed: int, per_category: int) -> list[dict[str, Any]]:
    """The sampled BFCL-format rows, category by category, each in BFCL file order."""
    rows: list[dict[str, Any]] = []
    for category in CATEGORIES:
        questions = _read(data / f"BFCL_v4_{category}.json")
        answer_file = data / "possible_answer" / f"BFCL_v4_{category}.json"
        answers = {a["id"]: a["ground_truth"] for a in _read(answer_file)} if answer_file.is_file() else {}
        picked = sorted(random.Random(f"{seed}:{category}").sample(range(len(questions)), per_category))
        for i in picked:
            q = questions[i]
            rows.append({"id": q["id"], "category": category, "question": q["question"],
                         "function": q["function"], "ground_truth": answers.get(q["id"])})
    return rows


def build(out: Path, seed: int = 0, per_category: int = 30) -> dict[str, Path]:
    """Write every shipped file into ``out``; returns name -> path.

    Raises:
        SystemExit: bfcl-eval is missing or not the pinned version.
    """
    data = bfcl_data_dir()
    installed = importlib.metadata.version("bfcl_eval") if data is not None else None
    if data is None or installed != BFCL_VERSION:
        raise SystemExit(f"need bfcl-eval=={BFCL_VERSION} installed (found {installed}); "
                         f"pip install --no-deps bfcl-eval=={BFCL_VERSION}")
    out.mkdir(parents=True, exist_ok=True)
    written = {"bfcl": out / "bfcl.jsonl"}
    write_bfcl_rows(written["bfcl"], bfcl_rows(data, seed, per_category))
    source = f"bfcl-eval=={BFCL_VERSION}"
    single = [dataclasses.replace(ex, source=source) for ex in load_bfcl_jsonl(written["bfcl"])
              if is_single_call(ex)]
    pool = function_pool(ex for category in CATEGORIES for ex in load_bfcl(category, root=data))
    for size, examples in build_registry_benchmark(single, pool, SIZES, seed=seed).items():
        written[f"registry-{size}"] = out / f"registry-{size}.jsonl"
        write_examples(written[f"registry-{size}"], examples)
    return written


def main(argv: list[str] | None = None) -> int:
    """CLI entry: build, then print each file with its row count and size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "datasets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-category", type=int, default=30)
    args = parser.parse_args(argv)
    for name, path in build(args.out, args.seed, args.per_category).items():
        rows = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        print(f"{name:12s} {rows:4d} rows {path.stat().st_size / 1024:8.1f} KiB  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
