"""The GEPA student: components, cheap deep copies, and GEPA wiring with a stand-in r1 mechanism."""

from __future__ import annotations

import copy
import json
import pickle
import threading
from dataclasses import dataclass, field
from pathlib import Path

import dspy
import pytest
from pydantic import ValidationError

from saag_opt.agents.mechanisms.registry import parse_mechanism
from saag_opt.agents.reviewer import Reviewer
from saag_opt.artifacts.store import PromptStore
from saag_opt.errors import ConfigError, CostCapReached, ModelUnavailableError, RunError
from saag_opt.lm.retry import LMCallError
from saag_opt.model import Example, Prediction, ToolCall
from saag_opt.optimize.callbacks import ArtifactWriter
from saag_opt.optimize.calls import CALLS, metric
from saag_opt.optimize.config import OptimizeConfig
from saag_opt.optimize.program import FailedRollout, ReviewerProgram, RolloutContext, to_dspy_examples
from saag_opt.optimize.wiring import GepaSettings, build_gepa, compile_gepa
from saag_opt.testing.scripted_server import ScriptedOpenAIServer
from tests.optimize import optimize_world as scripted


@dataclass
class _Round:
    verdict: object
    revised: Prediction | None


@dataclass
class _Outcome:
    base: Prediction
    final: Prediction
    rounds: list = field(default_factory=list)


def _standin_r1(example: Example, reviewer: Reviewer) -> _Outcome:
    city = scripted._asked_city(example.query)
    wrong = scripted.CITIES.index(city) % 2 == 0
    base = Prediction(calls=(ToolCall("get_weather", {"city": scripted.WRONG if wrong else city}),))
    verdict = reviewer.review_call(example, base)
    if not verdict.error:
        return _Outcome(base, base, [_Round(verdict, None)])
    fixed = Prediction(calls=(ToolCall("get_weather", {"city": city}),))
    return _Outcome(base, fixed, [_Round(verdict, fixed)])


@pytest.mark.integration
def test_gepa_accepts_better_instruction_and_writes_artifact(tmp_path: Path) -> None:
    store = PromptStore(tmp_path / "prompts")
    seed = store.save_new("reviewer", {"review": scripted.SEED_INSTRUCTION}, suffix="", source="manual")
    with ScriptedOpenAIServer(scripted.handler) as server:
        lm = dspy.LM("openai/scripted", api_base=server.url, api_key="k", cache=False)
        reviewer = Reviewer.from_prompt(seed)
        for p in reviewer.predictors():
            p.lm = lm
        ctx = RolloutContext(_standin_r1)
        student = ReviewerProgram(reviewer, ctx, ("review",))
        writer = ArtifactWriter(store, seed_version=seed, map_path=tmp_path / "artifacts.json",
                                metadata={"models": {"reviewer": "scripted"}}, spent=lambda: 0.0)
        settings = GepaSettings(max_metric_calls=40, log_dir=tmp_path / "gepa", reflection_lm=lm,
                                minibatch=3, workers=2, callbacks=[writer])
        result = compile_gepa(build_gepa(CALLS, settings), student,
                              to_dspy_examples(scripted.make_examples(6, "train")),
                              to_dspy_examples(scripted.make_examples(4, "val", offset=6)))
    assert writer.errors == []
    assert result.val_aggregate_scores[0] == 0.5 and max(result.val_aggregate_scores) == 1.0
    best = result.candidates[result.best_idx]
    assert scripted.KEYWORD in best.reviewer.review.signature.instructions
    assert best.reviewer.review.lm is lm and best.context is ctx
    saved = store.get("reviewer", writer.versions[result.best_idx])
    assert saved.parents == [seed.version] and saved.source == "gepa"
    assert saved.scores["val_accuracy"] == 1.0
    assert json.loads((tmp_path / "artifacts.json").read_text())["versions"]["1"] == saved.version


def _student(lm: object | None = None, components: tuple[str, ...] = ("review",)) -> ReviewerProgram:
    reviewer = Reviewer.from_prompt({"review": "seed"})
    for p in reviewer.predictors():
        p.lm = lm
    return ReviewerProgram(reviewer, RolloutContext(_standin_r1), components)


def test_only_the_mechanism_components_are_gepa_predictors() -> None:
    assert [n for n, _ in _student().named_predictors()] == ["reviewer.review"]
    assert [n for n, _ in _student(components=("grade",)).named_predictors()] == ["reviewer.grade"]
    assert set(_student().instructions()) == {"review", "select", "grade"}


@pytest.mark.parametrize(("spec", "expected"), [("r2", ("review",)), ("gate+r3", ("review",)), ("s5", ("select",)),
                                                ("g5", ("grade",)), ("binary", ()), ("saag", ()), ("none", ())])
def test_mechanism_components_are_the_predictors_it_calls(spec: str, expected: tuple[str, ...]) -> None:
    assert parse_mechanism(spec).components == expected


@pytest.mark.parametrize("spec", ["binary", "saag", "none"])
def test_mechanism_without_reviewer_is_rejected(spec: str) -> None:
    with pytest.raises(ValidationError, match=f"'{spec}' never calls the LLM reviewer"):
        OptimizeConfig(mechanism=spec, workers=1)
    with pytest.raises(ConfigError, match="no reviewer predictor to evolve"):
        ReviewerProgram(Reviewer.from_prompt({"review": "x", "select": "x", "grade": "x"}),
                        RolloutContext(_standin_r1), parse_mechanism(spec).components)


def test_build_program_copy_shares_lm_and_context_but_not_signatures() -> None:
    lm = dspy.LM("openai/never-called", api_key="k", cache=False)
    student = _student(lm)
    student.reviewer.client_lock = threading.Lock()  # unpicklable state must be shared, not copied
    clone = student.deepcopy()  # what DspyAdapter.build_program does
    clone.reviewer.review.signature = clone.reviewer.review.signature.with_instructions("changed")
    assert clone.reviewer.review.lm is lm and clone.context is student.context
    assert clone.reviewer.client_lock is student.reviewer.client_lock
    assert student.reviewer.review.signature.instructions == "seed"
    assert copy.deepcopy(student.context) is student.context


def test_context_refuses_pickling() -> None:
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(RolloutContext(_standin_r1))


def test_fatal_model_error_is_remembered() -> None:
    def boom(example: Example, reviewer: object) -> None:
        raise ModelUnavailableError("server down")

    ctx = RolloutContext(boom)
    with pytest.raises(ModelUnavailableError):
        ctx.run(scripted.make_examples(1, "train")[0], None)
    assert isinstance(ctx.fatal, ModelUnavailableError) and ctx.rollouts == 1


def test_a_rollout_that_raises_is_a_failed_rollout_counted_neither_fixed_nor_broken() -> None:
    """The adapter used to score it with no objectives, so the candidates' val counts did not add up."""
    def flaky(example: Example, reviewer: object) -> None:
        raise LMCallError("local: timed out (after 5 attempt(s))", attempts=5)

    example = scripted.make_examples(1, "train")[0]
    outcome = RolloutContext(flaky).run(example, None)
    assert isinstance(outcome, FailedRollout)
    scored = metric(to_dspy_examples([example])[0], dspy.Prediction(outcome=outcome, calls=[]))
    assert scored.score == 0.0 and scored.objective_scores == {"help": 0.0, "no_harm": 1.0}
    assert "LMCallError: local: timed out" in scored.feedback


@pytest.mark.parametrize("fault", [CostCapReached("the cap"), ConfigError("bad max_cost")])
def test_a_refused_call_under_the_cap_or_a_bad_configuration_still_stops_the_rollout(fault: Exception) -> None:
    def refused(example: Example, reviewer: object) -> None:
        raise fault

    with pytest.raises(type(fault)):
        RolloutContext(refused).run(scripted.make_examples(1, "train")[0], None)


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"versions": {"x": "v3"}}'])
def test_a_damaged_candidate_map_is_a_run_error_naming_it(tmp_path: Path, content: str) -> None:
    """It used to be a JSONDecodeError (or AttributeError) traceback on resume."""
    store = PromptStore(tmp_path / "prompts")
    seed = store.save_new("reviewer", {"review": "Review."}, suffix="", source="manual")
    path = tmp_path / "artifacts.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunError, match=r"artifacts\.json: unreadable .* start a new run"):
        ArtifactWriter(store, seed_version=seed, map_path=path, metadata={}, spent=lambda: 0.0)
