"""Per-model request rules: what each OpenAI family takes, refused at validation, and every request body the
project sends checked against the rules and the ``openai`` SDK's own typed request parameters."""

from __future__ import annotations

import typing
import warnings
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter, ValidationError

from saag_opt.agents.setup import ReviewSetup
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.lm.request_rules import check_model, efforts_of, family_of, shape_request, takes_json_schema
from saag_opt.optimize import OptimizeConfig, run_optimize
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune.space import load_space
from tests.optimize import optimize_world as world

REPO = Path(__file__).resolve().parents[2]
SDK_PARAMS = CompletionCreateParamsNonStreaming
SDK_KEYS = frozenset(typing.get_type_hints(SDK_PARAMS))


@pytest.mark.parametrize(("model", "family", "efforts", "json_schema"), [
    ("gpt-4o", "chat", set(), True),
    ("gpt-4o-mini-2024-07-18", "chat", set(), True),
    ("gpt-4.1-nano", "chat", set(), True),
    ("gpt-5-chat-latest", "chat", set(), True),
    ("chatgpt-4o-latest", "chat", set(), False),
    ("gpt-5-mini", "reasoning", {"minimal", "low", "medium", "high"}, True),
    ("gpt-5.1", "reasoning", {"low", "medium", "high"}, True),
    ("o4-mini", "reasoning", {"low", "medium", "high"}, True),
    ("openai/o3-mini", "reasoning", {"low", "medium", "high"}, True),
    ("o1-mini", "no-system", set(), False),
    ("gpt-4-turbo", "legacy", set(), False),
    ("ft:gpt-4o-mini-2024-07-18:acme::x1", "chat", set(), True),
    ("qwen2.5-coder-1.5b", "other", {"minimal", "low", "medium", "high"}, True),
])
def test_each_model_id_has_one_family_and_what_it_takes(model: str, family: str, efforts: set[str],
                                                         json_schema: bool) -> None:
    assert family_of(model).name == family
    assert efforts_of(model) == efforts and takes_json_schema(model) is json_schema


def test_a_reasoning_request_is_renamed_and_its_temperature_dropped_with_one_warning() -> None:
    with pytest.warns(UserWarning, match="gpt-5-nano is a reasoning model: temperature=0.0 is ignored"):
        shaped = shape_request("gpt-5-nano", {"temperature": 0.0, "max_tokens": 200, "seed": 3})
    assert shaped == {"max_completion_tokens": 16000, "seed": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per model and value
        assert shape_request("gpt-5-nano", {"temperature": 0.0}) == {}


@pytest.mark.parametrize(("model", "options", "message"), [
    ("gpt-4o-mini", {"reasoning_effort": "low"}, "gpt-4o-mini does not take reasoning_effort='low': it is a chat"),
    ("o4-mini", {"reasoning_effort": "minimal"}, r"takes: high, low, medium"),
    ("gpt-5-mini", {"logprobs": True}, "does not take logprobs=True"),
    ("gpt-4-turbo", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
     "json_schema response format"),
])
def test_what_a_model_does_not_take_is_one_clear_error(model: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        shape_request(model, options)


def test_a_model_that_is_not_openais_gets_its_request_as_given() -> None:
    options = {"temperature": 0.0, "max_tokens": 200, "reasoning_effort": "low", "logprobs": True}
    assert shape_request("qwen2.5-coder-1.5b", options) == options


def test_set_ups_refuse_at_validation_what_a_model_does_not_take() -> None:
    with pytest.raises(ValidationError, match="--reviewer gpt-4o-mini: gpt-4o-mini does not take reasoning_effort"):
        ReviewSetup(base="gpt-4o", reviewer="gpt-4o-mini", reasoning_effort="low")
    with pytest.raises(ValidationError, match="--base o1-preview: o1-preview cannot be the base"):
        ReviewSetup(base="o1-preview", reviewer="gpt-5-mini")
    with pytest.raises(ValidationError, match="--reflection chatgpt-4o-latest: .* or --proposer rewrite"):
        OptimizeConfig(base="gpt-4o", reviewer="gpt-4o-mini", reflection="chatgpt-4o-latest")
    assert OptimizeConfig(base="gpt-4o", reviewer="gpt-4o-mini", reflection="chatgpt-4o-latest",
                          proposer="rewrite").proposer == "rewrite"
    assert ReviewSetup(base="gpt-4o", reviewer="gpt-5-mini", reasoning_effort="minimal").reasoning_effort == "minimal"
    check_model("local", "reviewer", reasoning_effort="high", json_schema=True)  # not OpenAI's: nothing to refuse


@pytest.mark.parametrize("space", sorted((REPO / "experiments" / "spaces").glob("*.toml")), ids=lambda p: p.name)
def test_every_configuration_of_every_shipped_space_is_one_its_models_take(space: Path) -> None:
    loaded = load_space(space)
    points = loaded.grid_points() or []
    assert points
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dropped effort is said once; here every point is built
        configs = [loaded.config(point) for point in points]
    for config in configs:
        setup = config.setup
        if setup.reviewer is not None:
            check_model(setup.reviewer, "reviewer", reasoning_effort=setup.reasoning_effort)
        check_model(setup.base, "base")


def test_the_paper_space_sends_the_effort_to_gpt5_mini_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.request_rules._WARNED", set())  # said once per process
    space = load_space(REPO / "experiments" / "spaces" / "paper-bfcl.toml")
    point = {"mechanism": "r2", "prompt": "reviewer@v2", "reasoning_effort": "low", "saag_informed": False}
    with pytest.warns(UserWarning, match="reasoning_effort is not sent to gpt-4o-mini"):
        assert space.config({**point, "reviewer": "gpt-4o-mini"}).setup.reasoning_effort is None
    assert space.config({**point, "reviewer": "gpt-5-mini"}).setup.reasoning_effort == "low"


def _sent_as_the_sdk_types_it(body: dict[str, Any]) -> None:
    unknown = set(body) - SDK_KEYS
    assert not unknown, f"not a chat completion parameter: {sorted(unknown)}"
    TypeAdapter(SDK_PARAMS).validate_python(body)


FAMILY_MODELS = [("gpt-4o-mini", None), ("gpt-4.1", None), ("gpt-5-mini", "minimal"), ("o4-mini", "low"),
                 ("gpt-4-turbo", None)]


@pytest.mark.integration
@pytest.mark.parametrize(("model", "effort"), FAMILY_MODELS, ids=[m for m, _ in FAMILY_MODELS])
def test_every_request_body_of_evaluate_and_optimize_is_one_the_family_and_the_sdk_take(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, effort: str | None) -> None:
    """Base (tools, candidates at temperatures), reviewer (review, select, grade), reflection (a json_schema edit),
    and the lines of a ``--batch`` run."""
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"{model}@{server.url}"
        for mechanism in ("r2", "s3", "g3"):
            run_evaluation(EvaluateConfig(base=spec, reviewer=spec, mechanism=mechanism, limit=2, split="val",
                                          reasoning_effort=effort, reviewer_temperature=0.0,
                                          runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache"))
        run_evaluation(EvaluateConfig(base=spec, reviewer=spec, mechanism="r2", limit=2, split="train", batch=True,
                                      reasoning_effort=effort, runs_dir=tmp_path / "runs-batch",
                                      cache_dir=tmp_path / "cache-batch"))
        proposer = "rewrite" if not takes_json_schema(model) else "add"
        run_optimize(world.config(tmp_path, server, base=spec, reviewer=spec, reflection=spec, proposer=proposer,
                                  reasoning_effort=effort, max_metric_calls=14, evaluate_test=False))
        bodies = [r.body or {} for r in server.chat_requests]
        batched = list(server.batch_line_bodies)
    assert batched and any("tools" in b for b in batched)  # the Batch API lines: built by another path (lm15)
    bodies += batched
    assert any("tools" in b for b in bodies) and any("tools" not in b for b in bodies)
    assert proposer == "rewrite" or any(world.is_edit_request(b) for b in bodies)
    assert effort is None or any(b.get("reasoning_effort") == effort for b in bodies)
    for body in bodies:
        _sent_as_the_sdk_types_it(body)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a body the rules would still change (drop, rename) fails here
            assert shape_request(model, body) == body
