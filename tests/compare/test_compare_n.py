"""``saag-opt compare`` of three versions on the scripted server: every pair, Holm, one column per version.

The world is test_compare's (base wrong on every 3rd example; v1 approves everything; v2 fixes every
wrong call and raises false alarms on every 4th+1 right one) plus v3, whose reviewer rejects only the
wrong calls (it fixes what v2 fixes and breaks nothing). On the 12 examples: 4 wrong base calls, 2
false alarms, so A = 8/12, B = 10/12, C = 12/12 right.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.cli import main
from saag_opt.compare.comparison import CompareSummary, holm, pair_keys, side_keys
from saag_opt.compare.run import CompareConfig, preflight_compare, resume_compare_config, run_compare
from saag_opt.data import load_dataset
from saag_opt.errors import ConfigError, CostCapReached
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluation.helpharm import mcnemar_exact
from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.report.html import render_report
from saag_opt.runfiles import read_run
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.testing.scripted_world import BaseRequest, ReviewRequest
from tests.compare.test_compare import DATASET, LIMIT, MARKER, SPLIT, World, _requests

pytestmark = pytest.mark.integration

V3_MARKER = "v3 marker"
FIXED, BROKEN = 4, 2  # wrong base calls (i % 3 == 0) and v2's false alarms (i % 4 == 1, base right) of 12
HOLM = [1.0, 0.375, 1.0]  # by hand: p = 44/64, 2/16, 2/4 for (A,B), (A,C), (B,C); 0.125*3, 0.5*2, max(1, .6875)


def test_holm_step_down_against_hand_computed_values() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 lifted to 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1, and monotone after the cap
    assert holm([0.2, 0.2, 0.01]) == pytest.approx([0.4, 0.4, 0.03])  # ties get the same adjusted value
    assert holm([0.04]) == [0.04] and holm([]) == []
    assert holm([44 / 64, 2 / 16, 2 / 4]) == pytest.approx(HOLM)


def test_keys_and_pairs_in_argument_order() -> None:
    assert side_keys(3) == ["a", "b", "c"] and pair_keys(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert len(pair_keys(side_keys(5))) == 10
    for n in (1, 27):
        with pytest.raises(ConfigError, match="compare takes 2 to 26 versions"):
            side_keys(n)


class ThreeWorld(World):
    """test_compare's world with v3: it rejects the wrong calls only (no false alarm)."""

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        if V3_MARKER not in request.instructions:
            return super().review(request)
        example = self.examples[self._which(request.text)]
        tentative = request.tentative_calls
        looks_wrong = ("cannot help" in tentative) if example.expect != "no_call" else ("no function call" not in tentative)
        return looks_wrong, "Please fix the call."


def add_v3(store: PromptStore) -> None:
    store.save(PromptVersion(version="v3-gepa", program="reviewer", parents=["v2"],
                             instructions={"review": f"Review the calls, flag only real mistakes ({V3_MARKER})."}))


@pytest.fixture
def prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PromptStore:
    store = PromptStore(tmp_path / "prompts")
    store.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "Review the calls."}))
    store.save(PromptVersion(version="v2", program="reviewer", parents=["v1"],
                             instructions={"review": f"Review the calls carefully ({MARKER})."}))
    add_v3(store)
    store.alias("reviewer", "production", "v2")
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(store.root))
    return store


@pytest.fixture
def world() -> Iterator[tuple[ThreeWorld, ScriptedOpenAIServer]]:
    w = ThreeWorld(load_dataset(DATASET, split=SPLIT, limit=LIMIT))
    with ScriptedOpenAIServer(w) as server:
        yield w, server


VERSIONS = ["reviewer@v1", "reviewer@v2", "reviewer@v3-gepa"]


def _config(server: ScriptedOpenAIServer, tmp_path: Path, versions: list[str] = VERSIONS,
            **overrides: Any) -> CompareConfig:
    values: dict[str, Any] = dict(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2",
                                  dataset=DATASET, split=SPLIT, limit=LIMIT, workers=4, runs_dir=tmp_path / "unused",
                                  cache_dir=tmp_path / "cache", retry_base_delay=0.01)
    return CompareConfig(versions=versions, evaluation=EvaluateConfig(**(values | overrides)),
                         runs_dir=tmp_path / "runs")


def _pairs(s: CompareSummary) -> dict[tuple[str, str], tuple[int, int, float, float]]:
    return {(p.ref, p.target): (p.b_only_right, p.a_only_right, p.mcnemar_p, p.holm_p) for p in s.pairs}


def test_three_prompt_versions_every_pair_with_holm(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    result = run_compare(_config(server, tmp_path))
    s, n = result.summary, LIMIT
    assert [x.label for x in s.sides] == ["v1", "v2", "v3-gepa"] and s.keys == ["a", "b", "c"]
    assert [x.accuracy.accuracy for x in s.sides] == pytest.approx([(n - FIXED) / n, (n - BROKEN) / n, 1.0])
    assert [(x.help_harm.fixed, x.help_harm.broken) for x in s.sides] == [(0, 0), (FIXED, BROKEN), (FIXED, 0)]
    pairs = _pairs(s)
    assert list(pairs) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert pairs[("a", "b")][:2] == (FIXED, BROKEN) and pairs[("a", "c")][:2] == (FIXED, 0)
    assert pairs[("b", "c")][:2] == (BROKEN, 0)  # C is right where B's false alarms broke the call
    assert [p[2] for p in pairs.values()] == pytest.approx([mcnemar_exact(4, 2), mcnemar_exact(4, 0),
                                                            mcnemar_exact(2, 0)])
    assert [p[3] for p in pairs.values()] == pytest.approx(HOLM)
    assert s.pair("b", "c").net_change == pytest.approx(BROKEN / n) and s.paired == s.pair("a", "b")
    # each version evaluated once: the base agent's first calls once per example, each review asked once
    requests = _requests(server)
    assert len([r for r in requests if isinstance(r, BaseRequest) and not r.revising]) == n
    kept = n - FIXED - BROKEN
    reviews = [r for r in requests if r.role == "review"]
    assert len(reviews) == n + (kept + 2 * (FIXED + BROKEN)) + ((n - FIXED) + 2 * FIXED)
    assert s.base_costs is not None and s.base_costs["roles"]["base"]["calls"] == n

    run_dir = result.run_dir
    assert {p.name for p in run_dir.iterdir()} == {"a", "b", "c", "base", "costs.json", "records.jsonl", "run.json",
                                                   "summary.json"}
    header = json.loads((run_dir / "run.json").read_text())
    assert header["config"]["versions"] == VERSIONS and "a" not in header["config"]
    assert header["plugins"]["prompts"]["c"]["ref"] == "reviewer@v3-gepa"
    stored = json.loads((run_dir / "summary.json").read_text())
    assert stored["schema_version"] == 2 and len(stored["sides"]) == 3 and len(stored["pairs"]) == 3
    assert read_run(run_dir).summary == s
    rows = read_run(run_dir).records
    assert sorted({r.condition for r in rows}) == ["base", "r2@v1", "r2@v2", "r2@v3-gepa"] and len(rows) == 4 * n
    assert set(json.loads((run_dir / "costs.json").read_text())["parts"]) == {"base", "a", "b", "c"}

    html = render_report([run_dir])
    assert "Compare " + run_dir.name + ": A = v1 vs B = v2 vs C = v3-gepa" in html
    for needle in ("Every pair of versions", "Pair matrix: row - column", "Pairs: McNemar exact p and Holm-adjusted p",
                   "Truth accuracy per category: base, A v1, B v2, C v3-gepa", "C v3-gepa accuracy %",
                   "B v2 -&gt; C v3-gepa (paired)", "Latency per example",
                   "+16.7 pts", "0.375"):
        assert needle in html, needle


def test_cli_three_versions_prints_every_pair_and_dry_run_counts_each_pass(world, prompts, tmp_path: Path,  # noqa: ANN001
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, server = world
    model = ["--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--split", SPLIT,
             "--limit", str(LIMIT), "--runs-dir", str(tmp_path / "runs")]
    out = tmp_path / "compare.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", *VERSIONS, *model, "--json", str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    for needle in ("Accuracy: base vs A vs B vs C", "C %", "Every pair (paired; McNemar exact p, Holm-adjusted over 3 "
                   "pairs)", "C vs B", "0.375", "C = v3-gepa (r2", "paid once for all 3 versions"):
        assert needle in printed, needle
    assert "B - A" not in printed and json.loads(out.read_text())["schema_version"] == 2

    settings = _config(server, tmp_path).evaluation
    assert settings is not None
    calls = [preflight_compare(CompareConfig(versions=["reviewer@v2"] * k, evaluation=settings)).total.calls
             for k in (2, 3, 4)]
    assert calls[2] - calls[1] == calls[1] - calls[0] > 0  # one more version, one more pass (base paid once)
    server.reset()
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", *VERSIONS, *model, "--dry-run"])
    assert exit_info.value.code == 0 and server.requests == []


def test_three_finished_runs_compare_offline(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    fresh = run_compare(_config(server, tmp_path))
    dirs = [str(next((fresh.run_dir / k).iterdir())) for k in ("a", "b", "c")]
    server.reset()
    offline = run_compare(CompareConfig(versions=dirs, runs_dir=tmp_path / "runs"))
    assert server.requests == []
    s = offline.summary
    assert s.mode == "runs" and s.matched == LIMIT and len({x.label for x in s.sides}) == 3
    assert _pairs(s) == _pairs(fresh.summary)
    assert [x.help_harm for x in s.sides] == [x.help_harm for x in fresh.summary.sides]
    assert [x.source["prompt"] for x in s.sides] == ["reviewer@v1", "reviewer@v2", "reviewer@v3-gepa"]
    header = read_run(offline.run_dir, header_only=True).header
    assert set(header.plugins["sources"]) == {"a", "b", "c"} and header.config["evaluation"] is None
    # the compare run itself is a valid input: #CONDITION picks each version
    again = run_compare(CompareConfig(versions=[f"{fresh.run_dir}#r2@{v}" for v in ("v1", "v2", "v3-gepa")],
                                      runs_dir=tmp_path / "runs"))
    assert _pairs(again.summary) == _pairs(fresh.summary)
    with pytest.raises(ConfigError, match=r"cannot compare run directory .* with prompt reference 'reviewer@v2': "
                                          r"give only prompt references"):
        run_compare(CompareConfig(versions=[dirs[0], dirs[1], "reviewer@v2"], runs_dir=tmp_path / "runs"))


def test_max_cost_stops_during_the_third_pass_and_resume_finishes_only_it(world, prompts, tmp_path: Path,  # noqa: ANN001
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price",
                        lambda spec: ModelPrice(2.5e-6, 1e-5, 1.25e-6, max_output_tokens=400))
    w, server = world
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-full"))
    full = run_compare(_config(server, tmp_path, cache_dir=tmp_path / "base-cache-full"))
    parts = json.loads((full.run_dir / "costs.json").read_text())["parts"]
    total = json.loads((full.run_dir / "costs.json").read_text())["roles"]["total"]["dollars"]
    before_c = sum(parts[k]["roles"]["total"]["dollars"] for k in ("base", "a", "b"))
    # A and B finish, C stops part way. A call's hold is its worst case (5-20x what it costs here), so
    # half of C's spend can be less than one hold: a quarter of C is left free for it, and one worker
    # keeps the order of C's calls (and so where the cap stops it) the same on every machine.
    cap = before_c + 0.75 * parts["c"]["roles"]["total"]["dollars"]
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-1"))
    server.reset()
    stopped = run_compare(_config(server, tmp_path, max_cost=cap, workers=1))
    run_dir = stopped.run_dir
    c_dir = next((run_dir / "c").iterdir())
    finished_c = {r.example_id for r in read_run(c_dir).records}
    spent = sum(json.loads(p.read_text())["roles"]["total"]["dollars"] for p in run_dir.glob("*/*/costs.json"))
    assert stopped.summary.stopped and 0 < stopped.summary.matched == len(finished_c) < LIMIT
    assert spent <= cap and json.loads((run_dir / "run.json").read_text())["status"] == "stopped"

    shutil.rmtree(tmp_path / "cache")  # empty caches: a request for finished work would reach the server
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-2"))
    server.reset()
    with pytest.raises(ConfigError, match=r"C 'reviewer@v2' \(the run has 'reviewer@v3-gepa'\); D 'reviewer@v1' "
                                          r"\(the run has 3 versions\)"):
        resume_compare_config(run_dir, {"ref_c": "reviewer@v2", "ref_d": "reviewer@v1"})
    resumed = run_compare(resume_compare_config(run_dir, {"ref_a": "reviewer@v1", "max_cost": 3 * total}),
                          resume=run_dir)
    asked = {w.examples[w._which("\n".join(str(m.get("content")) for m in r.body["messages"]))].id
             for r in server.chat_requests}
    assert asked and not asked & finished_c, "C's finished examples were asked again"
    reviews = [r.instructions for r in _requests(server) if isinstance(r, ReviewRequest)]
    assert reviews and all(V3_MARKER in text for text in reviews), "a finished pass (A or B) was asked again"
    assert resumed.summary.stopped is None and resumed.summary.matched == LIMIT
    assert _pairs(resumed.summary) == _pairs(full.summary)
    assert [p.name for p in (run_dir / "c").iterdir()] == [c_dir.name]


def test_cost_cap_before_any_call_fits_is_one_clear_error(world, prompts, tmp_path: Path,  # noqa: ANN001
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price",
                        lambda spec: ModelPrice(2.5e-6, 1e-5, 1.25e-6, max_output_tokens=400))
    _, server = world
    with pytest.raises(CostCapReached, match="--max-cost"):
        run_compare(_config(server, tmp_path, max_cost=1e-6))
    run_dir = next((tmp_path / "runs").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
