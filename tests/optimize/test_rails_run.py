"""The rails in GEPA: the acceptance criterion on gepa's proposals, and run_optimize with a degenerate reflection LM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
import pytest

from saag_opt.artifacts.store import PromptStore
from saag_opt.errors import ArtifactError
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.optimize.acceptance import ReviewerAcceptance, outcome_classes
from saag_opt.optimize.callbacks import ArtifactWriter
from saag_opt.report.html import render_report
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as world

GOOD = "You review tentative calls. Reject a call whose values do not come from the request; approve the others."
EXP3 = "Please provide a comprehensive and well-structured instruction for the assistant to consider..."


@dataclass
class _Eval:
    scores: list[float]
    classes: list[str]
    trajectories: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        examples = world.make_examples(len(self.scores), "train")
        self.trajectories = [{"example": dspy.Example(item=ex).with_inputs("item"), "example_ind": i,
                              "score": dspy.Prediction(score=s, outcome_class=c)}
                             for i, (ex, s, c) in enumerate(zip(examples, self.scores, self.classes, strict=True))]


@dataclass
class _Proposal:
    candidate: dict[str, str]
    eval_before: _Eval
    eval_after: _Eval
    parent_program_ids: list[int] = field(default_factory=lambda: [0])

    @property
    def subsample_scores_before(self) -> list[float]:
        return self.eval_before.scores

    @property
    def subsample_scores_after(self) -> list[float]:
        return self.eval_after.scores


@dataclass
class _State:
    program_candidates: list[dict[str, str]]
    i: int = 1


class _Keeper:
    def __init__(self) -> None:
        self.kept: list[tuple[dict[str, str], int | None, str, int]] = []

    def quarantine(self, candidate: Any, parent_idx: int | None, reason: str, iteration: int) -> None:
        self.kept.append((dict(candidate), parent_idx, reason, iteration))

    def quarantined_reason(self, candidate: Any) -> str | None:
        return None


STATE = _State([{"reviewer.review": world.SEED_INSTRUCTION}])
RIGHT, WRONG_KEPT = ["kept right", "kept wrong after review", "kept right"], [1.0, 0.0, 1.0]


def _proposal(text: str, before: list[str], after: list[str], scores_after: list[float] | None = None) -> _Proposal:
    return _Proposal({"reviewer.review": text}, _Eval(WRONG_KEPT, before), _Eval(scores_after or WRONG_KEPT, after))


@pytest.mark.parametrize("accept", ["strict", "equal"])
def test_a_quarantined_text_is_never_accepted_even_when_it_scores_higher(accept: str) -> None:
    keeper = _Keeper()
    criterion = ReviewerAcceptance(accept, keeper)  # type: ignore[arg-type]
    proposal = _proposal(EXP3, RIGHT, ["kept right", "fixed", "kept right"], [1.0, 1.0, 1.0])
    assert criterion.should_accept(proposal, STATE) is False
    assert criterion.reject_reason(proposal, STATE).startswith("quarantined: review: not_instructions: ")
    ((candidate, parent, reason, iteration),) = keeper.kept
    assert candidate == proposal.candidate and parent == 0 and iteration == 2 and "truncated" in reason
    again = _proposal(EXP3, RIGHT, RIGHT)
    assert criterion.should_accept(again, STATE) is False and len(keeper.kept) == 1  # one copy per text
    assert criterion.reject_reason(again, STATE).startswith("quarantined earlier in this run: ")


@pytest.mark.parametrize(("accept", "after", "scores", "accepted"), [
    ("strict", ["kept right", "fixed", "kept right"], [1.0, 1.0, 1.0], True),
    ("strict", RIGHT, WRONG_KEPT, False),
    ("equal", RIGHT, WRONG_KEPT, True),                                       # a tie, same verdicts
    ("equal", ["kept right", "missed error", "kept right"], WRONG_KEPT, False),  # a tie that approves everything
    ("equal", ["false alarm", "kept wrong after review", "false alarm"], WRONG_KEPT, False),  # rejects everything
    ("equal", ["broken", "fixed", "kept right"], WRONG_KEPT, False),          # a tie that breaks a right call
    ("equal", ["kept right", "missed error", "missed error"], [1.0, 0.0, 0.0], False),  # worse
])
def test_acceptance_is_strict_or_equal_with_the_collapse_check_on_a_tie(accept: str, after: list[str],
                                                                         scores: list[float], accepted: bool) -> None:
    criterion = ReviewerAcceptance(accept)  # type: ignore[arg-type]
    proposal = _proposal(GOOD, RIGHT, after, scores)
    assert criterion.should_accept(proposal, STATE) is accepted
    if not accepted and accept == "equal" and sum(scores) == sum(WRONG_KEPT):
        assert criterion.reject_reason(proposal, STATE).startswith("ties its parent on the minibatch (2) but ")


def test_outcome_classes_are_read_from_the_traces_or_harm_from_the_objectives() -> None:
    assert outcome_classes(_Eval(WRONG_KEPT, RIGHT)) == RIGHT

    @dataclass
    class _Untraced:
        scores: list[float]
        objective_scores: list[dict[str, float]]
        trajectories: None = None

    untraced = _Untraced([1.0, 0.0], [{"help": 0.0, "no_harm": 1.0}, {"help": 0.0, "no_harm": 0.0}])
    assert outcome_classes(untraced) == [None, "broken"]


# -- run_optimize with a degenerate reflection LM ------------------------------------------------------------------

DEGENERATE = {  # name -> (the reflection LM's text, the rule that must quarantine it)
    # experiment 3's text: approves like the seed, so it ties on every minibatch
    "tie": (EXP3, "not_instructions"),
    # the same request, carrying the keyword the scripted reviewer acts on: it would win on train and val
    "gain": (f"{world.KEYWORD}. Please provide a comprehensive and well-structured instruction for the assistant to "
             "consider, so that it can check the values.", "not_instructions"),
    # a real instruction that lists the train examples' cities (the minibatch's are always among them)
    "copies": (f"{world.KEYWORD}: reject a call unless its city is one of Paris, Berlin, Rome, Madrid, Vienna or "
               "Oslo; approve the other calls.", "copies_values: proper names from the query or gold"),
}


def _degenerate_reflection(text: str) -> Any:
    def handler(request: dict) -> object:
        if world.is_rewrite(request):
            return world.rewrite_reply(request, text)
        return world.handler(request)
    return handler


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(params=sorted(DEGENERATE))
def degenerate_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, list[Any], str, str]]:
    text, rule = DEGENERATE[request.param]
    events: list[Any] = []
    with ScriptedOpenAIServer(_degenerate_reflection(text)) as srv:
        dataset, prompts = world.write_world(tmp_path)
        spec = f"fake@{srv.url}"
        config = OptimizeConfig(base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts, accept="equal",
                                proposer="rewrite",
                                runs_dir=str(tmp_path / "runs"), max_metric_calls=20, workers=2, mechanism="r1",
                                evaluate_test=False)
        yield run_optimize(config, on_event=events.append), events, text, rule


@pytest.mark.integration
def test_a_degenerate_proposal_is_quarantined_not_accepted_and_not_best(degenerate_run, tmp_path: Path) -> None:
    result, events, text, rule = degenerate_run
    store = PromptStore(tmp_path / "prompts")
    quarantined = [v for v in store.list("reviewer") if v.quarantine is not None]
    assert [v.instructions["review"] for v in quarantined] == [text]
    (kept,) = quarantined
    assert kept.parents == ["v2"] and kept.source == "gepa" and rule in kept.quarantine
    assert kept.version not in result.versions.values() and result.versions == {0: "v2"}  # never in the pool
    assert result.best_version == "v2" and store.aliases("reviewer")["reviewer"]["best"] == "v2"
    with pytest.raises(ArtifactError, match="is quarantined"):
        store.alias("reviewer", "best", kept.version)
    listed = json.loads((result.run_dir / "quarantine.json").read_text())["quarantined"]
    assert [q["version"] for q in listed] == [kept.version] and listed[0]["parent"] == "v2"
    assert any(e.kind == "warning" and f"quarantined as reviewer@{kept.version}" in e.message for e in events)

    html = render_report([result.run_dir])
    assert "Quarantined proposals" in html and rule.split(":")[0] in html


@pytest.mark.integration
def test_a_degenerate_rule_from_the_add_proposer_is_quarantined_and_not_proposed_again(tmp_path: Path) -> None:
    """The small model's classic answer as one rule: asked twice, handed on, quarantined, remembered."""
    rule = "Please provide more detailed instructions for the reviewer to follow."

    def handler(request: dict) -> object:
        return world.edit_reply(rule) if world.is_edit_request(request) else world.handler(request)

    with ScriptedOpenAIServer(handler) as srv:
        result = run_optimize(world.config(tmp_path, srv, accept="equal", max_metric_calls=20, evaluate_test=False))
        edit_requests = [r for r in srv.chat_requests if world.is_edit_request(r.body or {})]
    (kept,) = [v for v in PromptStore(tmp_path / "prompts").list("reviewer") if v.quarantine is not None]
    assert kept.instructions["review"] == f"{world.SEED_INSTRUCTION}\n\nAdditional rules:\n- {rule}"
    assert "not_a_rule: asks for instructions" in kept.quarantine
    assert result.versions == {0: "v2"} and result.best_version == "v2"
    memory = json.loads((result.run_dir / "edit_memory.json").read_text())["refused"]
    assert [e["changes"] for entries in memory.values() for e in entries] == [[f"added as rule 2: {rule}"]]
    # every later request from the seed shows the refusal, and a repeat is not evaluated again
    later = [r for r in edit_requests[2:] if "Edits already tried and refused" in json.dumps(r.body)]
    assert len(edit_requests) > 2 and len(later) == len(edit_requests) - 2


# -- the writer: quarantined versions across a resume, and best with the margin ---------------------------------


def _writer(tmp_path: Path, events: list[Any] | None = None) -> Any:
    store = PromptStore(tmp_path / "prompts", seeds=None)
    seed = store.save_new("reviewer", {"review": world.SEED_INSTRUCTION}, suffix="", source="manual")  # v1
    return ArtifactWriter(store, seed_version=seed, map_path=tmp_path / "artifacts.json", metadata={},
                          spent=lambda: 0.0, sink=events.append if events is not None else None)


def test_a_resumed_run_remembers_the_texts_it_quarantined(tmp_path: Path) -> None:
    first = _writer(tmp_path)
    first.quarantine({"reviewer.review": EXP3}, 0, "review: not_instructions: ...", 2)
    assert first.errors == [] and first.quarantined == [
        {"version": "v2-gepa", "sha256": first.store.get("reviewer", "v2-gepa").sha256, "parent": "v1", "iteration": 2}]
    resumed = _writer(tmp_path)  # a new process: it reads <run>/quarantine.json
    assert resumed.quarantined_reason({"reviewer.review": EXP3}) == "review: not_instructions: ..."
    assert resumed.quarantined_reason({"reviewer.review": GOOD}) is None
    assert ReviewerAcceptance("equal", resumed).should_accept(
        _proposal(EXP3, RIGHT, RIGHT), STATE) is False


def test_best_saved_keeps_the_seed_under_the_margin_and_says_why(tmp_path: Path) -> None:
    events: list[Any] = []
    writer = _writer(tmp_path, events)
    writer.versions.update({1: "v3-gepa", 2: "v4-gepa"})
    writer.val_means.update({0: 0.70, 1: 0.70, 2: 0.75})  # experiment 3's trajectory on 20 val examples
    assert writer.best_saved(20) == writer.seed.version
    assert [e.kind for e in events] == ["warning"] and "v4-gepa has +1 val examples" in events[0].message
    writer.val_means[2] = 0.80
    assert writer.best_saved(20) == "v4-gepa"
