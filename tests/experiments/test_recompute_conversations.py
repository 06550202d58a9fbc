"""experiments/recompute.py on conversation runs: a collected BFCL multi-turn and tau2 experiment recomputes to
what each run's own summary.json says, passes ``--check``, keeps no machine path, and shows the paper beside it.

The runs are real ``saag-opt evaluate`` runs on the scripted server: BFCL's ``multi_turn_base`` (``r2`` and
``gate+r2``) and ``multi_turn_miss_param`` (``r2``), where the agent gets entry 0's first step wrong and the
reviewer rejects it (``test_multiturn_flips.World``); tau2's mock (``r2``, two trials), where the agent
misspells a title and the reviewer has it fixed (``test_tau2_evaluate.world``).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from saag_opt.cli import app
from saag_opt.data.catalog import load_episodes
from saag_opt.data.tau2_package import missing as tau2_missing
from saag_opt.evaluation.conversation_records import EpisodeSummary
from saag_opt.runfiles import read_model
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.conftest import requires
from tests.episodes.world import needs_bfcl
from tests.evaluate.test_multiturn_flips import per_entry_handler
from tests.evaluate.test_tau2_evaluate import world as tau2_world
from tests.experiments.test_recompute import recompute

pytestmark = pytest.mark.integration
needs_tau2 = requires(tau2_missing())

REPO = Path(__file__).resolve().parents[2]
TAG = "fake+fake"
"""The model folder the experiment scripts would make (``OUT/<base>+<reviewer>/<dataset>/<variant>``)."""


def _bfcl_handler(dataset: str) -> Callable[[dict[str, Any]], Reply]:
    """Per entry the flips World: entry 0 starts wrong, the reviewer rejects that."""
    return per_entry_handler(load_episodes(dataset, split=None, limit=2))


def _evaluate(handler: Callable[[dict[str, Any]], Reply], runs_dir: Path, *args: str) -> None:
    with ScriptedOpenAIServer(handler) as server:
        argv = ["evaluate", *args, "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}",
                "--retries", "0", "--runs-dir", str(runs_dir)]
        result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def bfcl_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``OUT`` of a two-dataset BFCL multi-turn experiment: base_ r2 and gate+r2, miss_param r2 (2 entries each)."""
    out = tmp_path_factory.mktemp("exp-bfcl") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
        for dataset, variant in (("multi_turn_base", "r2-v2"), ("multi_turn_base", "gate+r2-v2"),
                                 ("multi_turn_miss_param", "r2-v2")):
            _evaluate(_bfcl_handler(f"bfcl:{dataset}"), out / TAG / f"bfcl_{dataset}" / variant,
                      "--dataset", f"bfcl:{dataset}", "--split", "all", "--limit", "2",
                      "--mechanism", variant.removesuffix("-v2"), "--prompt", "reviewer@v2")
    return out


@pytest.fixture(scope="module")
def tau2_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``OUT`` of a tau2 experiment on mock: r2 with two trials of its first two tasks."""
    out = tmp_path_factory.mktemp("exp-tau2") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
        _evaluate(tau2_world, out / TAG / "tau2_mock" / "r2-v2", "--dataset", "tau2:mock", "--split", "test",
                  "--limit", "2", "--tau2-trials", "2", "--mechanism", "r2", "--prompt", "reviewer@v2")
    return out


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ``experiments/results`` folder for the script."""
    folder = tmp_path / "results"
    monkeypatch.setattr(recompute, "RESULTS", folder)
    yield folder


def _summary(out: Path, rel: str) -> EpisodeSummary:
    (path,) = (out / rel).glob("*/summary.json")
    return read_model(path, EpisodeSummary)


def _no_machine_paths(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            text = (gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz"
                    else path.read_text(encoding="utf-8"))
            for root in recompute.PRIVATE_ROOTS:
                assert root not in text, f"{path.relative_to(folder)} contains a machine path ({root})"


def _recomputed(name: str) -> dict[str, Any]:
    return json.loads(json.dumps(recompute.recompute(name)))


@needs_bfcl
def test_bfcl_conversations_recompute_to_each_runs_own_summary(bfcl_runs: Path, results: Path) -> None:
    recompute.collect("convo", bfcl_runs, {"title": "conversations"})
    data = _recomputed("convo")
    assert set(data["groups"]) == {f"{TAG}/bfcl_multi_turn_base", f"{TAG}/bfcl_multi_turn_miss_param", f"{TAG}/pooled"}
    for dataset, variant, mechanism in (("multi_turn_base", "r2-v2", "r2"), ("multi_turn_base", "gate+r2-v2", "gate+r2"),
                                        ("multi_turn_miss_param", "r2-v2", "r2")):
        group = data["groups"][f"{TAG}/bfcl_{dataset}"]
        summary = json.loads(_summary(bfcl_runs, f"{TAG}/bfcl_{dataset}/{variant}").model_dump_json())
        assert group["kind"] == "conversation" and group["benchmark"] == "bfcl"
        versus = group["vs_base"][variant]
        for key in ("n", "both_right", "fixed", "broken", "both_wrong", "mcnemar_p", "net_change_ci95", "helpfulness",
                    "harmfulness"):
            assert versus[key] == summary["help_harm"][key], key
        assert versus["abstention"] == summary["abstention_help_harm"]
        assert versus["leaderboard"] == {"base": summary["leaderboard"]["base"],
                                         "reviewed": summary["leaderboard"][mechanism]}
        assert versus["latency_overhead_x"] == pytest.approx(summary["latency"]["overhead_x"])
        reviewed = next(c for c in group["conditions"] if c["condition"] == variant)
        assert reviewed["conversation"] == summary["conversation"][mechanism]
        assert reviewed["accuracy"] == summary["reviewed"]["accuracy"]
        assert reviewed["categories"][dataset]["correct"] == summary["reviewed"]["categories"][dataset]["correct"]
        assert reviewed["latency_mean_seconds"] == pytest.approx(summary["reviewed"]["mean_seconds"])
    base = data["groups"][f"{TAG}/bfcl_multi_turn_base"]
    assert base["vs_base"]["r2-v2"]["fixed"] == 1  # the reviewer's rejection fixed entry 0 (the flips World)
    assert base["pairwise"][0]["a"] == "gate+r2-v2" and base["pairwise"][0]["b"] == "r2-v2"
    miss = data["groups"][f"{TAG}/bfcl_multi_turn_miss_param"]["conditions"][0]["conversation"]
    assert miss["abstain_turns"] > 0  # miss_param's turns whose truth is to call nothing are counted
    pooled = data["groups"][f"{TAG}/pooled"]["vs_base"]["r2-v2"]
    assert pooled["n"] == 4 and set(pooled["categories"]) == {"multi_turn_base", "multi_turn_miss_param"}
    runs = {r["run"].rsplit("/", 1)[0]: r for r in data["runs"]}
    assert all(r["entries"] == 2 and r["wall_seconds_per_entry"] is not None for r in runs.values())
    assert all(r["dollars"]["total"] == 0.0 for r in runs.values())  # costs.json was collected (a free model)
    page = recompute.render(data)
    assert "Abstention turns" in page and "Inside the conversations" in page and "Per turn" in page
    assert "Beside the papers" not in page  # neither paper reports BFCL multi-turn
    _no_machine_paths(results)


@needs_bfcl
def test_check_passes_on_the_written_tables_and_fails_on_an_edited_one(bfcl_runs: Path, results: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert recompute.main(["convo", "--collect", str(bfcl_runs), "--meta", "title=t"]) == 0
    assert recompute.main(["convo", "--check"]) == 0
    written = json.loads((results / "convo.json").read_text(encoding="utf-8"))
    assert (results / "convo.md").read_text(encoding="utf-8") == recompute.render(written)
    written["groups"][f"{TAG}/bfcl_multi_turn_base"]["vs_base"]["r2-v2"]["fixed"] += 1
    (results / "convo.json").write_text(json.dumps(written), encoding="utf-8")
    assert recompute.main(["convo", "--check"]) == 1
    assert "differs from the numbers recomputed" in capsys.readouterr().err
    _no_machine_paths(results)


@needs_tau2
def test_tau2_recomputes_pass_hat_k_and_help_harm_and_shows_the_papers_table(tau2_runs: Path, results: Path) -> None:
    recompute.collect("t2", tau2_runs, {"title": "tau2"})
    data = _recomputed("t2")
    group = data["groups"][f"{TAG}/tau2_mock"]
    summary = json.loads(_summary(tau2_runs, f"{TAG}/tau2_mock/r2-v2").model_dump_json())
    assert group["benchmark"] == "tau2"
    base, reviewed = group["conditions"]
    assert base["pass_hat_k"] == summary["pass_hat_k"]["base"] and reviewed["pass_hat_k"] == summary["pass_hat_k"]["r2"]
    assert reviewed["pass_hat_k"] == {"1": 1.0, "2": 1.0} and base["pass_hat_k"] == {"1": 0.0, "2": 0.0}
    assert base["tasks_by_category"] == {"tau2_mock": 2} and base["n"] == 4  # 2 tasks x 2 trials
    assert base["mean_reward"] == 0.0 and reviewed["mean_reward"] == 1.0
    versus = group["vs_base"]["r2-v2"]
    assert {k: versus[k] for k in ("fixed", "broken", "mcnemar_p")} == {
        k: summary["help_harm"][k] for k in ("fixed", "broken", "mcnemar_p")}
    assert versus["pass_hat_k"] == {"base": summary["pass_hat_k"]["base"], "reviewed": summary["pass_hat_k"]["r2"]}
    assert reviewed["conversation"] == summary["conversation"]["r2"] and reviewed["conversation"]["revised_steps"] > 0
    assert reviewed["reviewer_calls_per_turn"] > 0 and reviewed["seconds_per_step"] is not None
    ours = data["beside_papers"]["tau2"]["ours"][TAG]
    assert ours["conditions"]["r2-v2"]["pass_hat_1"] == {"mock": 1.0}
    assert ours["conditions"]["r2-v2"]["paper_domains_mean"] is None  # airline, retail, telecom were not run
    assert ours["tasks"] == {"mock": 2} and ours["trials"] == {"mock": 2}
    assert ours["models"]["user"].startswith("fake@")
    page = recompute.render(data)
    section = page[page.index("## Beside the papers: tau2-bench"):page.index(f"## {TAG}/tau2_mock")]
    assert "| airline | retail | telecom | mean of the 3 | mock |" in section
    assert ("| paper (4o baseline) | base gpt-4o-2024-11-20 (temperature 0, seed 42) | base alone | "
            "42.0% | 62.9% | 41.2% | 48.7% | - |") in section
    assert "| paper (4o-r5-4o-v1) |" in section and "| 40.7% | 62.6% | 64.0% | 55.8% |" in section
    assert f"| ours ({TAG}) |" in section and "| r2-v2 | - | - | - | - | 100.0% |" in section
    assert "| 158.7 | 384.3 | 2.4 | 0.96 |" in section
    assert "pass^2" in page and "Success per domain" not in page  # one domain: no per-domain table
    assert recompute.main(["t2"]) == 0 and recompute.main(["t2", "--check"]) == 0
    _no_machine_paths(results)


@needs_tau2
def test_tau2_domains_pool_apart_although_their_task_ids_repeat(tau2_runs: Path, results: Path) -> None:
    recompute.collect("t2", tau2_runs, {})
    mock = results / "t2" / TAG / "tau2_mock"
    twin = results / "t2" / TAG / "tau2_airline"  # a second domain with mock's task ids (airline has a task "1" too)
    for path in sorted(mock.rglob("*")):
        target = twin / path.relative_to(mock)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.name == "records.jsonl.gz":
            rows = [json.loads(line) | {"category": "tau2_airline"}
                    for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
            target.write_bytes(recompute._gzip_bytes("".join(json.dumps(r) + "\n" for r in rows)))
        else:
            target.write_bytes(path.read_bytes())
    data = _recomputed("t2")
    pooled = data["groups"][f"{TAG}/pooled"]
    base, reviewed = pooled["conditions"]
    assert base["n"] == 8 and base["tasks_by_category"] == {"tau2_airline": 2, "tau2_mock": 2}
    assert pooled["vs_base"]["r2-v2"]["n"] == 8 and pooled["vs_base"]["r2-v2"]["fixed"] == 8
    assert reviewed["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    ours = data["beside_papers"]["tau2"]["ours"][TAG]  # the unpooled groups only
    assert ours["conditions"]["r2-v2"]["pass_hat_1"] == {"airline": 1.0, "mock": 1.0}
    assert ours["tasks"] == {"airline": 2, "mock": 2}
    assert "Success per domain" in recompute.render(data)
