"""One evaluate run for either kind of work: the kind is resolved once, and the run around it is the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saag_opt.data.workload import WorkloadKind, workload
from saag_opt.evaluate.config import resume_config
from saag_opt.evaluate.run import KINDS, run_evaluation
from saag_opt.evaluation.conversation_records import EpisodeSummary
from saag_opt.runfiles import read_run
from saag_opt.testing import ScriptedOpenAIServer
from tests.compare.test_multiturn_compare import MARKER, Scripted, _settings
from tests.episodes.world import needs_bfcl
from tests.report import runs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_spec_names_its_kind_once() -> None:
    assert workload(str(FIXTURES / "dataset.jsonl")).kind is WorkloadKind.CALLS
    assert workload("shipped:bfcl").unit == "examples"
    assert workload("tau2:airline").kind is WorkloadKind.SIMULATED_USER and workload("tau2:airline").simulated_user
    assert workload("tau2:airline").evaluate_verb == "evaluate-multiturn"


@needs_bfcl
def test_bfcl_multi_turn_is_conversations() -> None:
    multi = workload("bfcl:multi_turn_base")
    assert (multi.kind, multi.conversations, multi.simulated_user, multi.unit) == (
        WorkloadKind.CONVERSATIONS, True, False, "entries")


def test_every_kind_has_its_way_to_run() -> None:
    """A new kind of work fails here until ``run_evaluation`` knows how to run, record and price it."""
    assert set(KINDS) == set(WorkloadKind)


@pytest.mark.integration
@needs_bfcl
def test_a_conversation_run_records_what_its_set_up_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-up's facts (prompt, costs, how unreadable reviews went) are in a conversation run's summary too,
    and its run.json records the reviewer and the split as a single-call run's does."""
    v1, _ = runs.prompt_files(tmp_path / "prompts", MARKER)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    with ScriptedOpenAIServer(Scripted()) as server:
        result = run_evaluation(_settings(server, tmp_path, v1))
    assert isinstance(result.summary, EpisodeSummary)
    assert result.summary.prompt == v1 and result.summary.on_unusable == "approve"
    assert result.summary.costs["roles"]["reviewer"]["calls"] > 0
    assert result.summary.n_items == result.summary.n_episodes == 3
    run = read_run(result.run_dir)
    assert run.header.verb == "evaluate-multiturn"
    assert run.header.plugins["reviewer"]["class"] == "Reviewer" and run.header.plugins["environments"]
    assert run.header.dataset["split_hash"]
    written = [json.loads(line) for line in (result.run_dir / "records.jsonl").read_text().splitlines()]
    assert [(r["example_id"], r["condition"]) for r in written] == [
        (r.example_id, r.condition) for r in result.records]  # item order, base first, whatever the threads did
    assert resume_config(result.run_dir).dataset == "bfcl:multi_turn_base"
