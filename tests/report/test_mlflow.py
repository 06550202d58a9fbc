"""MLflow for real: ``prompts push --mlflow`` into MLflow's prompt registry, read back with
``mlflow.genai.load_prompt``; ``--mlflow`` on evaluate, compare, optimize and tune logging each run
(and the runs nested in it) into a local sqlite tracking store, on the scripted server. No API key in
the environment reaches the store."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.cli import main
from saag_opt.report.mlflow_log import MlflowTarget, outermost, scrub, tracking_uri
from saag_opt.runfiles import read_costs, read_run
from saag_opt.testing import ScriptedOpenAIServer
from tests.conftest import requires
from tests.optimize import optimize_world

pytestmark = pytest.mark.integration
needs_mlflow = requires(None if importlib.util.find_spec("mlflow") else
                        "mlflow is not installed (pip install 'saag-opt[mlflow]')")

SECRET = "sk-h2-test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store for the module (creating MLflow's tables takes seconds); one experiment per test."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def client(store: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    import mlflow  # noqa: PLC0415 - optional: the mlflow extra

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", request.node.name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)  # what mlflow.genai.load_prompt reads
    return mlflow.MlflowClient(tracking_uri=store, registry_uri=store)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    dataset, prompts = optimize_world.write_world(tmp_path)
    PromptStore(prompts).save(PromptVersion(version="v1", program="reviewer", instructions={
        "review": f"{optimize_world.KEYWORD}: check the values.", "select": "Pick.", "grade": "Grade."}))
    monkeypatch.setenv("SAAG_OPT_PROMPTS", prompts)
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    with ScriptedOpenAIServer(optimize_world.handler) as server:
        yield SimpleNamespace(dataset=dataset, prompts=prompts, spec=f"fake@{server.url}", runs=tmp_path / "runs",
                              server=server)


def _cli(args: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code in (0, None)


def _logged(client: Any, name: str) -> list[Any]:
    experiment = client.get_experiment_by_name(name)
    return client.search_runs([experiment.experiment_id], max_results=1000) if experiment else []


def _by_dir(runs: list[Any]) -> dict[Path, Any]:
    return {Path(r.data.tags["saag_opt.run_dir"]): r for r in runs}


def _assert_tree(runs: list[Any], top: Path) -> Any:
    """One MLflow run per run directory under ``top``, each the child of its nearest enclosing run's."""
    dirs = {p.parent.resolve() for p in top.rglob("run.json")}
    by_dir = _by_dir(runs)
    assert set(by_dir) == dirs
    for path, run in by_dir.items():
        enclosing = next((p for p in path.parents if p in dirs), None)
        expected = by_dir[enclosing].info.run_id if enclosing is not None else None
        assert run.data.tags.get("mlflow.parentRunId") == expected, path
    return by_dir[top.resolve()]


def _artifact(client: Any, run: Any, name: str, tmp_path: Path) -> bytes:
    return Path(client.download_artifacts(run.info.run_id, name, str(tmp_path))).read_bytes()


def _store_bytes(store: str) -> list[tuple[Path, bytes]]:
    folder = Path(store.removeprefix("sqlite:///")).parent
    return [(p, p.read_bytes()) for p in folder.rglob("*") if p.is_file()]


# -- the prompt registry ---------------------------------------------------------------------------


@needs_mlflow
def test_push_registers_each_predictor_and_load_prompt_returns_it_byte_identical(
        client: Any, store: str, tmp_path: Path) -> None:
    import mlflow  # noqa: PLC0415 - optional: the mlflow extra

    prompts = PromptStore(tmp_path / "prompts")
    review = "Review the {{calls}} \u2014 carefully.\n\tKeep  two spaces, and a trailing newline.\n"
    v1 = prompts.save(PromptVersion(version="v1", program="pushed", instructions={"review": review, "select": "Pick."}))
    prompts.save(PromptVersion(version="v2", program="pushed", parents=["v1"],
                               instructions={"review": review + "And more.", "select": "Pick."}))
    prompts.alias("pushed", "production", "v1")
    _cli(["prompts", "push", "pushed@production", "--mlflow", store, "--store", str(prompts.root)])

    loaded = mlflow.genai.load_prompt("prompts:/pushed-review@production")
    assert loaded.template == review and loaded.version == 1
    assert mlflow.genai.load_prompt("prompts:/pushed-select/1").template == "Pick."
    tags = loaded.tags
    assert (tags["saag_opt.sha256"], tags["saag_opt.version"], tags["saag_opt.predictor"]) == (v1.sha256, "v1", "review")
    assert tags["saag_opt.program"] == "pushed" and tags["saag_opt.source"] == "manual"

    _cli(["prompts", "push", "pushed@v1", "--mlflow", store, "--store", str(prompts.root)])  # same content: no new version
    assert len(client.search_prompt_versions("pushed-review")) == 1

    prompts.alias("pushed", "production", "v2")
    _cli(["prompts", "push", "pushed@production", "--mlflow", store, "--store", str(prompts.root)])
    moved = mlflow.genai.load_prompt("prompts:/pushed-review@production", cache_ttl_seconds=0)
    assert moved.version == 2 and moved.template == review + "And more." and moved.tags["saag_opt.parents"] == "v1"
    assert mlflow.genai.load_prompt("prompts:/pushed-review/1").template == review  # v1 stays as it was


@needs_mlflow
def test_an_alias_mlflow_cannot_hold_is_one_line_before_anything_is_registered(
        client: Any, store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = PromptStore(tmp_path / "prompts")
    prompts.save(PromptVersion(version="v1", program="refused", instructions={"review": "Review."}))
    prompts.alias("refused", "latest", "v1")
    with pytest.raises(SystemExit) as info:
        main(["prompts", "push", "refused@v1", "--mlflow", store, "--store", str(prompts.root)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "alias 'latest' of refused@v1 cannot be an MLflow alias" in err[0]
    assert client.get_prompt("refused-review") is None


# -- runs ------------------------------------------------------------------------------------------


@needs_mlflow
def test_evaluate_logs_config_metrics_and_artifacts_and_no_key(
        client: Any, store: str, world: SimpleNamespace, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    _cli(["evaluate", "--base", world.spec, "--reviewer", world.spec, "--mechanism", "r1", "--dataset", world.dataset,
          "--split", "test", "--prompt", "reviewer@v1", "--runs-dir", str(world.runs), "--mlflow", store])
    (run_dir,) = world.runs.iterdir()
    (logged,) = _logged(client, request.node.name)
    run = read_run(run_dir)
    summary, costs = run.summary, read_costs(run_dir)
    params, metrics, tags = logged.data.params, logged.data.metrics, logged.data.tags
    assert (params["mechanism"], params["prompt"], params["models.base"]) == ("r1", "reviewer@v1", world.spec)
    assert params["dataset.split"] == "test" and int(params["dataset.n"]) == summary.n_examples == 4
    assert metrics["accuracy"] == summary.reviewed.accuracy and metrics["base_accuracy"] == summary.base.accuracy
    assert metrics["help"] == summary.help_harm.helpfulness == 1.0 and metrics["harm"] == summary.help_harm.harmfulness
    assert metrics["cost_usd"] == costs["roles"]["total"]["dollars"] and metrics["lm_calls"] > 0
    assert metrics["seconds_per_item"] == pytest.approx(summary.latency.final_mean_seconds)
    assert (tags["saag_opt.verb"], tags["saag_opt.run_id"], logged.info.status) == ("evaluate", run_dir.name, "FINISHED")
    for name in ("report.html", "summary.json", "run.json"):
        assert _artifact(client, logged, name, tmp_path / name) == (run_dir / name).read_bytes()
    assert not [path for path, data in _store_bytes(store) if SECRET.encode() in data]


@needs_mlflow
def test_logging_a_run_again_updates_its_mlflow_run_and_masks_secrets(
        client: Any, store: str, world: SimpleNamespace, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _cli(["evaluate", "--base", world.spec, "--mechanism", "none", "--dataset", world.dataset, "--split", "test",
          "--runs-dir", str(world.runs), "--mlflow", store])
    (run_dir,) = world.runs.iterdir()
    (first,) = _logged(client, request.node.name)
    # A key that found its way into the run's files (a config note, a URL with a password) is masked on the way.
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    header = json.loads((run_dir / "run.json").read_text())
    header["config"]["note"] = f"key {SECRET} and http://user:hunter2-password@db.example/x"
    (run_dir / "run.json").write_text(json.dumps(header))
    (logged,) = MlflowTarget(store).log_runs([run_dir])
    assert (logged.run_id, logged.new) == (first.info.run_id, False)
    (again,) = _logged(client, request.node.name)
    assert again.data.params["note"] == "key *** and http://user:***@db.example/x"
    assert again.data.params["mechanism"] == "none"
    masked = _artifact(client, again, "run.json", tmp_path / "run").decode()
    assert SECRET not in masked and "hunter2-password" not in masked and "***" in masked
    assert not [path for path, data in _store_bytes(store) if SECRET.encode() in data or b"hunter2-password" in data]
    monkeypatch.delenv("OPENAI_API_KEY")  # a URL's password is masked with no secret in the environment too
    header["config"]["note"] = "http://user:hunter2-password@db.example/x"
    (run_dir / "run.json").write_text(json.dumps(header))
    MlflowTarget(store).log_runs([run_dir])
    assert "hunter2-password" not in _artifact(client, again, "run.json", tmp_path / "run2").decode()


@needs_mlflow
def test_compare_is_a_parent_run_with_its_passes_nested(
        client: Any, store: str, world: SimpleNamespace, request: pytest.FixtureRequest) -> None:
    _cli(["compare", "reviewer@v2", "reviewer@v1", "--base", world.spec, "--reviewer", world.spec, "--mechanism",
          "r1", "--dataset", world.dataset, "--split", "test", "--runs-dir", str(world.runs), "--mlflow", store])
    (run_dir,) = world.runs.iterdir()
    runs = _logged(client, request.node.name)
    top = _assert_tree(runs, run_dir)
    assert len(runs) == 4  # the compare and its three passes (base, a, b)
    summary = read_run(run_dir, header_only=True).summary
    metrics = top.data.metrics
    a, b = summary.sides
    assert metrics["a.accuracy"] == a.accuracy.accuracy and metrics["b.accuracy"] == b.accuracy.accuracy
    assert metrics["b.help"] == b.help_harm.helpfulness == 1.0 and metrics["a.help"] == 0.0
    (pair,) = summary.pairs
    assert metrics["b_vs_a.mcnemar_p"] == pair.mcnemar_p and metrics["b_vs_a.holm_p"] == pair.holm_p
    assert top.data.tags["saag_opt.verb"] == "compare"
    assert {r.data.tags["saag_opt.verb"] for r in runs if r is not top} == {"evaluate"}


@needs_mlflow
def test_optimize_logs_the_gepa_run_and_its_test_comparison(
        client: Any, store: str, world: SimpleNamespace, request: pytest.FixtureRequest) -> None:
    _cli(["optimize", "--base", world.spec, "--reviewer", world.spec, "--dataset", world.dataset, "--mechanism", "r1",
          "--max-metric-calls", "30", "--workers", "2", "--runs-dir", str(world.runs), "--store", world.prompts,
          "--mlflow", store])
    (run_dir,) = world.runs.iterdir()
    runs = _logged(client, request.node.name)
    top = _assert_tree(runs, run_dir)
    summary = read_run(run_dir, header_only=True).summary
    metrics = top.data.metrics
    assert metrics["best_val_score"] == max(summary.val_scores) > metrics["seed_val_score"] == summary.val_scores[0]
    best = summary.test.comparison.sides[1]
    assert metrics["test.b.accuracy"] == best.accuracy.accuracy and metrics["test.b.help"] == 1.0
    assert top.data.params["prompt"] == "reviewer@v2" and top.data.tags["saag_opt.verb"] == "optimize"
    assert "compare" in {r.data.tags["saag_opt.verb"] for r in runs}


@needs_mlflow
def test_tune_logs_each_trial_as_a_child_run_with_its_objectives(
        client: Any, store: str, world: SimpleNamespace, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    space = tmp_path / "space.toml"
    space.write_text(f'[fixed]\nbase = "{world.spec}"\nreviewer = "{world.spec}"\ndataset = "{world.dataset}"\n'
                     'prompt = "reviewer@v1"\nretry_base_delay = 0.01\n[search]\nmechanism = ["r1", "gate+r1"]\n',
                     encoding="utf-8")
    _cli(["tune", "--space", str(space), "--sampler", "grid", "--no-test", "--runs-dir", str(world.runs),
          "--mlflow", store])
    (run_dir,) = world.runs.iterdir()
    runs = _logged(client, request.node.name)
    top = _assert_tree(runs, run_dir)
    assert top.data.metrics["trials.complete"] == 2 and top.data.params["sampler"] == "grid"
    by_dir = _by_dir(runs)
    trials = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 2
    for trial in trials:
        logged = by_dir[Path(trial["run_dir"]).resolve()]
        assert logged.data.params["mechanism"] == trial["params"]["mechanism"]
        assert (logged.data.metrics["help"], logged.data.metrics["harm"]) == (trial["values"]["help"],
                                                                              trial["values"]["harm"])


# -- errors before any LM call ---------------------------------------------------------------------


def test_without_mlflow_installed_the_flag_is_one_line_before_the_run(
        world: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow -> ImportError
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--base", world.spec, "--mechanism", "none", "--dataset", world.dataset,
              "--runs-dir", str(world.runs), "--mlflow", str(tmp_path / "m.db")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --mlflow needs MLflow") and "saag-opt[mlflow]" in err[0]
    assert not world.runs.exists() and world.server.requests == []


@needs_mlflow
def test_a_store_mlflow_cannot_open_fails_before_the_run(
        world: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--base", world.spec, "--mechanism", "none", "--dataset", world.dataset,
              "--runs-dir", str(world.runs), "--mlflow", "bogus://user:hunter2-password@host/x"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --mlflow bogus://user:***@host/x: cannot open the store")
    assert "hunter2-password" not in err[0]
    assert not world.runs.exists() and world.server.requests == []


# -- the pieces, without MLflow ---------------------------------------------------------------------


def test_uri_runs_and_masking_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert tracking_uri("store/m.db") == f"sqlite:///{(Path.cwd() / 'store/m.db').resolve()}"
    assert tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    outer, inner, other = tmp_path / "a", tmp_path / "a" / "base" / "b", tmp_path / "c"
    assert outermost([inner, outer, other, outer]) == [outer.resolve(), other.resolve()]
    assert scrub(f"k={SECRET} url=https://u:pw-1234@h/x?api_key=abc&n=1", [SECRET]) == \
        "k=*** url=https://u:***@h/x?api_key=***&n=1"
