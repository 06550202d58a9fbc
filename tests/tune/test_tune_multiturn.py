"""tune on conversations: trials are multi-turn evaluate runs on val, the front is re-evaluated on test.

The scripted server is ``test_multiturn_compare.Scripted``: the agent goes wrong at
multi_turn_base_0's first step (an entry of val), reviewer v1 approves everything, v2 rejects the
wrong call. So the v2 trial fixes one entry and the v1 trial none, by BFCL's checker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.report.pages import build_part
from saag_opt.runfiles import read_header
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune import TuneConfig, run_tune
from saag_opt.tune.preflight import preflight_tune
from tests.compare.test_multiturn_compare import MARKER, Scripted
from tests.episodes.world import needs_bfcl
from tests.report import runs

pytestmark = [pytest.mark.integration, needs_bfcl]


def _space(tmp_path: Path, url: str, v1: str, v2: str) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(f'[fixed]\nbase = "{url}"\nreviewer = "{url}"\ndataset = "bfcl:multi_turn_base"\nlimit = 2\n'
                    f'mechanism = "r2"\nretries = 0\nretry_base_delay = 0.01\n[search]\nprompt = ["{v1}", "{v2}"]\n',
                    encoding="utf-8")
    return path


def test_trials_on_conversations_are_scored_by_bfcls_checker_and_the_front_runs_on_test(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = runs.prompt_files(tmp_path / "prompts", MARKER)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "prompts"))
    with ScriptedOpenAIServer(Scripted(limit=None)) as server:
        space = _space(tmp_path, f"fake@{server.url}", v1, v2)
        estimate = preflight_tune(TuneConfig(space=space, sampler="grid", runs_dir=tmp_path / "runs"))
        assert server.chat_requests == [] and estimate.to_dict()["roles"]["reviewer"]["calls"] > 0
        assert any("agent steps per user turn" in a for a in estimate.assumptions)
        result = run_tune(TuneConfig(space=space, sampler="grid", runs_dir=tmp_path / "runs"))
    summary = result.summary
    assert summary is not None
    helped = {t.params["prompt"]: t.metrics["help"] for t in result.rows if t.state == "COMPLETE"}
    assert helped == {v1: 0.0, v2: 1.0}
    trial_runs = sorted((result.run_dir / "trials").glob("*/run.json"))
    assert trial_runs and all(read_header(p.parent).verb == "evaluate-multiturn" for p in trial_runs)
    assert summary.test and all(t.error is None and t.run_dir for t in summary.test)
    assert all(read_header(Path(str(t.run_dir))).dataset["split"] == "test" for t in summary.test)
    assert build_part(result.run_dir).sections  # the tune page draws over conversation trials
