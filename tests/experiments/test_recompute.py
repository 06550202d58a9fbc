"""The published experiment numbers are what their committed run records say.

``experiments/results/<name>.json`` must equal ``experiments/recompute.py``'s output from the
compressed records beside it (so nobody can edit a table by hand), and nothing committed under
``experiments/results/`` may carry a machine path.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from saag_opt.agents.base import BasePredictionCache, Proposal
from saag_opt.atomic import JsonShelf
from saag_opt.data.tau2_package import missing as tau2_missing
from saag_opt.evaluation.helpharm import mcnemar_exact
from saag_opt.evaluation.results import ExampleRecord
from saag_opt.model import Prediction, ToolCall
from saag_opt.runfiles import RunHeader
from tests.conftest import requires

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "recompute.py"
RESULTS = ROOT / "experiments" / "results"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("experiments_recompute", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recompute = _load()


def _published() -> list[Any]:
    """Each published experiment; one with tau2 groups needs the tau2 package to read its task records."""
    out = []
    for path in sorted(RESULTS.glob("*.json")):
        needs_tau2 = recompute.TAU2_CATEGORY in path.read_text(encoding="utf-8")
        out.append(pytest.param(path.stem, marks=requires(tau2_missing() if needs_tau2 else None)))
    return out


PUBLISHED = _published()


def test_results_are_published() -> None:
    assert "exp1" in [p.values[0] for p in PUBLISHED], "experiment 1's results are missing from experiments/results/"


@pytest.mark.parametrize("name", PUBLISHED)
def test_committed_json_matches_the_records(name: str) -> None:
    committed = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    assert committed["groups"], f"{name}.json has no results"
    assert json.loads(json.dumps(recompute.recompute(name))) == committed


@pytest.mark.parametrize("name", PUBLISHED)
def test_committed_markdown_matches_the_records(name: str) -> None:
    data = json.loads(json.dumps(recompute.recompute(name)))
    assert (RESULTS / f"{name}.md").read_text(encoding="utf-8") == recompute.render(data)


def test_no_machine_paths_are_committed() -> None:
    for path in sorted(RESULTS.rglob("*")):
        if not path.is_file():
            continue
        text = (gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz"
                else path.read_text(encoding="utf-8"))
        for root in recompute.PRIVATE_ROOTS:
            assert root not in text, f"{path.relative_to(ROOT)} contains a machine path ({root})"


def test_detectable_effect_matches_mcnemar() -> None:
    d = recompute.min_discordant()
    assert mcnemar_exact(d, 0) < 0.05 <= mcnemar_exact(d - 1, 0)
    k = recompute.min_split(20)
    assert mcnemar_exact(k, 20 - k) < 0.05 <= mcnemar_exact(k - 1, 21 - k)
    assert recompute.min_split(5) is None


def test_wilson_interval_brackets_the_rate() -> None:
    low, high = recompute.wilson(10, 10)
    assert high == 1.0 and 0.69 < low < 0.73  # the textbook 95% Wilson bound for 10/10 is 0.722
    low, high = recompute.wilson(5, 10)
    assert low < 0.5 < high and abs((0.5 - low) - (high - 0.5)) < 1e-12


def _record(example: str, condition: str, correct: bool, **extra: Any) -> dict[str, Any]:
    return ExampleRecord(run_id="r", example_id=example, category="simple_python", condition=condition,
                         correct=correct, **extra).model_dump(mode="json")


def test_collect_strips_paths_and_recomputes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    monkeypatch.setattr(recompute, "RESULTS", results)
    runs = tmp_path / "runs"
    # base: 6 right / 4 wrong; repair fixes 3 and breaks 1.
    outcomes = [(True, True)] * 5 + [(True, False)] + [(False, True)] * 3 + [(False, False)]
    for variant in ("binary", "saag"):
        run = runs / "m" / "registry-5" / variant / "20260101-000000-evaluate"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({
            "run_id": run.name, "verb": "evaluate", "status": "success", "git_revision": "abc",
            "created": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:01:40+00:00",
            "args_passed": {"runs_dir": str(runs / "m")}}))
        rows = [_record(f"e{i}", c, ok) for i, pair in enumerate(outcomes) for c, ok in zip(("base", variant), pair)]
        (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recompute.collect("t", runs, {"load": "1.0"})
    data = json.loads(json.dumps(recompute.recompute("t")))
    group = data["groups"]["m/registry-5"]
    assert [c["accuracy"] for c in group["conditions"]] == [0.6, 0.8, 0.8]
    assert group["vs_base"]["saag"]["fixed"] == 3 and group["vs_base"]["saag"]["broken"] == 1
    assert group["pairwise"][0]["fixed"] == group["pairwise"][0]["broken"] == 0
    assert data["runs"][0]["wall_seconds"] == 100.0
    header = (results / "t" / "m" / "registry-5" / "saag" / "run.json").read_text()
    assert str(tmp_path) not in header and "<path>/m" in header
    first = (results / "t" / "m" / "registry-5" / "saag" / "records.jsonl.gz").read_bytes()
    recompute.collect("t", runs, {})
    assert (results / "t" / "m" / "registry-5" / "saag" / "records.jsonl.gz").read_bytes() == first


def test_a_models_groups_are_pooled_unless_meta_says_pooled_false(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two samples of one model (experiment 5's 320 and its fresh 320) are two tables, not one pool."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    monkeypatch.setattr(recompute, "RESULTS", results)
    for dataset, examples in (("d", ("e0", "e1")), ("d-fresh", ("e2", "e3"))):
        run = runs / "m" / dataset / "saag" / "20260101-000000-evaluate"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({
            "run_id": run.name, "verb": "evaluate", "status": "success", "git_revision": "abc",
            "created": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:01:40+00:00", "args_passed": {}}))
        rows = [_record(e, c, c == "saag") for e in examples for c in ("base", "saag")]
        (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recompute.collect("t", runs, {})
    assert set(recompute.recompute("t")["groups"]) == {"m/d", "m/d-fresh", "m/pooled"}
    recompute.collect("t", runs, {"pooled": "false"})
    assert set(recompute.recompute("t")["groups"]) == {"m/d", "m/d-fresh"}


def test_a_tunes_trials_and_test_runs_are_collected_by_split_model_pair_and_set_up(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A tune run has no records of its own: its trials (val) and its front's test runs, newest per set-up."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    monkeypatch.setattr(recompute, "RESULTS", results)
    tune = runs / "tune" / "20260101-000000-tune"
    tune.mkdir(parents=True)
    (tune / "run.json").write_text(json.dumps({"run_id": tune.name, "verb": "tune", "status": "interrupted",
                                               "created": "2026-01-01T00:00:00+00:00", "args_passed": {}}))
    setups = [("000100", "local:small", "r2"), ("000200", "local", "r2"), ("000300", "local", "gate+r2"),
              ("000400", "local", "r2")]  # a resumed tune: the front's r2 on local again
    for stamp, base, mechanism in setups:
        for where, split in (("test", "test"), ("trials", "val")):
            run = tune / where / f"20260101-{stamp}-evaluate"
            run.mkdir(parents=True)
            (run / "run.json").write_text(json.dumps({
                "run_id": run.name, "verb": "evaluate", "status": "success", "git_revision": "abc",
                "created": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:01:40+00:00", "args_passed": {},
                "config": {"base": base, "reviewer": "local", "mechanism": mechanism, "dataset": "bfcl:single_turn",
                           "split": split, "limit": 40, "runs_dir": str(run.parent), "prompt": "reviewer@v2"}}))
            rows = [_record("e0", c, True) for c in ("base", mechanism)]
            (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    empty = tune / "test" / "20260101-000500-evaluate"  # stopped before its first example: no numbers to take
    empty.mkdir()
    (empty / "run.json").write_text(json.dumps({"run_id": empty.name, "verb": "evaluate", "status": "interrupted",
                                                "created": "2026-01-01T00:00:00+00:00",
                                                "config": {"base": "local:small", "reviewer": "local",
                                                           "mechanism": "saag+s3", "dataset": "bfcl:single_turn",
                                                           "split": "test"}}))
    (empty / "records.jsonl").write_text("")
    recompute.collect("t", runs, {}, partial=True)
    collected = {p.parent.relative_to(results / "t"): json.loads(p.read_text())["run_id"]
                 for p in (results / "t").rglob("run.json")}
    assert collected == {
        Path(f"tune/{split}/{pair}/bfcl_single_turn/mechanism={mechanism}"): f"20260101-{stamp}-evaluate"
        for split in ("test", "val") for stamp, pair, mechanism in (
            ("000100", "local_small+local", "r2"), ("000300", "local+local", "gate+r2"), ("000400", "local+local", "r2"))}


def test_a_run_inside_another_run_is_part_of_it_not_a_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """optimize's test comparison (OUT/m/d/gepa/<optimize>/test/<compare>/a/<evaluate>) repeats its records."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    monkeypatch.setattr(recompute, "RESULTS", results)
    outer = runs / "m" / "d" / "gepa" / "20260101-000000-optimize"
    inner = outer / "test" / "20260101-000100-compare" / "a" / "20260101-000101-evaluate"
    for run in (outer, inner):
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({
            "run_id": run.name, "verb": "evaluate", "status": "success", "git_revision": "abc",
            "created": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:01:40+00:00", "args_passed": {}}))
        (run / "records.jsonl").write_text(json.dumps(_record("e0", "base", True)) + "\n")
    recompute.collect("t", runs, {})
    collected = sorted(p.parent.relative_to(results / "t") for p in (results / "t").rglob("run.json"))
    assert collected == [Path("m/d/gepa")]


def test_strip_paths_masks_machine_paths_but_leaves_urls_in_model_output_alone() -> None:
    """A collected record keeps what the model wrote: an URL argument is data, not a path of this machine
    (exp5's first collect turned ``https://date.nager.at/api`` into ``https:/<path>/api``)."""
    row = {"runs_dir": "/work/main/runs/exp5/r2-v2", "raw": '{"url": "https://date.nager.at/api/v3/holidays"}',
           "note": "see /tmp/x/y.json"}
    out = recompute.strip_paths(row)
    assert out["runs_dir"] == "<path>/r2-v2"
    assert out["raw"] == row["raw"]
    assert out["note"] == "see <path>/y.json"


def test_collect_bundles_the_base_proposals_a_run_wrote_and_restore_puts_them_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A condition added on a new machine replays the base answers an earlier, collected run paid for."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    monkeypatch.setattr(recompute, "RESULTS", results)
    old_machine = tmp_path / "old-cache"
    shelf = JsonShelf(old_machine)
    proposal = Proposal(Prediction((ToolCall("ls", {"a": True}),), raw='{"calls": []}', status="ok"), 2.5, 40, 1)
    BasePredictionCache(old_machine)._store("ab" * 32, proposal)
    shelf.save("cd" * 32, {"calls": [], "raw": "cd /tmp/x", "status": "ok", "seconds": 1.0, "tokens": 1,
                           "attempts": 1, "temperature": 0.0})  # a machine path: never committed
    earlier = shelf.path("ef" * 32)
    shelf.save("ef" * 32, {"calls": [], "raw": "", "status": "ok", "seconds": 1.0, "tokens": 1, "attempts": 1})
    os.utime(earlier, (1.0, 1.0))  # written long before the run started: another run's entry
    run = runs / "m" / "d" / "r2" / "20260101-000000-evaluate"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({
        "run_id": run.name, "verb": "evaluate", "status": "success", "git_revision": "abc",
        "created": "2026-01-01T00:00:00+00:00", "finished": None, "args_passed": {}}))
    (run / "records.jsonl").write_text(json.dumps(_record("e0", "base", True)) + "\n")
    monkeypatch.setattr(recompute, "base_predictions_dir", lambda: old_machine)
    recompute.collect("t", runs, {})
    bundle = results / "t" / "m" / "d" / "r2" / recompute.BASE_BUNDLE
    assert sorted(recompute._read_bundle(bundle)) == ["ab" * 32]
    first = bundle.read_bytes()
    recompute.collect("t", runs, {})
    assert bundle.read_bytes() == first  # collecting again changes nothing

    new_machine = tmp_path / "new-cache"
    assert recompute.restore_base_predictions("t", new_machine) == (1, 0)
    replayed = BasePredictionCache(new_machine)._load("ab" * 32)
    assert replayed is not None and replayed.cached
    assert replayed.prediction == proposal.prediction and replayed.seconds == 2.5 and replayed.tokens == 40
    assert recompute.restore_base_predictions("t", new_machine) == (0, 1)  # never overwritten
    with pytest.raises(SystemExit, match="no experiment 'tt'"):
        recompute.restore_base_predictions("tt", new_machine)


def test_a_damaged_bundle_is_named_with_its_line_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad merge or a truncated download ends --restore-base-cache with file:line, before any write."""
    results = tmp_path / "results"
    monkeypatch.setattr(recompute, "RESULTS", results)
    bundle = results / "t" / "m" / recompute.BASE_BUNDLE
    bundle.parent.mkdir(parents=True)
    good = json.dumps({"key": "ab" * 32, "entry": {"calls": []}})
    cache = tmp_path / "cache"
    for body, where in ((good + "\n{not json\n", ":2: not a base-prediction row"),
                        (good + "\n" + json.dumps({"entry": {}}) + "\n", ":2: not a base-prediction row (no 'key')")):
        bundle.write_bytes(recompute._gzip_bytes(body))
        with pytest.raises(SystemExit, match=re.escape(f"{recompute.BASE_BUNDLE}{where}")):
            recompute.restore_base_predictions("t", cache)
    bundle.write_bytes(recompute._gzip_bytes(good + "\n")[:-6])  # cut short
    with pytest.raises(SystemExit, match="unreadable"):
        recompute.restore_base_predictions("t", cache)
    bundle.write_text(good + "\n")  # not gzip
    with pytest.raises(SystemExit, match=re.escape(f"{recompute.BASE_BUNDLE}:1: unreadable")):
        recompute.restore_base_predictions("t", cache)
    assert not cache.exists() or not any(cache.rglob("*.json"))


def test_a_resumed_run_bundles_what_its_attempts_wrote_not_what_ran_between_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped in one session and resumed days later: another experiment's base answers made on the
    same machine in between are not this run's (they are bundled with their own run)."""
    monkeypatch.setattr(recompute, "RESULTS", tmp_path / "results")
    shelf = JsonShelf(tmp_path / "cache")
    entry = {"calls": [], "raw": "", "status": "ok", "seconds": 1.0, "tokens": 1, "attempts": 1, "temperature": 0.0}
    written = {"aa": "2026-01-01T01:00:00+00:00", "bb": "2026-01-02T12:00:00+00:00", "cc": "2026-01-03T01:00:00+00:00"}
    for key, stamp in written.items():
        shelf.save(key * 32, entry)
        moment = datetime.fromisoformat(stamp).timestamp()
        os.utime(shelf.path(key * 32), (moment, moment))
    run = tmp_path / "runs" / "m" / "d" / "r2" / "20260101-000000-evaluate"
    run.mkdir(parents=True)
    header = {"run_id": run.name, "verb": "evaluate", "status": "success", "git_revision": "abc", "args_passed": {},
              "created": "2026-01-01T00:00:00+00:00", "finished": "2026-01-03T02:00:00+00:00",
              "resumes": [{"at": "2026-01-03T00:00:00+00:00", "previous_end": "2026-01-01T02:00:00+00:00"}]}
    (run / "run.json").write_text(json.dumps(header))
    (run / "records.jsonl").write_text(json.dumps(_record("e0", "base", True)) + "\n")
    monkeypatch.setattr(recompute, "base_predictions_dir", lambda: tmp_path / "cache")
    recompute.collect("t", tmp_path / "runs", {})
    bundle = tmp_path / "results" / "t" / "m" / "d" / "r2" / recompute.BASE_BUNDLE
    assert sorted(recompute._read_bundle(bundle)) == ["aa" * 32, "cc" * 32]

    del header["resumes"][0]["previous_end"]  # an older run.json: the gap cannot be told apart
    spans = recompute.attempt_spans(RunHeader.model_validate(header))
    assert len(spans) == 2 and spans[0][1] > datetime.fromisoformat("2026-01-02T12:00:00+00:00").timestamp()


@pytest.mark.integration
def test_an_optimize_run_without_a_test_phase_is_collected_with_each_candidates_val_help_and_harm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """exp8's GEPA arms run with --no-test: their numbers are the candidates in summary.json, not records."""
    from saag_opt.optimize import run_optimize  # noqa: PLC0415 - only this test runs GEPA
    from saag_opt.testing import ScriptedOpenAIServer  # noqa: PLC0415
    from tests.optimize import optimize_world as world  # noqa: PLC0415

    results = tmp_path / "results"
    monkeypatch.setattr(recompute, "RESULTS", results)
    runs = tmp_path / "out" / "m" / "d-gepa" / "add"
    with ScriptedOpenAIServer(world.handler) as server:
        result = run_optimize(world.config(tmp_path, server, runs_dir=str(runs), evaluate_test=False,
                                           proposer="add", max_metric_calls=24))
    assert not (result.run_dir / "records.jsonl").exists()
    recompute.collect("t", tmp_path / "out", {})
    data = recompute.recompute("t")
    gepa = data["gepa"]["m/d-gepa/add"]
    assert gepa["seed"] == "v2" and gepa["candidates"][0]["candidate"] == 0
    assert any(c["edit"] for c in gepa["candidates"][1:]) and gepa["quarantined"] == 0
    page = recompute.render(data)
    assert "## GEPA runs" in page and world.KEYWORD in page
    moved = [c for c in gepa["candidates"][1:] if c["gained"] or c["lost"]]
    assert moved and all(c["components"] for c in gepa["candidates"][1:])
    assert "### Which component moved val outcomes" in page and gepa["by_component"]

    # a run whose summary predates the per-candidate flips: collection reads them from its gepa state
    summary_file = result.run_dir / "summary.json"
    summary = json.loads(summary_file.read_text())
    for c in summary["candidates"]:
        for key in ("components", "gained", "lost"):
            c.pop(key)
    summary_file.write_text(json.dumps(summary))
    recompute.collect("old", tmp_path / "out", {})
    assert (results / "old" / "m" / "d-gepa" / "add" / recompute.FLIPS_FILE).is_file()
    again = recompute.recompute("old")["gepa"]["m/d-gepa/add"]
    assert again["candidates"] == gepa["candidates"] and again["by_component"] == gepa["by_component"]


def _group(runs_by_variant: dict[str, list[tuple[bool, bool]]]) -> dict[str, list[ExampleRecord]]:
    """Variant -> its run's records (base and the variant's condition) from (base right, variant right) pairs."""
    return {variant: [ExampleRecord.model_validate(_record(f"e{i}", c, ok)) for i, pair in enumerate(pairs)
                      for c, ok in zip(("base", variant), pair)] for variant, pairs in runs_by_variant.items()}


def test_the_pre_registered_questions_are_paired_and_holm_corrected() -> None:
    """exp8: GEPA's best against its seed and against abstain, B against A, Holm over the two asked."""
    base = [False] * 30 + [True] * 10
    abstain, seed, best = [True] * 20 + [False] * 20, [True] * 21 + [False] * 19, [True] * 34 + [False] * 6
    group = _group({"abstain": list(zip(base, abstain)), "informed-v2": list(zip(base, seed)),
                    "add-informed-v5": list(zip(base, best))})
    gepa = {"m/bfcl_single_turn-gepa/add-informed": {"seed": "v2", "best": "v5"}}
    q1, q2 = recompute.confirmatory("exp8", {"m/bfcl_single_turn-primary": group}, gepa)
    assert (q1["a"], q1["b"], q1["fixed"], q1["broken"]) == ("informed-v2", "add-informed-v5", 13, 0)
    assert (q2["a"], q2["b"], q2["fixed"], q2["broken"]) == ("abstain", "add-informed-v5", 14, 0)
    assert q2["holm_p"] == pytest.approx(2 * mcnemar_exact(14, 0)) and q1["holm_p"] == pytest.approx(q1["mcnemar_p"] * 1)
    assert q1["significant"] and q2["significant"]


def test_a_best_that_stayed_the_seed_is_a_null_answer_and_the_seed_meets_abstain() -> None:
    group = _group({"abstain": [(False, True), (True, True)], "informed-v2": [(False, True), (True, False)]})
    gepa = {"m/g/add-informed": {"seed": "v2", "best": "v2"}}
    q1, q2 = recompute.confirmatory("exp8", {"m/bfcl_single_turn-primary": group}, gepa)
    assert q1["status"].startswith("null: no candidate cleared the val margin") and "holm_p" not in q1
    assert (q2["b"], q2["status"], q2["broken"]) == ("informed-v2", "answered", 1)
    pending = recompute.confirmatory("exp8", {"m/bfcl_single_turn-primary": group}, {})
    assert [q["status"] for q in pending] == ["pending", "pending"]
    assert recompute.confirmatory("exp5", {}, {}) is None
