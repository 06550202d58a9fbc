"""evaluate's reviewer_temperature and reasoning_effort reach the reviewer's requests (and only them):
tune searches these, so a value that silently does not arrive would make every trial the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.testing import ScriptedOpenAIServer, ScriptedWorld

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _world() -> ScriptedWorld:
    """The base agent calls the first tool with no arguments; the reviewer approves."""
    return ScriptedWorld(base=lambda r: [{"name": r.tools[0], "arguments": {}}], review=lambda r: False)


@pytest.mark.parametrize(("options", "expected"), [
    ({}, {"temperature": 0.0}),
    ({"reviewer_temperature": 0.7, "reasoning_effort": "low"}, {"temperature": 0.7, "reasoning_effort": "low"}),
])
def test_reviewer_options_are_sent_with_reviewer_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          options: dict, expected: dict) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    world = _world()
    with ScriptedOpenAIServer(world) as server:
        run_evaluation(EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r1",
                                      limit=2, split="val", runs_dir=tmp_path / "runs", cache_dir=tmp_path / "c",
                                      **options))
    reviewer = [r.body for r in world.of("review")]
    base = [r.body for r in world.of("base")]
    assert reviewer and base
    for body in reviewer:
        assert {k: body.get(k) for k in expected} == expected
    assert all(b.get("temperature") == 0.0 and "reasoning_effort" not in b for b in base)


def test_bad_reviewer_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="reviewer_temperature"):
        EvaluateConfig(base="fake", reviewer="fake", reviewer_temperature=3.0)
    with pytest.raises(ValueError, match="reasoning_effort"):
        EvaluateConfig(base="fake", reviewer="fake", reasoning_effort="extreme")
