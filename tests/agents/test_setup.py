"""One review set-up (``agents.setup``): resolved once, written flat, opened by one builder, resumed by one rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from saag_opt.agents.base import BasePredictionCache
from saag_opt.agents.mechanisms import registry as mechanisms
from saag_opt.agents.mechanisms.gate import Gate
from saag_opt.agents.mechanisms.progressive import Progressive
from saag_opt.agents.mechanisms.repair import SelfRepair
from saag_opt.agents.setup import ReviewSetup, open_setup
from saag_opt.data import load_dataset
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.lm import CostLedger
from saag_opt.optimize import OptimizeConfig
from saag_opt.optimize.world import build_world
from saag_opt.resuming import refuse_changes, run_options
from saag_opt.testing import ScriptedOpenAIServer
from tests.evaluate.test_runner import World

REPO = Path(__file__).resolve().parents[2]


def test_the_mechanism_is_resolved_once_and_written_as_its_spec() -> None:
    setup = ReviewSetup(base="gpt-4o", reviewer="gpt-4o", mechanism="GATE+R2")
    assert setup.mechanism == Gate(Progressive(2)) and setup.model_dump(mode="json")["mechanism"] == "gate+r2"
    repair = ReviewSetup(base="gpt-4o", mechanism="saag", max_repairs=3)
    assert repair.mechanism == SelfRepair("saag", informative=True, max_repairs=3)
    assert repair.replace(max_repairs=7).mechanism == SelfRepair("saag", informative=True, max_repairs=7)
    assert ReviewSetup.model_validate(setup.model_dump()) == setup


def test_a_config_is_read_and_written_flat_with_the_set_up_inside() -> None:
    config = EvaluateConfig(base="gpt-4o", reviewer="gpt-4o", mechanism="r1", limit=3, workers=2)
    flat = config.model_dump(mode="json")
    assert "setup" not in flat and flat["mechanism"] == "r1" and flat["limit"] == 3
    assert set(flat) == set(EvaluateConfig.option_fields()) - EvaluateConfig.OMITTED_AT_DEFAULT
    tau2 = EvaluateConfig(base="gpt-4o", mechanism="none", dataset="tau2:mock", trials=2).model_dump(mode="json")
    assert tau2["trials"] == 2 and "user_model" not in tau2  # a tau2 option is written once it is set
    assert EvaluateConfig.model_validate(flat) == config == EvaluateConfig(setup=config.setup, limit=3, workers=2)
    assert config.with_setup(prompt="reviewer@v1").setup.prompt == "reviewer@v1"
    optimize = OptimizeConfig(mechanism="r1", max_metric_calls=50)
    assert (optimize.setup.base, optimize.setup.reviewer) == ("gpt-4o", "gpt-5-mini")  # optimize's default models


@pytest.mark.parametrize(("values", "message"), [
    ({"mechanism": "r-two"}, r"^mechanism: unknown mechanism 'r-two'"),
    ({"mechanism": "r2"}, r"^config: mechanism 'r2' needs a reviewer model"),
    ({"reviewer": "gpt-4o", "reviewer_temperature": 3.0}, r"^reviewer_temperature: Input should be less"),
])
def test_a_bad_set_up_option_is_named_like_the_verbs_own(values: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        EvaluateConfig(base="gpt-4o", **values)
    assert re.match(message, str(ConfigError.from_validation(info.value)))


def test_the_resume_rule_lets_run_options_change_and_nothing_else() -> None:
    recorded = EvaluateConfig(base="gpt-4o", reviewer="gpt-4o", mechanism="r1", limit=2, workers=1)
    assert run_options(EvaluateConfig) == {"workers", "max_cost", "fail_on_error", "batch"}
    assert run_options(OptimizeConfig) == {"budget", "max_metric_calls", "max_cost", "workers", "evaluate_test",
                                           "test_limit"}
    changed = refuse_changes(recorded, {"workers": 3, "mechanism": "R1", "runs_dir": "elsewhere"}, where="--resume X")
    assert changed.workers == 3 and changed.setup == recorded.setup and changed.runs_dir == recorded.runs_dir
    with pytest.raises(ConfigError, match=r"^--resume X: --grounding 'paper' \(the run has 'calibrated'\); --limit 5 "
                                          r"\(the run has 2\): a resumed run keeps its recorded configuration; drop "
                                          r"these options or start a new run \(only --batch, --fail-on-error, --max-cost, "
                                          r"--workers may change\)$"):
        refuse_changes(recorded, {"grounding": "paper", "limit": 5, "workers": 2}, where="--resume X")


@pytest.mark.integration
def test_evaluate_and_optimize_open_the_same_base_agent_and_reviewer(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The base agent's cache key and every LM setting agree: one builder opens both (no comment keeps them equal)."""
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    example = load_dataset("shipped:bfcl", split="val", limit=1)[0]
    cache = BasePredictionCache()
    with ScriptedOpenAIServer() as server:
        spec = f"fake@{server.url}"
        options = dict(base=spec, reviewer=spec, prompt="reviewer@v1", mechanism="r1", reviewer_temperature=0.3,
                       retries=1, request_timeout=5.0)
        evaluated = open_setup(EvaluateConfig(**options).setup, CostLedger(), cache)
        optimized = build_world(OptimizeConfig(**options)).condition
    assert cache.key(evaluated.agent, example, None) == cache.key(optimized.agent, example, None)
    for a, b in ((evaluated.agent.lm, optimized.agent.lm), (evaluated.reviewer_lm, optimized.reviewer_lm)):
        assert a is not None and b is not None
        assert (a.kwargs, a.retry, a.model) == (b.kwargs, b.retry, b.model)


@pytest.mark.integration
def test_an_evaluate_run_never_parses_the_mechanism_spec_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))
    examples = load_dataset("shipped:bfcl", split="test", limit=2)
    with ScriptedOpenAIServer(World(examples)) as server:
        config = EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="gate+r1",
                                dataset="shipped:bfcl", split="test", limit=2, workers=1, runs_dir=tmp_path / "runs",
                                cache_dir=tmp_path / "base")
        parsed: list[str] = []
        real = mechanisms.parse_mechanism
        monkeypatch.setattr(mechanisms, "parse_mechanism", lambda spec, **kw: parsed.append(spec) or real(spec, **kw))
        result = run_evaluation(config)
    assert result.summary.mechanism == "gate+r1" and parsed == []
