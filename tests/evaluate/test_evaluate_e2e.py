"""``saag-opt evaluate`` end to end on the real embedded model (marked e2e; CI runs it).

Asserts structure, not reviewer quality: the 0.5B model is fine for tool calls and useless as a
reviewer, so this proves the pipeline (server start, constrained base calls, reviewer calls,
records, summary, cleanup) works offline, not that it helps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_evaluate_r2_on_three_shipped_examples_offline(local_spec: str, tmp_path: Path) -> None:
    env = {**os.environ, "SAAG_OPT_CACHE": str(tmp_path / "cache"), "DSPY_CACHEDIR": str(tmp_path / "dspy")}
    env.pop("OPENAI_API_KEY", None)
    out = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-m", "saag_opt.cli", "evaluate", "--base", local_spec, "--reviewer", local_spec,
         "--mechanism", "r2", "--dataset", "shipped:bfcl", "--limit", "3", "--runs-dir", str(tmp_path / "runs"),
         "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Help / harm" in done.stdout and "latency overhead" in done.stdout

    (run_dir,) = (tmp_path / "runs").iterdir()
    header = json.loads((run_dir / "run.json").read_text())
    assert header["status"] == "success" and header["verb"] == "evaluate"
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert sorted(r["condition"] for r in rows) == ["base"] * 3 + ["r2"] * 3
    categories = {r["category"] for r in rows}
    assert len(categories) == 3  # --limit spreads over categories
    for row in rows:
        assert row.get("error") in (None, ""), row
        assert isinstance(row["correct"], bool)
    reviewed = [r for r in rows if r["condition"] == "r2"]
    assert all(1 <= len(r["rounds"]) <= 2 for r in reviewed)  # r2: one or two reviews, never more
    summary = json.loads(out.read_text())
    costs = json.loads((run_dir / "costs.json").read_text())
    assert costs["roles"]["base"]["calls"] >= 3 and costs["roles"]["reviewer"]["calls"] >= 3
    assert costs["roles"]["total"]["dollars"] == 0.0  # local models are free, but tokens and seconds count
    assert costs["roles"]["total"]["prompt_tokens"] > 0 and costs["roles"]["total"]["seconds"] > 0

    # The summary (what --json hands to a user) is the records, counted: not just "something".
    assert summary == json.loads((run_dir / "summary.json").read_text())
    assert (summary["mechanism"], summary["prompt"], summary["n_examples"], summary["errors"]) == ("r2", "reviewer@v2", 3, 0)
    base = {r["example_id"]: r["correct"] for r in rows if r["condition"] == "base"}
    final = {r["example_id"]: r["correct"] for r in reviewed}
    assert (summary["base"]["n"], summary["base"]["correct"]) == (3, sum(base.values()))
    assert (summary["reviewed"]["n"], summary["reviewed"]["correct"]) == (3, sum(final.values()))
    pairs = [(base[i], final[i]) for i in base]
    hh = summary["help_harm"]
    assert (hh["n"], hh["both_right"], hh["fixed"], hh["broken"], hh["both_wrong"]) == (
        3, pairs.count((True, True)), pairs.count((False, True)), pairs.count((True, False)), pairs.count((False, False)))
    assert summary["reviewer_calls_per_item"] == pytest.approx(sum(r["reviewer_calls"] for r in reviewed) / 3)
    assert summary["reviewer_calls_per_item"] >= 1  # every example was reviewed at least once
    assert summary["costs"]["roles"]["reviewer"]["calls"] == costs["roles"]["reviewer"]["calls"]
