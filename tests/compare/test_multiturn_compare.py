"""``saag-opt compare`` on conversations: two prompt versions (run now) and two finished multi-turn runs.

The scripted server plays agent and reviewer (``test_multiturn_flips.World``): the agent makes
``mkdir(dir_name='tmp')`` at entry 0's first step; reviewer v1 approves everything, v2 (its system
prompt carries the marker) rejects that call. So under BFCL's checker v1 leaves entry 0 invalid and
v2 fixes it: A vs B is paired per entry with McNemar, and the compare run keeps every turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from saag_opt.compare.run import CompareConfig, preflight_compare, run_compare
from saag_opt.data.catalog import load_episodes
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.conversation_records import EpisodeRecord
from saag_opt.report.pages import build_part
from saag_opt.runfiles import read_rows, read_run
from saag_opt.testing import Reply, ScriptedOpenAIServer
from tests.episodes.world import needs_bfcl
from tests.evaluate.test_multiturn_flips import WRONG, World, _gold
from tests.report import runs
from tests.runtime.world import verdict

pytestmark = [pytest.mark.integration, needs_bfcl]

DATASET, LIMIT = "bfcl:multi_turn_base", 3
MARKER = "v2 marker"


class Scripted:
    """Per entry (by its first user message) the flips World; reviews: v1 approves, v2 rejects WRONG."""

    def __init__(self, limit: int | None = LIMIT) -> None:
        entries = load_episodes(DATASET, split=None, limit=limit)  # the first: multi_turn_base_0 (in val)
        self.worlds = {str(e.turns[0].messages[0]["content"]): World(_gold(e), agent_wrong=i == 0, reject=WRONG)
                       for i, e in enumerate(entries)}
        self.reviews = {"v1": 0, "v2": 0}

    def __call__(self, request: dict[str, Any]) -> Reply:
        if "tools" not in request:
            if MARKER not in request["messages"][0]["content"]:
                self.reviews["v1"] += 1
                return verdict(False)
            self.reviews["v2"] += 1
            return next(iter(self.worlds.values())).review(request)
        first = next(m for m in request["messages"] if m["role"] == "user")
        return self.worlds[str(first["content"])](request)


def _settings(server: ScriptedOpenAIServer, root: Path, prompt: str = "reviewer@v2") -> EvaluateConfig:
    return EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r2", prompt=prompt,
                          dataset=DATASET, split=None, limit=LIMIT, workers=2, runs_dir=root / "runs",
                          cache_dir=root / "cache", retry_base_delay=0.01, retries=0)


def test_two_prompt_versions_on_conversations_are_paired_per_entry(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = runs.prompt_files(tmp_path / "prompts", MARKER)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    scripted = Scripted()
    with ScriptedOpenAIServer(scripted) as server:
        settings = _settings(server, tmp_path)
        result = run_compare(CompareConfig(a=v1, b=v2, evaluation=settings, runs_dir=tmp_path / "runs"))
    summary = result.summary
    paired = summary.paired
    assert (paired.n, paired.b_only_right, paired.a_only_right, paired.both_right) == (3, 1, 0, 2)
    assert paired.mcnemar_p == 1.0 and summary.a.help_harm.fixed == 0 and summary.b.help_harm.fixed == 1
    assert scripted.reviews["v1"] > 0 and scripted.reviews["v2"] > 0
    passes = sorted(p.parent.parent.name for p in result.run_dir.glob("*/*/run.json"))
    assert passes == ["a", "b", "base"]
    assert all(read_run(p.parent).header.verb == "evaluate-multiturn" for p in result.run_dir.glob("*/*/run.json"))
    rows = read_rows(result.run_dir / "records.jsonl", EpisodeRecord)
    assert {r.condition for r in rows} == {"base", f"r2@{summary.a.label}", f"r2@{summary.b.label}"}
    assert all(r.turns for r in rows)  # the compare run keeps every conversation
    part = build_part(result.run_dir)
    browser = next(s for s in part.sections if s.get("kind") == "conversations")
    assert [r["outcome"] for r in browser["rows"]] == ["fixed", "unchanged-right", "unchanged-right"]
    assert [c["label"] for c in part.data["episodes"][0]["conditions"]] == [
        "base", f"A {summary.a.label}", f"B {summary.b.label}"]


def test_finished_multi_turn_runs_compare_without_a_model_call(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = runs.prompt_files(tmp_path / "prompts", MARKER)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    with ScriptedOpenAIServer(Scripted()) as server:
        one = run_evaluation(_settings(server, tmp_path / "one", v1)).run_dir
        two = run_evaluation(_settings(server, tmp_path / "two", v2)).run_dir
        three = run_evaluation(_settings(server, tmp_path / "three", v1)).run_dir
        asked = len(server.chat_requests)
        result = run_compare(CompareConfig(a=str(one), b=str(two), runs_dir=tmp_path / "runs"))
        many = run_compare(CompareConfig(versions=[str(one), str(two), str(three)], runs_dir=tmp_path / "runs"))
        assert len(server.chat_requests) == asked
    paired = result.summary.paired
    assert (paired.b_only_right, paired.a_only_right, paired.n) == (1, 0, 3)
    assert result.summary.a.source["verb"] == "evaluate-multiturn" and result.summary.b.costs
    rows = read_rows(result.run_dir / "records.jsonl", EpisodeRecord)
    assert len(rows) == 9 and all(r.turns for r in rows)
    pairs = {(p.ref, p.target): (p.b_only_right, p.a_only_right) for p in many.summary.pairs}
    assert pairs == {("a", "b"): (1, 0), ("a", "c"): (0, 0), ("b", "c"): (0, 1)}
    part = build_part(many.run_dir)
    assert len(part.data["episodes"][0]["conditions"]) == 4  # base and the three versions, every turn


def test_compare_dry_run_on_conversations_counts_the_base_pass_once(tmp_path: Path) -> None:
    v1, v2 = runs.prompt_files(tmp_path / "prompts", MARKER)
    settings = EvaluateConfig(base="gpt-4o", reviewer="gpt-4o-mini", mechanism="r2", dataset=DATASET, split=None,
                              limit=LIMIT)
    estimate = preflight_compare(CompareConfig(a=v1, b=v2, evaluation=settings))
    data = estimate.to_dict()
    assert data["command"] == "compare" and data["examples"] == LIMIT
    assert data["roles"]["reviewer"]["calls"] > 0 and data["roles"]["base"]["prompt_tokens"] > 0
    assert any("shared base pass" in a for a in data["assumptions"])
