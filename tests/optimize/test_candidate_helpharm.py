"""Help/harm of every GEPA candidate: counts from gepa's objective means, the edit, the front, resume, summary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from saag_opt.artifacts.store import PromptStore
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.optimize.callbacks import ArtifactWriter
from saag_opt.optimize.candidates import (
    by_component,
    candidate_edit,
    changed_components,
    count_help_harm,
    from_state,
    help_harm_front,
    val_flips,
)
from saag_opt.optimize.summary import CandidateHelpHarm, CandidateMap, OptimizeSummary
from saag_opt.report.optimize_tables import candidate_rows, print_optimize_report
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

SEED_TEXT = "Review the calls.\n\nRules:\n1. Check the function name.\n2. Check the argument values."
CHILD_TEXT = "Review the calls.\n\nRules:\n1. Check the function name.\n2. Reject a value the user never gave."


@dataclass
class FakeState:
    """The attributes of gepa's GEPAState that ``candidates.from_state`` reads (n val examples each)."""

    n: int
    program_candidates: list[dict[str, str]] = field(default_factory=list)
    parent_program_for_candidate: list[list[int | None]] = field(default_factory=list)
    prog_candidate_val_subscores: list[dict[int, float]] = field(default_factory=list)
    prog_candidate_objective_scores: list[dict[str, float]] = field(default_factory=list)
    program_full_scores_val_set: list[float] = field(default_factory=list)

    def add(self, text: str, parent: int | None, *, right: int, fixed: int, broken: int) -> int:
        """A candidate whose final calls are right on ``right`` of n examples; its index."""
        self.program_candidates.append({"reviewer.review": text})
        self.parent_program_for_candidate.append([parent])
        self.prog_candidate_val_subscores.append({i: float(i < right) for i in range(self.n)})
        self.prog_candidate_objective_scores.append({"help": fixed / self.n, "no_harm": 1 - broken / self.n})
        self.program_full_scores_val_set.append(right / self.n)
        return len(self.program_candidates) - 1


def _seed_state() -> FakeState:
    state = FakeState(n=10)
    state.add(SEED_TEXT, None, right=6, fixed=0, broken=0)
    return state


def test_counts_follow_from_the_objective_means() -> None:
    state = _seed_state()
    state.add(CHILD_TEXT, 0, right=7, fixed=2, broken=1)
    seed, child = from_state(state, 0, "v2"), from_state(state, 1)
    assert (seed.n_val, seed.base_right, seed.fixed, seed.broken, seed.help, seed.harm) == (10, 6, 0, 0, 0.0, 0.0)
    assert seed.version == "v2" and seed.parent is None and seed.edit == []
    assert (child.base_right, child.fixed, child.broken, child.val_accuracy) == (6, 2, 1, 0.7)
    assert child.help == 2 / 4 and child.harm == 1 / 6 and child.parent == 0
    assert child.edit == ["rule 3 replaced: Reject a value the user never gave."]
    assert child.components == ["review"] and (child.gained, child.lost) == (1, 0)  # example 6 newly right
    assert seed.components == [] and seed.gained is None and seed.lost is None


def test_flips_count_examples_both_were_scored_on_in_each_direction() -> None:
    assert val_flips({0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}, {0: 0.0, 1: 1.0, 2: 1.0, 3: 1.0, 9: 1.0}) == (2, 1)
    assert val_flips({}, {0: 1.0}) == (0, 0)


def test_a_note_edit_is_a_report_component_and_an_empty_note_is_no_change() -> None:
    parent = {"reviewer.review": SEED_TEXT, "reviewer.report": "(no note)"}
    assert changed_components(parent, {**parent, "reviewer.report": "- Doubt restated values."}) == ["report"]
    assert changed_components(parent, {**parent, "reviewer.review": CHILD_TEXT}) == ["review"]
    assert changed_components(parent, dict(parent)) == [] and changed_components(None, parent) == []


def test_by_component_sums_single_component_edits_and_keeps_two_component_edits_apart() -> None:
    def c(idx: int, components: list[str], gained: int | None, lost: int | None) -> CandidateHelpHarm:
        return CandidateHelpHarm(candidate=idx, n_val=10, base_right=6, fixed=0, broken=0, val_accuracy=0.5,
                                 components=components, gained=gained, lost=lost)
    pool = [c(0, [], None, None), c(1, ["review"], 0, 0), c(2, ["report"], 2, 1), c(3, ["report"], 0, 1),
            c(4, ["report", "review"], 1, 0), c(5, ["review"], None, None)]
    assert by_component(pool) == {"review": {"candidates": 1, "gained": 0, "lost": 0, "moved": 0},
                                  "report": {"candidates": 2, "gained": 2, "lost": 2, "moved": 2},
                                  "both": {"candidates": 1, "gained": 1, "lost": 0, "moved": 1}}


@pytest.mark.parametrize(("score", "help_mean", "no_harm", "expected"), [
    (1.0, 0.0, 1.0, (4, None, 0.0)),   # every base call right: no wrong one to fix
    (0.5, 0.5, 1.0, (0, 0.5, None)),   # every base call wrong: no right one to break
    (0.0, 0.0, 1.0, (0, 0.0, None)),   # failed rollouts score 0 and are neither fixed nor broken
])
def test_a_zero_denominator_gives_no_rate(score: float, help_mean: float, no_harm: float,
                                          expected: tuple[int, float | None, float | None]) -> None:
    counts = count_help_harm(3, score=score, help_mean=help_mean, no_harm_mean=no_harm, n_val=4)
    assert (counts.base_right, counts.help, counts.harm) == expected


def test_no_objective_means_means_no_counts() -> None:
    state = _seed_state()
    state.prog_candidate_objective_scores[0] = {}
    assert from_state(state, 0) is None and from_state(state, 5) is None


def test_the_edit_names_the_predictor_only_when_there_are_several() -> None:
    parent = {"reviewer.review": SEED_TEXT, "reviewer.select": "Pick one."}
    child = {"reviewer.review": CHILD_TEXT, "reviewer.select": "Pick one."}
    assert candidate_edit(parent, child) == ["review: rule 3 replaced: Reject a value the user never gave."]
    assert candidate_edit({"reviewer.review": "A."}, {"reviewer.review": "A.\n\nB."}) == ["added as rule 2: B."]
    assert candidate_edit({"reviewer.review": "A.\nB."}, {"reviewer.review": "A. B."}) == ["same rules, layout changed"]
    assert candidate_edit(None, child) == []


def _c(idx: int, fixed: int, broken: int) -> CandidateHelpHarm:
    return CandidateHelpHarm(candidate=idx, n_val=10, base_right=6, fixed=fixed, broken=broken, val_accuracy=0.5)


def test_the_front_keeps_only_candidates_no_other_dominates() -> None:
    pool = [_c(0, 0, 0), _c(1, 3, 1), _c(2, 2, 0), _c(3, 1, 1), _c(4, 2, 0)]
    assert help_harm_front(pool) == {1, 2, 4}  # ties stay; 0 and 3 are dominated by 2
    assert help_harm_front([_c(0, 0, 0)]) == {0} and help_harm_front([]) == set()


def _writer(tmp_path: Path) -> tuple[ArtifactWriter, PromptStore, Any]:
    store = PromptStore(tmp_path / "prompts")
    seed = store.save_new("reviewer", {"review": SEED_TEXT}, suffix="", source="manual")
    writer = ArtifactWriter(store, seed_version=seed, map_path=tmp_path / "artifacts.json", metadata={},
                            spent=lambda: 0.0)
    return writer, store, seed


def _valset_event(state: FakeState, idx: int) -> dict[str, Any]:
    return {"candidate_idx": idx, "candidate": state.program_candidates[idx], "iteration": idx,
            "scores_by_val_id": state.prog_candidate_val_subscores[idx],
            "average_score": state.program_full_scores_val_set[idx], "num_examples_evaluated": state.n,
            "parent_ids": [p for p in state.parent_program_for_candidate[idx] if p is not None],
            "outputs_by_val_id": None}


def _gepa_run(writer: ArtifactWriter, state: FakeState) -> None:
    """The events gepa sends for a seed and one accepted candidate, in gepa's order."""
    writer.on_valset_evaluated(_valset_event(state, 0))
    writer.on_iteration_start({"iteration": 1, "state": state})
    state.add(CHILD_TEXT, 0, right=7, fixed=2, broken=1)
    writer.on_valset_evaluated(_valset_event(state, 1))
    writer.on_iteration_end({"iteration": 1, "state": state, "proposal_accepted": True})


def test_a_new_version_carries_its_counts_and_every_candidate_reaches_artifacts_json(tmp_path: Path) -> None:
    writer, store, seed = _writer(tmp_path)
    _gepa_run(writer, _seed_state())
    saved = store.get("reviewer", writer.versions[1])
    assert saved.scores["val_fixed"] == 2 and saved.scores["val_broken"] == 1
    assert "val_fixed" not in store.get("reviewer", seed.version).scores  # saved before its counts: untouched
    on_disk = json.loads((tmp_path / "artifacts.json").read_text())["candidates"]
    assert sorted(on_disk) == ["0", "1"]
    assert on_disk["0"] == {"candidate": 0, "version": seed.version, "parent": None, "n_val": 10, "base_right": 6,
                            "fixed": 0, "broken": 0, "val_accuracy": 0.6, "edit": [], "components": [],
                            "gained": None, "lost": None, "help": 0.0, "harm": 0.0}
    assert (on_disk["1"]["gained"], on_disk["1"]["lost"], on_disk["1"]["components"]) == (1, 0, ["review"])
    assert (on_disk["1"]["version"], on_disk["1"]["fixed"], on_disk["1"]["broken"]) == (saved.version, 2, 1)
    assert on_disk["1"]["help"] == 0.5 and on_disk["1"]["edit"] == ["rule 3 replaced: Reject a value the user never gave."]


def test_a_resumed_run_reads_the_counts_back_and_refreshes_them_from_the_reloaded_state(tmp_path: Path) -> None:
    first, _, _ = _writer(tmp_path)
    state = _seed_state()
    _gepa_run(first, state)
    resumed, _, _ = _writer(tmp_path)  # a new process: nothing but artifacts.json
    assert [c.fixed for c in resumed.candidate_list()] == [0, 2]
    assert resumed.candidate_list() == first.candidate_list()
    # a run older than the counts: artifacts.json maps versions only; gepa's reloaded checkpoint fills them in
    (tmp_path / "artifacts.json").write_text(json.dumps({"versions": {"1": first.versions[1]}}))
    older, _, _ = _writer(tmp_path)
    assert older.candidate_list() == []
    older.on_valset_evaluated(_valset_event(state, 0))  # 0.1.4 re-evaluates the seed on a resume
    older.on_optimization_end({"best_candidate_idx": 1, "final_state": state})
    assert [(c.candidate, c.version, c.broken) for c in older.candidate_list()] == [
        (0, first.versions[0], 0), (1, first.versions[1], 1)]
    assert CandidateMap.model_validate_json((tmp_path / "artifacts.json").read_text()).candidates[1].fixed == 2


def test_after_a_set_aside_checkpoint_an_index_with_another_text_gets_no_counts(tmp_path: Path) -> None:
    first, _, _ = _writer(tmp_path)
    _gepa_run(first, _seed_state())
    (tmp_path / "artifacts.json").write_text(json.dumps({"versions": {"1": first.versions[1]}}))
    resumed, _, _ = _writer(tmp_path)  # gepa starts again from the seed: its candidate 1 is another text
    restarted = _seed_state()
    restarted.add(SEED_TEXT + "\n3. Approve restated values.", 0, right=5, fixed=0, broken=1)
    resumed.on_optimization_end({"best_candidate_idx": 0, "final_state": restarted})
    assert [c.candidate for c in resumed.candidate_list()] == [0]


def test_a_candidate_cut_short_by_the_cap_gets_no_counts(tmp_path: Path) -> None:
    writer, _, _ = _writer(tmp_path)
    state = _seed_state()
    writer.on_valset_evaluated(_valset_event(state, 0))
    writer.cap = type("Cap", (), {"reached": True})()
    state.add(CHILD_TEXT, 0, right=7, fixed=2, broken=1)
    writer.on_valset_evaluated(_valset_event(state, 1))
    writer.on_iteration_end({"iteration": 1, "state": state, "proposal_accepted": True})
    assert [c.candidate for c in writer.candidate_list()] == [0]


def _summary(tmp_path: Path) -> OptimizeSummary:
    return OptimizeSummary.model_validate({
        "run_dir": str(tmp_path), "status": "success", "seed_version": "v2", "best_version": "v4-gepa",
        "versions": {0: "v2", 1: "v3-gepa", 2: "v4-gepa"}, "val_scores": [0.6, 0.8, 0.8], "metric_calls": 60,
        "stopped_by": "max_metric_calls", "costs": {"roles": {}},
        "estimate": {"rollouts": 60, "reviewer_calls": 60, "base_calls": 0, "reflection_calls": 5, "lm_calls": 65,
                     "tokens": 1000, "dollars": 0.0, "assumptions": "-"},
        "candidates": [
            {"candidate": 0, "version": "v2", "n_val": 10, "base_right": 6, "fixed": 0, "broken": 0,
             "val_accuracy": 0.6},
            {"candidate": 1, "version": "v3-gepa", "parent": 0, "n_val": 10, "base_right": 6, "fixed": 3,
             "broken": 1, "val_accuracy": 0.8, "components": ["review"], "gained": 3, "lost": 1,
             "edit": ["added as rule 3: Reject a value the user never gave "
                                                        "in the request, even when it looks plausible.",
                                                        "rule 1 deleted: Check the function name."]},
            {"candidate": 2, "version": "v4-gepa", "parent": 0, "n_val": 10, "base_right": 6, "fixed": 2,
             "broken": 0, "val_accuracy": 0.8, "edit": ["rule 2 replaced: Reject unknown values."]}]})


def test_summary_json_lists_each_candidates_fixed_and_broken_and_older_summaries_still_read(tmp_path: Path) -> None:
    data = _summary(tmp_path).to_dict()
    assert [(c["candidate"], c["fixed"], c["broken"]) for c in data["candidates"]] == [(0, 0, 0), (1, 3, 1), (2, 2, 0)]
    assert data["candidates"][1]["help"] == 0.75 and data["candidates"][1]["harm"] == 1 / 6
    assert OptimizeSummary.model_validate(data) == _summary(tmp_path)  # the derived rates are not read back
    del data["candidates"]
    assert OptimizeSummary.model_validate(data).candidates == []


def test_the_terminal_table_has_a_row_per_candidate_with_help_harm_front_and_edit(tmp_path: Path) -> None:
    summary = _summary(tmp_path)
    assert candidate_rows(summary) == [
        ["0", "v2", "-", "0.600", "-", "0", "0", "0.0", "0.0", "", "-"],
        ["1", "v3-gepa", "v2", "0.800", "+3 -1", "3", "1", "75.0", "16.7", "*",
         "added as rule 3: Reject a value the user never gave in the … (+1 more)"],
        ["2", "v4-gepa (best)", "v2", "0.800", "-", "2", "0", "50.0", "0.0", "*", "rule 2 replaced: Reject unknown values."]]
    console = Console(width=220, record=True)
    print_optimize_report(console, summary.to_dict())
    text = console.export_text()
    assert "GEPA candidates on val" in text and "on the help-vs-harm front" in text
    assert "v4-gepa (best)" in text and "rule 2 replaced: Reject unknown values." in text



def test_an_older_summary_prints_its_val_scores_without_counts(tmp_path: Path) -> None:
    data = _summary(tmp_path).to_dict()
    del data["candidates"]
    assert candidate_rows(OptimizeSummary.model_validate(data))[1] == [
        "1", "v3-gepa", "-", "0.800", "-", "-", "-", "-", "-", "", "-"]


@pytest.mark.integration
def test_a_gepa_run_on_the_scripted_server_reports_every_candidate_and_so_does_its_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real gepa state and events: the seed approves all (2 of 4 val base calls wrong), v3-gepa fixes both."""
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    with ScriptedOpenAIServer(world.handler) as server:
        result = run_optimize(world.config(tmp_path, server, evaluate_test=False))
        prompts = tmp_path / "prompts"
        summary = json.loads((result.run_dir / "summary.json").read_text())
        rows = [(c["candidate"], c["version"], c["parent"], c["n_val"], c["base_right"], c["fixed"], c["broken"],
                 c["help"], c["harm"]) for c in summary["candidates"]]
        assert rows == [(0, "v2", None, 4, 2, 0, 0, 0.0, 0.0), (1, "v3-gepa", 0, 4, 2, 2, 0, 1.0, 0.0)]
        assert summary["candidates"][0]["edit"] == [] and world.KEYWORD in summary["candidates"][1]["edit"][0]
        saved = PromptStore(prompts).get("reviewer", "v3-gepa").scores
        assert (saved["val_fixed"], saved["val_broken"]) == (2, 0)  # known when the version was saved
        artifacts = CandidateMap.model_validate_json((result.run_dir / "artifacts.json").read_text())
        assert [c.model_dump(mode="json") for c in artifacts.candidates.values()] == summary["candidates"]
        assert help_harm_front(result.candidates) == {1}
        # resume with artifacts.json stripped of the counts: gepa's checkpoint, reloaded from disk, gives them again
        stripped = artifacts.model_copy(update={"candidates": {}})
        (result.run_dir / "artifacts.json").write_text(stripped.model_dump_json())
        resumed = run_optimize(OptimizeConfig(resume=str(result.run_dir), max_metric_calls=50),
                               overrides={"max_metric_calls"})
    assert resumed.metric_calls >= 50 and [c.model_dump(mode="json") for c in resumed.candidates] == summary["candidates"]
