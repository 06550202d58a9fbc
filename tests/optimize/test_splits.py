"""Splits are sacred: GEPA sees train/val only (proved from the server's request log), every GEPA
version records what it was trained and selected on, and evaluate/compare flag a contaminated split."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from saag_opt.artifacts.store import PromptStore, PromptVersion
from saag_opt.cli import main
from saag_opt.data import load_dataset, split_hash
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.events import RunEvent
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.testing.scripted_server import RecordedRequest, ScriptedOpenAIServer
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration

N_TRAIN, N_VAL, N_TEST = 6, 4, 4


@pytest.fixture(autouse=True)
def _private_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh LM and base-prediction caches, so every call of this run reaches the server's log."""
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))


def _cities(split: str) -> set[str]:
    offset = {"train": 0, "val": N_TRAIN, "test": N_TRAIN + N_VAL}[split]
    n = {"train": N_TRAIN, "val": N_VAL, "test": N_TEST}[split]
    return {world._asked_city(e.query) for e in world.make_examples(n, split, offset=offset)}  # type: ignore[misc]


def _mentions(requests: list[RecordedRequest], cities: set[str]) -> set[str]:
    """Which of ``cities`` (whole words) occur anywhere in the requests' bodies."""
    text = "\n".join(json.dumps(r.body) for r in requests)
    return {c for c in cities if re.search(rf"\b{c}\b", text)}


def _is_reflection(request: RecordedRequest) -> bool:
    return world.is_reflection(request.body or {})


def test_gepa_rollouts_and_reflection_never_see_a_test_example(tmp_path: Path) -> None:
    assert len(_cities("train") | _cities("val") | _cities("test")) == N_TRAIN + N_VAL + N_TEST  # one city, one example
    dataset, prompts = world.write_world(tmp_path, N_TRAIN, N_VAL, N_TEST)
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        gepa_requests: list[int] = []  # the log's length when the test phase starts

        def on_event(event: RunEvent) -> None:
            if event.kind == "evaluating" and not gepa_requests:
                gepa_requests.append(len(server.chat_requests))

        result = run_optimize(OptimizeConfig(base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts,
                                             runs_dir=str(tmp_path / "runs"), max_metric_calls=40, workers=2,
                                             mechanism="r1"), on_event=on_event)
        log = server.chat_requests
    assert result.best_version == "v3-gepa" and gepa_requests
    gepa, test_phase = log[:gepa_requests[0]], log[gepa_requests[0]:]
    reflection = [r for r in gepa if _is_reflection(r)]
    assert reflection and len(gepa) > len(reflection)  # rollouts and reflection both happened
    assert _mentions(gepa, _cities("test")) == set()
    assert _mentions(reflection, _cities("test")) == set()
    # The log is able to show a leak: the reflection prompt quotes train examples, rollouts val ones,
    # and the final report (after GEPA) does send every test example.
    assert _mentions(reflection, _cities("train"))
    assert _mentions(gepa, _cities("val")) == _cities("val")
    assert _mentions(test_phase, _cities("test")) == _cities("test")

    version = PromptStore(prompts).get("reviewer", "v3-gepa")
    train = load_dataset(dataset, split="train")
    val = load_dataset(dataset, split="val")
    assert (version.dataset, version.trained_on, version.selected_on) == (dataset, ["train"], ["val"])
    assert version.split_hash == split_hash(train + val)


def _gepa_version(store: PromptStore) -> PromptVersion:
    """A version shaped on train and chosen on val, as optimize saves it."""
    return store.save_new("reviewer", {"review": world.PROPOSED_INSTRUCTION, "select": "Pick the best candidate.",
                                       "grade": "Grade the candidate."},
                          parents=["v2"], source="gepa", dataset="weather", trained_on=["train"], selected_on=["val"])


@pytest.mark.parametrize(("split", "contaminated"), [("val", ["val"]), ("test", []), (None, ["train", "val"])])
def test_evaluate_marks_a_split_the_prompt_was_trained_or_selected_on(
        tmp_path: Path, split: str | None, contaminated: list[str]) -> None:
    dataset, prompts = world.write_world(tmp_path, 2, 2, 2)
    version = _gepa_version(PromptStore(prompts))
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        result = run_evaluation(EvaluateConfig(base=spec, reviewer=spec, prompt=str(PromptStore(prompts).path_of(
            "reviewer", version.version)), mechanism="r1", dataset=dataset, split=split, workers=1,
            runs_dir=tmp_path / "runs"))
    assert result.summary.contaminated == contaminated
    assert json.loads((result.run_dir / "summary.json").read_text())["contaminated"] == contaminated


def test_evaluate_and_compare_tables_warn_about_contamination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    dataset, prompts = world.write_world(tmp_path, 2, 2, 2)
    _gepa_version(PromptStore(prompts))
    monkeypatch.setenv("COLUMNS", "200")
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        common = ["--base", spec, "--reviewer", spec, "--mechanism", "r1", "--dataset", dataset, "--workers", "1",
                  "--runs-dir", str(tmp_path / "runs"), "--store", prompts]
        for argv in (["evaluate", "--prompt", "reviewer@v3-gepa", "--split", "val", "--json", str(tmp_path / "e.json")],
                     ["compare", "reviewer@v2", "reviewer@v3-gepa", "--split", "val", "--json", str(tmp_path / "c.json")],
                     ["evaluate", "--prompt", "reviewer@v3-gepa", "--split", "test"]):
            with pytest.raises(SystemExit) as exit_info:
                main(argv + common)
            assert exit_info.value.code in (0, None)
    printed = " ".join(capsys.readouterr().out.split()).split("Accuracy: base vs")  # titles wrap
    evaluate_val, compare_val, evaluate_test = printed[1:]
    assert "WARNING: reviewer@v3-gepa was trained or selected on val: not a held-out result" in evaluate_val
    assert "WARNING: B (v3-gepa) was trained or selected on val" in compare_val and "WARNING: A" not in compare_val
    assert "WARNING" not in evaluate_test
    assert json.loads((tmp_path / "e.json").read_text())["contaminated"] == ["val"]
    sides = json.loads((tmp_path / "c.json").read_text())
    assert (sides["a"]["contaminated"], sides["b"]["contaminated"]) == ([], ["val"])


def test_comparing_finished_runs_carries_the_contamination_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    dataset, prompts = world.write_world(tmp_path, 2, 2, 2)
    store = PromptStore(prompts)
    version = _gepa_version(store)
    store.alias("reviewer", "prod", version.version)
    monkeypatch.setenv("COLUMNS", "250")
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"

        def evaluate(prompt: str, split: str) -> Path:
            return run_evaluation(EvaluateConfig(base=spec, reviewer=spec, prompt=prompt, mechanism="r1",
                                                 dataset=dataset, split=split, workers=1, runs_dir=runs,
                                                 prompts_dir=Path(prompts))).run_dir

        seed_val, gepa_val = evaluate("reviewer@v2", "val"), evaluate("reviewer@prod", "val")
        seed_test, gepa_test = evaluate("reviewer@v2", "test"), evaluate("reviewer@prod", "test")
        with pytest.raises(SystemExit):
            main(["compare", "reviewer@v2", "reviewer@v3-gepa", "--base", spec, "--reviewer", spec, "--mechanism", "r1",
                  "--dataset", dataset, "--split", "val", "--workers", "1", "--runs-dir", str(runs), "--store", prompts])
    compare_val = max(runs.glob("*-compare"))
    store.alias("reviewer", "prod", "v2")  # the alias moved: the runs' recorded hash still finds v3-gepa
    (gepa_val / "summary.json").write_text(json.dumps(  # an older run had no mark: it is checked, not copied
        {k: v for k, v in json.loads((gepa_val / "summary.json").read_text()).items() if k != "contaminated"}))
    capsys.readouterr()

    def compare(a: str, b: str) -> dict:
        with pytest.raises(SystemExit) as info:
            main(["compare", a, b, "--runs-dir", str(runs), "--json", str(tmp_path / "c.json")])
        assert info.value.code in (0, None)
        return json.loads((tmp_path / "c.json").read_text())

    sides = compare(str(seed_val), str(gepa_val))
    assert (sides["a"]["contaminated"], sides["b"]["contaminated"]) == ([], ["val"])
    printed = " ".join(capsys.readouterr().out.split())
    assert (f"WARNING: B ({gepa_val.name}, prompt reviewer@prod) was trained or selected on val: not a held-out "
            "result") in printed and "WARNING: A" not in printed
    sides = compare(str(gepa_test), str(seed_test))  # held out on test: no mark
    assert (sides["a"]["contaminated"], sides["b"]["contaminated"]) == ([], [])
    assert "WARNING" not in capsys.readouterr().out
    sides = compare(f"{compare_val}#r1@v3-gepa", f"{compare_val}#r1@v2")  # a compare run's sides
    assert (sides["a"]["contaminated"], sides["b"]["contaminated"]) == (["val"], [])
    capsys.readouterr()

    store.path_of("reviewer", version.version).unlink()  # gone from the store: the run's own record is used
    sides = compare(str(seed_val), f"{compare_val}#r1@v3-gepa")
    assert sides["b"]["contaminated"] == ["val"]
    assert any("B: prompt reviewer@v3-gepa is not in the store any more" in n for n in sides["notes"])
