"""evaluate and compare offer the same review set-up options (one CLI mapping, ``cli.common.config_values``).

``compare`` had no ``--saag-informed`` although its evaluation supported it and the README said it
had one; nor could it or evaluate set the reviewer's temperature, reasoning effort or retries.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from saag_opt.agents.setup import ReviewSetup
from saag_opt.cli import app, main
from saag_opt.data import load_dataset
from saag_opt.optimize import OptimizeConfig
from saag_opt.runfiles import read_header
from saag_opt.testing import ScriptedOpenAIServer, read_request
from saag_opt.testing.scripted_world import ReviewRequest
from tests.evaluate.test_runner import World

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_compare_saag_informed_and_the_reviewer_options_reach_both_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))
    with ScriptedOpenAIServer(World(load_dataset("shipped:bfcl", split="test", limit=2))) as server:
        spec = f"fake@{server.url}"
        with pytest.raises(SystemExit) as info:
            main(["compare", "reviewer@v1", "reviewer@v2", "--base", spec, "--reviewer", spec, "--mechanism", "r1",
                  "--saag-informed", "--grounding", "paper", "--reviewer-temperature", "0.5", "--retries", "1",
                  "--limit", "2", "--workers", "1", "--runs-dir", str(tmp_path / "runs")])
        assert info.value.code in (0, None)
        requests = [read_request(r.body or {}) for r in server.chat_requests]
    reviews = [r for r in requests if isinstance(r, ReviewRequest)]
    assert reviews and all(r.saag_report and r.body.get("temperature") == 0.5 for r in reviews)
    (run_dir,) = (tmp_path / "runs").glob("*-compare")
    evaluation = read_header(run_dir).config["evaluation"]
    assert (evaluation["saag_informed"], evaluation["grounding"], evaluation["retries"]) == (True, "paper", 1)
    for side in ("a", "b"):
        (side_run,) = (run_dir / side).glob("*-evaluate")
        assert read_header(side_run).plugins["reviewer"]["class"] == "SaagInformedReviewer"


@pytest.mark.parametrize("command", ["evaluate", "compare", "optimize"])
def test_each_command_offers_the_set_up_options_with_the_set_up_defaults(command: str) -> None:
    """A set-up option's default is the ReviewSetup field's (optimize: its default models), or None = that."""
    params = {p.name: p for p in typer.main.get_command(app).commands[command].params}  # type: ignore[attr-defined]
    fields = ReviewSetup.model_fields
    offered = {name for name in params if name in fields}
    absent = {"retry_base_delay"} | ({"prompt"} if command == "compare" else {"max_repairs"} if command == "optimize"
                                     else set())
    assert offered == set(fields) - absent  # compare's prompts are A and B; GEPA's mechanisms never self-repair
    defaults = dict(OptimizeConfig.SETUP_DEFAULTS) if command == "optimize" else {}
    for name in offered - {"base"}:  # the set-up requires a base model: each command names its default
        expected = defaults.get(name, fields[name].default)
        assert params[name].default in (None, expected), (name, params[name].default, expected)
