"""``optimize`` on BFCL multi-turn entries, end to end against the scripted server (``conversation_world``).

A rollout is one reviewed conversation on BFCL's backends, scored by BFCL's checker; GEPA runs the
single-call machinery (budget, rails, acceptance, artifacts, the test phase, resume) on entries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.artifacts.store import PromptStore
from saag_opt.cli import main
from saag_opt.data import catalog
from saag_opt.episodes import Episode
from saag_opt.evaluation.conversation_records import EpisodeRecord
from saag_opt.optimize import OptimizeConfig, OptimizeResult, run_optimize
from saag_opt.optimize.edits import rule_changes
from saag_opt.optimize.feedback import GOLD_LABEL
from saag_opt.runfiles import read_header, read_rows
from saag_opt.testing import read_request
from saag_opt.testing.scripted_server import RecordedRequest, ScriptedOpenAIServer
from saag_opt.testing.scripted_world import ReflectRequest
from tests.episodes.world import needs_bfcl
from tests.optimize import conversation_world as cw
from tests.optimize.optimize_world import KEYWORD, is_reflection

pytestmark = [pytest.mark.integration, needs_bfcl]


@pytest.fixture(autouse=True)
def _private_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh LM and base-prediction caches, so every call of the run reaches the server's log."""
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))


@pytest.fixture()
def world() -> cw.ConversationWorld:
    return cw.ConversationWorld()


@pytest.fixture()
def server(world: cw.ConversationWorld) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(world) as srv:
        yield srv


def _config(tmp_path: Path, server: ScriptedOpenAIServer, **extra: Any) -> OptimizeConfig:
    spec = f"fake@{server.url}"
    values = dict(base=spec, reviewer=spec, dataset=cw.DATASET, prompts_dir=cw.write_prompts(tmp_path / "prompts"),
                  runs_dir=str(tmp_path / "runs"), max_metric_calls=16, workers=2, mechanism="r1", minibatch=2,
                  **cw.LIMITS)
    return OptimizeConfig.model_validate(values | extra)


def _is_reflection(request: RecordedRequest) -> bool:
    return is_reflection(request.body or {})


def _reflected(requests: list[RecordedRequest]) -> list[dict[str, Any]]:
    """The examples (inputs, outputs, feedback) of every rewrite request, as dspy renders them."""
    views = [read_request(r.body or {}) for r in requests]
    return [example for view in views if isinstance(view, ReflectRequest) for example in view.examples]


def test_optimize_on_conversations_finds_the_better_reviewer_and_compares_it_on_test_entries(
        tmp_path: Path, server: ScriptedOpenAIServer, world: cw.ConversationWorld) -> None:
    events: list[Any] = []
    result = run_optimize(_config(tmp_path, server), on_event=events.append)
    assert result.status == "success" and result.best_version == "v3-gepa"
    assert result.val_scores == [0.0, 1.0]  # the seed approves both wrong turn-0 calls; the keyword rejects them
    best = PromptStore(tmp_path / "prompts").get("reviewer", "v3-gepa")
    assert KEYWORD in best.instructions["review"] and best.parents == ["v2"]
    run = result.run_dir
    header = read_header(run)
    assert header.verb == "optimize" and header.status == "success"
    assert (header.dataset["spec"], header.dataset["train"], header.dataset["val"]) == (cw.DATASET, 2, 2)
    for name in ("summary.json", "costs.json", "artifacts.json", "gepa/gepa_state.bin", "records.jsonl"):
        assert (run / name).is_file(), name
    test = result.test
    assert test is not None and (test.seed, test.best) == ("v2", "v3-gepa")
    paired = test.comparison.paired  # test entries _1 (right either way) and _12 (fixed by the keyword)
    assert (paired.n, paired.both_right, paired.b_only_right, paired.a_only_right) == (2, 1, 1, 0)
    rows = read_rows(run / "records.jsonl", EpisodeRecord)
    assert {r.example_id for r in rows} == {"multi_turn_base_1", "multi_turn_base_12"} and all(r.turns for r in rows)
    assert sorted({r.condition for r in rows}) == ["base", "r1@v2", "r1@v3-gepa"]
    passes = [json.loads(p.read_text())["verb"] for p in Path(test.compare_run).glob("*/*/run.json")]
    assert passes and set(passes) == {"evaluate-multiturn"}
    estimate = next(e for e in events if e.kind == "estimate")
    assert "one reviewed conversation of" in estimate.message
    assert world.reflections == 1


def test_the_reflection_reads_the_failing_turn_and_the_reviewer_inputs_of_that_step(
        tmp_path: Path, server: ScriptedOpenAIServer) -> None:
    run_optimize(_config(tmp_path, server, evaluate_test=False, proposer="rewrite"))  # dspy's JSON of the items
    reflected = _reflected(server.chat_requests)
    missed = next(r for r in reflected if r["Feedback"].startswith("Outcome: missed error."))
    feedback = missed["Feedback"]
    assert "with the review it fails at turn 0 (multi_turn:execution_response_mismatch)" in feedback
    assert "<- BFCL's checker fails the run at turn 0" in feedback
    assert f'proposed find(path="{cw.WRONG}", name="test"). [the reviewer inputs shown' in feedback
    assert "Review 1: APPROVED (error=false)." in feedback and f"'{cw.WRONG}': No such file or directory" in feedback
    assert "Checker on the run with the review" in feedback and "missing_items" in feedback
    assert cw.WRONG in missed["Inputs"]["tentative_calls"]  # the inputs shown are the failing step's ...
    assert all(cw.WRONG not in r["Inputs"]["tentative_calls"] for r in reflected if r is not missed)  # ... only


def test_gold_reaches_the_reflection_only_on_labelled_lines_and_never_the_reviewer_or_the_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world: cw.ConversationWorld) -> None:
    secret = "Zanzibar7"
    original = catalog.load_bfcl_multi_turn

    def with_secret(category: str) -> list[Episode]:  # one more gold call at turn 0: a directory nobody asked for
        return [Episode(e.id, e.category, e.turns, e.tools, e.environment, e.setup,
                        ((*e.gold[0], f"mkdir(dir_name='{secret}')"), *e.gold[1:]), e.split, e.source)
                for e in original(category)]

    monkeypatch.setattr(catalog, "load_bfcl_multi_turn", with_secret)  # the agent's script keeps the real gold
    with ScriptedOpenAIServer(world) as server:
        run_optimize(_config(tmp_path, server, evaluate_test=False, max_metric_calls=10))
        log = server.chat_requests
    reflection = [r for r in log if _is_reflection(r)]
    others = [r for r in log if not _is_reflection(r)]
    assert reflection and any(read_request(r.body or {}).role == "base" for r in others)
    assert [r for r in others if secret in json.dumps(r.body)] == []  # reviewer and base agent, every request
    texts = [str(m.get("content") or "") for r in reflection for m in (r.body or {}).get("messages", [])]
    lines = [line for text in texts for line in text.replace("\\n", "\n").splitlines() if secret in line]
    assert lines  # the check can fail: the reflection does read the gold ...
    assert all(GOLD_LABEL in line for line in lines)  # ... on its labelled lines only


def test_the_rails_quarantine_a_proposal_that_copies_an_entrys_gold_value(tmp_path: Path) -> None:
    copying = f"{KEYWORD}: reject a call unless its destination is backup_tests; approve the other calls."
    with ScriptedOpenAIServer(cw.ConversationWorld(proposal=copying)) as server:
        result = run_optimize(_config(tmp_path, server, evaluate_test=False))
    store = PromptStore(tmp_path / "prompts")
    (kept,) = [v for v in store.list("reviewer") if v.quarantine is not None]
    assert rule_changes(cw.SEED_INSTRUCTION, kept.instructions["review"]) == [f"added as rule 2: {copying}"]
    assert "copies_values" in kept.quarantine
    assert result.best_version == "v2" and result.versions == {0: "v2"}  # never in the pool, though it would win
    assert json.loads((result.run_dir / "quarantine.json").read_text())["quarantined"][0]["version"] == kept.version


def test_resume_extends_a_conversation_run_without_saving_a_candidate_twice(tmp_path: Path,
                                                                            server: ScriptedOpenAIServer) -> None:
    first: OptimizeResult = run_optimize(_config(tmp_path, server, max_metric_calls=10, evaluate_test=False))
    more = OptimizeConfig(resume=str(first.run_dir), max_metric_calls=20, base="gpt-4o-mini")
    second = run_optimize(more, overrides={"max_metric_calls"})
    assert second.run_dir == first.run_dir and second.metric_calls >= 20 > first.metric_calls
    header = read_header(first.run_dir)
    assert header.status == "success" and header.config["max_metric_calls"] == 20
    assert header.config["dataset"] == cw.DATASET and header.config["base"].startswith("fake@")
    assert [v.version for v in PromptStore(tmp_path / "prompts").list("reviewer") if v.source == "gepa"] == ["v3-gepa"]
    assert second.best_version == "v3-gepa"


def test_dry_run_estimates_conversation_rollouts_and_the_test_entries(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    prompts = cw.write_prompts(tmp_path / "prompts")
    with pytest.raises(SystemExit) as exit_info:
        main(["optimize", "--dataset", cw.DATASET, "--base", "gpt-4o", "--reviewer", "gpt-4o-mini", "--store", prompts,
              "--train-limit", "2", "--val-limit", "2", "--test-limit", "2", "--max-metric-calls", "16", "--dry-run",
              "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the assumptions at the terminal's width
    assert "one reviewed conversation of 7.0 steps per rollout" in out and "reflection" in out
    assert not (tmp_path / "runs").exists()
