"""``saag-opt compare`` against a scripted server: two prompt versions whose reviewer behaves differently."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.cli import main
from saag_opt.compare.comparison import CompareSummary
from saag_opt.compare.run import CompareConfig, detect_mode, parse_side, resume_compare_config, run_compare
from saag_opt.compare.sides import RunRef
from saag_opt.data import load_dataset
from saag_opt.errors import ArtifactError, ConfigError, CostCapReached
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluation.helpharm import mcnemar_exact
from saag_opt.evaluation.results import read_run
from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.model import Example
from saag_opt.testing import Reply, ScriptedOpenAIServer, ScriptedWorld, read_request
from saag_opt.testing.scripted_world import BaseRequest, Request, ReviewRequest
from tests.evaluate.scripted_replies import right, wrong

pytestmark = pytest.mark.integration

DATASET, SPLIT, LIMIT = "shipped:bfcl", "test", 12
MARKER = "v2 marker"


@pytest.fixture
def prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PromptStore:
    """A private store: v1 approves everything (scripted), v2 carries the marker the server reacts to."""
    store = PromptStore(tmp_path / "prompts")
    store.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "Review the calls."}))
    store.save(PromptVersion(version="v2", program="reviewer", parents=["v1"],
                             instructions={"review": f"Review the calls carefully ({MARKER})."}))
    store.alias("reviewer", "production", "v2")  # (an aliases file also sidesteps a KeyError in resolve)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(store.root))
    return store


@pytest.fixture
def examples() -> list[Example]:
    return load_dataset(DATASET, split=SPLIT, limit=LIMIT)


def _requests(server: ScriptedOpenAIServer) -> list[Request]:
    """The server's chat requests, each with the role it came from."""
    return [read_request(r.body or {}) for r in server.chat_requests]


class World(ScriptedWorld):
    """Base wrong on every 3rd example. Reviewer v1 approves everything. Reviewer v2 (its instructions
    have the marker) rejects wrong calls (the revision is right: a fix) and raises a false alarm on every
    4th+1 right call (after any feedback the base answers wrong: a break)."""

    def __init__(self, examples: list[Example]) -> None:
        super().__init__()
        self.examples = examples

    def wrong_base(self, i: int) -> bool:
        return i % 3 == 0

    def false_alarm(self, i: int) -> bool:
        return i % 4 == 1 and not self.wrong_base(i)

    def _which(self, text: str) -> int:
        hits = [i for i, ex in enumerate(self.examples) if ex.query and ex.query in text]
        return max(hits, key=lambda i: len(self.examples[i].query))

    def base(self, request: BaseRequest) -> Reply:
        i = self._which(request.text)
        example = self.examples[i]
        if not request.revising:
            return wrong(example) if self.wrong_base(i) else right(example)
        return wrong(example) if self.false_alarm(i) else right(example)

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        if MARKER not in request.instructions:
            return False, ""
        i = self._which(request.text)
        example = self.examples[i]
        tentative = request.tentative_calls
        looks_wrong = ("cannot help" in tentative) if example.expect != "no_call" else ("no function call" not in tentative)
        return looks_wrong or self.false_alarm(i), "Please fix the call."


@pytest.fixture
def world(examples: list[Example]) -> Iterator[tuple[World, ScriptedOpenAIServer]]:
    w = World(examples)
    with ScriptedOpenAIServer(w) as server:
        yield w, server


def _config(server: ScriptedOpenAIServer, tmp_path: Path, a: str = "reviewer@v1", b: str = "reviewer@v2",
            **overrides: Any) -> CompareConfig:
    values: dict[str, Any] = dict(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2",
                                  dataset=DATASET, split=SPLIT, limit=LIMIT, workers=4, runs_dir=tmp_path / "unused",
                                  cache_dir=tmp_path / "cache", retry_base_delay=0.01)
    settings = EvaluateConfig(**(values | overrides))
    return CompareConfig(a=a, b=b, evaluation=settings, runs_dir=tmp_path / "runs")


def _expected(w: World, n: int) -> tuple[int, int, int]:
    wrong_base = sum(w.wrong_base(i) for i in range(n))
    alarms = sum(w.false_alarm(i) for i in range(n))
    return wrong_base, alarms, n


def test_two_prompt_versions_side_by_side(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    w, server = world
    result = run_compare(_config(server, tmp_path))
    fixed, broken, n = _expected(w, LIMIT)
    assert fixed >= 2 and broken >= 2
    s = result.summary
    assert s.mode == "prompts" and s.matched == n and s.only_a == s.only_b == 0 and s.base_disagreements == 0
    assert s.base.accuracy == pytest.approx(1 - fixed / n)
    # A (v1) approves everything: identical to base, no help, no harm.
    assert s.a.label == "v1" and s.a.condition == "r2@v1" and s.a.accuracy.accuracy == s.base.accuracy
    assert (s.a.help_harm.fixed, s.a.help_harm.broken, s.a.help_harm.ratio) == (0, 0, None)
    assert s.a.reviewer_calls_per_item == 1.0
    # B (v2) fixes every wrong base call and breaks every false alarm.
    assert s.b.accuracy.accuracy == pytest.approx(1 - broken / n)
    assert (s.b.help_harm.fixed, s.b.help_harm.broken) == (fixed, broken)
    assert s.b.help_harm.helpfulness == 1.0 and s.b.help_harm.harmfulness == pytest.approx(broken / (n - fixed))
    # Paired A vs B: B's gains are the fixes, its losses the false alarms.
    p = s.paired
    assert (p.n, p.b_only_right, p.a_only_right, p.both_right, p.both_wrong) == (n, fixed, broken, n - fixed - broken, 0)
    assert p.net_change == pytest.approx((fixed - broken) / n)
    assert p.mcnemar_p == pytest.approx(mcnemar_exact(fixed, broken))
    assert p.net_change_ci95 is not None and p.net_change_ci95[0] <= p.net_change <= p.net_change_ci95[1]
    # Costs: the base pass paid every first call; the versions only their reviews and revisions.
    assert s.a.tokens > 0 and s.b.tokens > s.a.tokens
    assert s.a.costs is not None and s.b.costs is not None
    assert s.a.costs["roles"].get("base", {}).get("calls", 0) == 0  # v1 never asks for a revision
    assert s.b.costs["roles"]["base"]["calls"] == fixed + 2 * broken  # revisions only: a break is rejected twice
    assert s.base_costs is not None and s.base_costs["roles"]["base"]["calls"] == n
    assert s.a.latency.overhead_x is not None and s.b.latency.final_mean_seconds is not None


def test_base_agent_is_called_once_per_example_across_both_versions(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    w, server = world
    run_compare(_config(server, tmp_path))
    requests = _requests(server)
    first_calls = [r for r in requests if isinstance(r, BaseRequest) and not r.revising]
    assert len(first_calls) == LIMIT
    fixed, broken, _ = _expected(w, LIMIT)
    reviews = [r for r in requests if r.role == "review"]
    # v1: one review each; v2: one review for kept-right, two for fixes and for breaks (r2).
    assert len(reviews) == LIMIT + (LIMIT - fixed - broken) + 2 * (fixed + broken)


def test_compare_run_directory_layout(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    result = run_compare(_config(server, tmp_path))
    run_dir = result.run_dir
    assert run_dir.parent == tmp_path / "runs" and re.fullmatch(r"\d{8}-\d{6}-compare", run_dir.name)
    assert {p.name for p in run_dir.iterdir()} == {"a", "b", "base", "costs.json", "records.jsonl", "run.json",
                                                   "summary.json"}
    header = json.loads((run_dir / "run.json").read_text())
    assert header["verb"] == "compare" and header["status"] == "success" and header["config"]["mode"] == "prompts"
    assert header["plugins"]["prompts"]["b"]["ref"] == "reviewer@v2" and header["dataset"]["n"] == LIMIT
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert sorted({r["condition"] for r in rows}) == ["base", "r2@v1", "r2@v2"] and len(rows) == 3 * LIMIT
    assert all(r["run_id"] == run_dir.name for r in rows)
    assert CompareSummary.model_validate_json((run_dir / "summary.json").read_text()) == result.summary
    costs = json.loads((run_dir / "costs.json").read_text())
    assert set(costs["parts"]) == {"base", "a", "b"}
    assert costs["roles"]["reviewer"]["calls"] == sum(
        costs["parts"][k]["roles"].get("reviewer", {}).get("calls", 0) for k in ("a", "b"))
    for sub in ("base", "a", "b"):
        (evaluate_dir,) = (run_dir / sub).iterdir()
        assert read_run(evaluate_dir, header_only=True).header.status == "success"


def test_comparing_finished_runs_makes_no_lm_call(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    w, server = world
    fresh = run_compare(_config(server, tmp_path))
    (dir_a,), (dir_b,) = (fresh.run_dir / "a").iterdir(), (fresh.run_dir / "b").iterdir()
    server.reset()
    offline = run_compare(CompareConfig(a=str(dir_a), b=str(dir_b), runs_dir=tmp_path / "runs"))
    assert server.requests == []
    s, f = offline.summary, fresh.summary
    assert s.mode == "runs" and s.matched == LIMIT and s.a.label.endswith(dir_a.name) and s.a.label != s.b.label
    assert s.paired.model_dump() == f.paired.model_dump()
    assert s.a.help_harm == f.a.help_harm and s.b.help_harm == f.b.help_harm and s.b.costs == f.b.costs
    rows = [json.loads(line) for line in (offline.run_dir / "records.jsonl").read_text().splitlines()]
    assert sorted({r["condition"] for r in rows}) == ["base", f"r2@{s.a.label}", f"r2@{s.b.label}"]
    # A compare run is itself a valid input; #CONDITION picks a side, the default is its last condition.
    again = run_compare(CompareConfig(a=f"{fresh.run_dir}#r2@v1", b=str(fresh.run_dir), runs_dir=tmp_path / "runs"))
    assert server.requests == []
    assert again.summary.paired.model_dump() == f.paired.model_dump() and again.summary.b.condition == "r2@v2"
    assert again.summary.b.costs == f.b.costs
    assert any("using 'r2@v2'" in note for note in again.summary.notes)


def _retagged_run(source: Path, target: Path, prefix: str) -> Path:
    """A copy of a run whose example ids no longer match the original (as if from another dataset)."""
    shutil.copytree(source, target)
    rows = [json.loads(line) for line in (target / "records.jsonl").read_text().splitlines()]
    (target / "records.jsonl").write_text("".join(
        json.dumps(r | {"example_id": prefix + r["example_id"]}) + "\n" for r in rows))
    return target


def test_runs_without_common_examples_are_refused(world, prompts, tmp_path: Path) -> None:  # noqa: ANN001
    _, server = world
    fresh = run_compare(_config(server, tmp_path))
    (dir_a,) = (fresh.run_dir / "a").iterdir()
    other = _retagged_run(dir_a, tmp_path / "elsewhere" / "20990101-000000-evaluate", "other-")
    with pytest.raises(ConfigError, match=r"nothing to compare: A \(.*, 12 examples\) and B \(.*, 12 examples\) "
                                          r"have no example id in common"):
        run_compare(CompareConfig(a=str(dir_a), b=str(other), runs_dir=tmp_path / "runs"))
    with pytest.raises(ConfigError, match=r"no reviewed condition 'r9' in records.jsonl; available: \['r2'\]"):
        run_compare(CompareConfig(a=f"{dir_a}#r9", b=str(other), runs_dir=tmp_path / "runs"))


def test_argument_detection(tmp_path: Path) -> None:
    run = tmp_path / "20260101-000000-evaluate"
    run.mkdir()
    (run / "run.json").write_text("{}")
    assert parse_side(str(run)) == RunRef(run) and parse_side(f"{run}#r2@v1") == RunRef(run, "r2@v1")
    assert parse_side("reviewer@v2") == "reviewer@v2"
    assert detect_mode(str(run), str(run))[0] == "runs" and detect_mode("reviewer@v1", "reviewer@v2")[0] == "prompts"
    with pytest.raises(ConfigError, match=r"cannot compare run directory '.*evaluate' with prompt reference "
                                          r"'reviewer@v2'"):
        detect_mode("reviewer@v2", str(run))
    with pytest.raises(ConfigError, match="is a directory but has no run.json"):
        parse_side(str(tmp_path))


def test_prompt_mode_needs_settings_and_known_refs(prompts, tmp_path: Path) -> None:  # noqa: ANN001

    with pytest.raises(ConfigError, match="comparing prompt versions needs the evaluation settings"):
        run_compare(CompareConfig(a="reviewer@v1", b="reviewer@v2", runs_dir=tmp_path / "runs"))
    settings = EvaluateConfig(base="fake", reviewer="fake", limit=1)
    with pytest.raises(ArtifactError, match="v3"):
        run_compare(CompareConfig(a="reviewer@v1", b="reviewer@v3", evaluation=settings, runs_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()  # refused before any run directory is created


def test_cli_prints_tables_and_writes_json(world, prompts, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001

    _, server = world
    out = tmp_path / "compare.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "reviewer@v1", "reviewer@v2", "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}",
              "--split", SPLIT, "--limit", str(LIMIT), "--runs-dir", str(tmp_path / "runs"), "--json", str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    for needle in ("Accuracy: base vs A vs B", "relevance suite", "irrelevance", "Help / harm vs base", "B vs A",
                   "McNemar exact p", "bootstrap 95% CI", "latency overhead", "dollars", "A = v1 (r2"):
        assert needle in printed
    data = json.loads(out.read_text())
    assert list(data) == ["schema_version", "run_id", "mode", "matched", "only_a", "only_b", "base",  # the two-version
                          "base_disagreements", "base_costs", "a", "b", "paired", "notes", "stopped"]  # format, in order
    assert data["schema_version"] == 1
    assert set(data["paired"]) == {"n", "both_right", "b_only_right", "a_only_right", "both_wrong", "a_accuracy",
                                   "b_accuracy", "net_change", "mcnemar_p", "net_change_ci95"}
    for key in ("a", "b"):
        assert {"label", "accuracy", "help_harm", "latency", "tokens", "dollars", "costs"} <= set(data[key])
        assert {"helpfulness", "harmfulness", "ratio", "mcnemar_p"} <= set(data[key]["help_harm"])
        assert {"base_mean_seconds", "final_mean_seconds", "overhead_x", "untimed_replays"} == set(data[key]["latency"])
        assert data[key]["latency"]["untimed_replays"] == 0  # every reply replayed here was timed when first made
    assert set(data["base"]["categories"]) == {ex.category for ex in load_dataset(DATASET, split=SPLIT, limit=LIMIT)}

    compare_dir = Path(data["a"]["run_dir"]).parents[1]
    server.reset()
    with pytest.raises(SystemExit) as exit_info:  # two runs: no model options needed, no LM call
        main(["compare", f"{compare_dir}#r2@v1", f"{compare_dir}#r2@v2", "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 0 and server.requests == []
    assert "B vs A (paired, n = 12)" in capsys.readouterr().out


def test_cli_mixed_arguments_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(run), "reviewer@v2", "--base", "fake"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot compare run directory") and err.count("\n") == 1


def test_max_cost_caps_all_three_passes_together(world, prompts, tmp_path: Path,  # noqa: ANN001
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price",
                        lambda spec: ModelPrice(2.5e-6, 1e-5, 1.25e-6, max_output_tokens=400))
    _, server = world
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-full"))  # a port reused in this pytest session: no hits
    full = run_compare(_config(server, tmp_path))
    total = json.loads((full.run_dir / "costs.json").read_text())["roles"]["total"]["dollars"]
    for cap in (0.85 * total, 0.05 * total):  # stops during B's pass; stops before any call fits
        server.reset()
        monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / f"lm-cache-{cap}"))  # pay again, from scratch
        config = _config(server, tmp_path, max_cost=cap, cache_dir=tmp_path / f"base-cache-{cap}")
        try:
            result = run_compare(config)
        except CostCapReached as exc:  # nothing both versions finished: one clear line, run marked stopped
            assert "--max-cost" in str(exc) and cap < 0.1 * total
            run_dir = sorted((tmp_path / "runs").iterdir())[-1]
        else:
            assert result.summary.stopped and 0 < result.summary.matched < LIMIT
            run_dir = result.run_dir
        spent = sum(json.loads(p.read_text())["roles"]["total"]["dollars"] for p in run_dir.glob("*/*/costs.json"))
        assert spent <= cap and (spent > 0 or cap < 0.1 * total)  # zero overshoot, summed over the passes
        assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"


def test_resume_continues_a_stopped_comparison_in_the_same_run(world, prompts, tmp_path: Path,  # noqa: ANN001
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price",
                        lambda spec: ModelPrice(2.5e-6, 1e-5, 1.25e-6, max_output_tokens=400))
    w, server = world
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-full"))
    full = run_compare(_config(server, tmp_path, cache_dir=tmp_path / "base-cache-full"))
    total = json.loads((full.run_dir / "costs.json").read_text())["roles"]["total"]["dollars"]
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-1"))
    stopped = run_compare(_config(server, tmp_path, max_cost=0.85 * total))  # stops during B's pass
    run_dir = stopped.run_dir
    (b_dir,) = (run_dir / "b").iterdir()
    finished_b = {r.example_id for r in read_run(b_dir).records}
    stopped_spent = json.loads((run_dir / "costs.json").read_text())["roles"]["total"]["dollars"]
    assert stopped.summary.stopped and 0 < len(finished_b) < LIMIT

    shutil.rmtree(tmp_path / "cache")  # empty caches: a request for finished work would reach the server
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache-2"))
    server.reset()
    with pytest.raises(ConfigError, match=r"B 'reviewer@production' \(the run has 'reviewer@v2'\); --mechanism 'r1'"):
        resume_compare_config(run_dir, {"ref_b": "reviewer@production", "mechanism": "r1"})
    config = resume_compare_config(run_dir, {"ref_a": "reviewer@v1", "max_cost": 3 * total})
    resumed = run_compare(config, resume=run_dir)

    assert resumed.run_dir == run_dir and [p.name for p in (run_dir / "b").iterdir()] == [b_dir.name]
    asked = {w.examples[w._which("\n".join(str(m.get("content")) for m in r.body["messages"]))].id
             for r in server.chat_requests}
    assert asked and not asked & finished_b, "B's finished examples were asked again"
    assert not any(MARKER not in r.instructions for r in _requests(server) if isinstance(r, ReviewRequest))
    s, f = resumed.summary, full.summary
    assert s.stopped is None and s.matched == LIMIT and s.paired.model_dump() == f.paired.model_dump()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "success"
    spent = json.loads((run_dir / "costs.json").read_text())["roles"]["total"]["dollars"]
    passes = sum(json.loads(p.read_text())["roles"]["total"]["dollars"] for p in run_dir.glob("*/*/costs.json"))
    assert spent == pytest.approx(passes) and stopped_spent < spent <= 3 * total  # both attempts counted
    for sub in ("base", "a", "b"):
        (evaluate_dir,) = (run_dir / sub).iterdir()
        run = read_run(evaluate_dir)
        assert run.header.status == "success" and len(run.records) == 2 * LIMIT

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["compare", "--resume", str(run_dir), "reviewer@v1", "reviewer@production"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "B 'reviewer@production' (the run has 'reviewer@v2')" in err
    with pytest.raises(SystemExit) as info:
        main(["compare"])
    assert info.value.code == 2 and "compare needs A and B" in capsys.readouterr().err
    offline = run_compare(CompareConfig(a=f"{run_dir}#r2@v1", b=str(run_dir), runs_dir=tmp_path / "runs")).run_dir
    with pytest.raises(SystemExit) as info:  # two finished runs: no LM call to resume
        main(["compare", "--resume", str(offline)])
    assert info.value.code == 2 and "calls no LM and has nothing to resume" in capsys.readouterr().err
