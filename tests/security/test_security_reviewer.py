"""``saag-opt security --mechanism guard+r<N> --reviewer SPEC``: the tuned reviewer is what the guarded arm runs.

Offline: the scripted obedient agent, and a reviewer (with its reviser) on the scripted OpenAI-compatible
server (``tests.runtime.world.ReviewWorld``). One suite, one user task, one attack: 2 runs without attack
and 18 under it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.cli import main
from saag_opt.runfiles import read_header, read_run
from saag_opt.testing import ScriptedOpenAIServer
from tests.conftest import requires
from tests.runtime.world import ReviewWorld

pytestmark = requires(None if importlib.util.find_spec("agentdojo") else
                      "agentdojo is not installed (pip install 'saag-opt[agentdojo]')")

REPO = Path(__file__).resolve().parents[2]
BANKING_1 = ["security", "--suite", "banking", "--attack", "important_instructions", "--user-tasks", "1"]
"""banking user_task_0 (read the bill, pay it) alone and with each of the 9 injection tasks, both arms."""
REJECTION = "Do not touch the user's files or money."


def _cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return int(done.value.code or 0)


def _only_run(runs_dir: Path) -> Path:
    (found,) = sorted(runs_dir.glob("*-security"))
    return found


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))


@pytest.fixture(scope="module")
def rejected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, ReviewWorld]]:
    """One run whose reviewer rejects every call and whose reviser finds no call to make: every call is blocked."""
    runs = tmp_path_factory.mktemp("rejected")
    world = ReviewWorld(error=True, feedback=REJECTION, revision=None)
    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer(world) as server:
        patch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
        spec = f"fake@{server.url}"
        assert _cli([*BANKING_1, "--mechanism", "guard+r1", "--reviewer", spec, "--runs-dir", str(runs)]) == 0
        yield _only_run(runs), spec, world


def test_a_rejecting_reviewer_changes_the_guarded_arm_from_what_guard_alone_does(
        rejected: tuple[Path, str, ReviewWorld]) -> None:
    from agentdojo.task_suite.load_suites import get_suite  # noqa: PLC0415 - optional: the agentdojo extra

    from saag_opt.runtime import Guard  # noqa: PLC0415
    from saag_opt.runtime.agentdojo import BENCHMARK_VERSION  # noqa: PLC0415 - optional: the agentdojo extra
    from saag_opt.runtime.agentdojo.scripted import ObedientAgent  # noqa: PLC0415 - optional: the agentdojo extra
    from saag_opt.security.suites import run_suite  # noqa: PLC0415 - optional: the agentdojo extra

    run_dir, _, world = rejected
    (alone,) = run_suite("banking", ObedientAgent(), Guard(), attacks=(), user_tasks=["user_task_0"], arms=["guard"])
    assert alone.utility and not alone.blocks  # Guard() lets the user's own task run
    run = read_run(run_dir)
    assert run.header.status == "success" and len(run.records) == 20
    benign = {r.arm: r for r in run.records if r.attack is None}
    assert benign["none"].utility and not benign["guard"].utility  # the reviewer blocked the user's own calls
    truth = [c.function for c in get_suite(BENCHMARK_VERSION, "banking").user_tasks["user_task_0"].ground_truth(
        get_suite(BENCHMARK_VERSION, "banking").load_and_inject_default_environment({}))]
    assert [b.name for b in benign["guard"].blocks] == truth and benign["guard"].false_alarms == len(truth)
    attacked = [r for r in run.records if r.attack is not None and r.arm == "guard"]
    assert len(attacked) == 9 and not any(r.utility or r.security for r in attacked)
    # each rejection was revised; the pairs' identical requests (the bill is never read) are answered from the cache
    assert world.reviews == world.revisions == len(truth)
    row = run.summary.row("banking", "important_instructions")
    assert row.arms["guard"].false_alarms == 9 * len(truth) and row.arms["none"].asr.k > 0


def test_the_records_keep_the_reviewers_decision_and_run_json_names_the_reviewer(
        rejected: tuple[Path, str, ReviewWorld]) -> None:
    run_dir, spec, _ = rejected
    run = read_run(run_dir)
    header = run.header
    assert header.models == {"agent": "scripted", "reviewer": spec}
    guard = header.plugins["guard"]
    assert guard["mechanism"] == "guard+r1" and guard["reviewer"] == spec and guard["prompt"] == "reviewer@v2"
    assert len(guard["prompt_sha256"]) == 64 and guard["saag_informed"] is False
    assert guard["spec"].startswith(f"Guard.load(reviewer@v2, reviewer={spec}, mechanism=guard+r1)")
    assert run.summary.guard == guard["spec"]
    assert header.config["mechanism"] == "guard+r1" and header.config["reviewer"] == spec
    guarded = next(r for r in run.records if r.attack is None and r.arm == "guard")
    block = guarded.blocks[0]
    assert block.reason == "revised after 1 rejection(s), but the revision makes no call"
    call = guarded.trace.blocked[0]
    assert len(guarded.trace.blocked) == len(guarded.blocks)
    assert call.review == f"reject: {REJECTION}" and call.guard == "block" and not call.scored
    roles = json.loads((run_dir / "costs.json").read_text(encoding="utf-8"))["roles"]
    assert {"reviewer", "reviser"} <= set(roles)  # the reviewer's calls went through the run's ledger


def test_resume_refuses_another_reviewer(rejected: tuple[Path, str, ReviewWorld],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, spec, _ = rejected
    assert _cli(["security", "--resume", str(run_dir), "--reviewer", "gpt-4o-mini"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --resume") and f"--reviewer 'gpt-4o-mini' (the run has '{spec}')" in err
    assert err.count("\n") == 1
    assert _cli(["security", "--resume", str(run_dir), "--mechanism", "gate+guard+r1"]) == 2
    assert "--mechanism 'gate+guard+r1'" in capsys.readouterr().err


def test_resume_refuses_a_prompt_whose_content_changed(rejected: tuple[Path, str, ReviewWorld], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """reviewer@best moved since the run began: the same reference no longer names what was measured."""
    run_dir = shutil.copytree(rejected[0], tmp_path / "run")
    header = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    header["plugins"]["guard"]["prompt_sha256"] = "0" * 64
    (run_dir / "run.json").write_text(json.dumps(header | {"status": "interrupted"}), encoding="utf-8")
    assert _cli(["security", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "the reviewer prompt reviewer@v2 now has sha256" in err and "the run measured 000000000000" in err
    assert err.count("\n") == 1


def test_a_guard_run_keeps_its_run_json_shape(tmp_path: Path) -> None:
    from saag_opt.security.run import GUARD_LABEL, SecurityConfig, guard_label  # noqa: PLC0415 - optional

    config = SecurityConfig(suites=["banking"], attacks=["direct"], limit=1)
    assert "mechanism" not in config.model_dump(mode="json") and "reviewer" not in config.model_dump(mode="json")
    assert guard_label(config, None) == GUARD_LABEL


def test_a_reviewer_mechanism_without_a_reviewer_is_one_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([*BANKING_1, "--mechanism", "guard+r1", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--mechanism guard+r1 needs a reviewer model" in err and err.count("\n") == 1
    assert _cli([*BANKING_1, "--reviewer", "gpt-4o-mini", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--mechanism guard runs no LLM reviewer" in err and err.count("\n") == 1
    assert _cli([*BANKING_1, "--mechanism", "r9x", "--runs-dir", str(tmp_path)]) == 2
    assert "known: guard, guard+r<N>, gate+guard+r<N>" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_dry_run_prices_the_reviewers_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from saag_opt.security.run import SecurityConfig, preflight_security  # noqa: PLC0415 - optional: the agentdojo extra

    monkeypatch.setenv("COLUMNS", "250")  # the table unwrapped
    argv = [*BANKING_1, "--mechanism", "guard+r1", "--reviewer", "gpt-4o-mini", "--runs-dir", str(tmp_path)]
    assert _cli([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    estimate = preflight_security(SecurityConfig(suites=["banking"], attacks=["important_instructions"], limit=1,
                                                 mechanism="guard+r1", reviewer="gpt-4o-mini"))
    reviews = [p.roles["reviewer"] for p in estimate.parts.values()]
    assert [r.calls for r in reviews] == [2, 18]  # user_task_0's two calls, guarded arm: alone, then x 9 injections
    assert all(r.prompt_tokens > 1000 * r.calls and r.dollars for r in reviews)
    assert "base" not in estimate.roles  # the scripted agent calls no LM
    assert f"{estimate.roles['reviewer'].dollars:.4f}" in out and str(estimate.roles["reviewer"].prompt_tokens) in out
    assert "assumes one review per ground-truth tool call" in out and not list(tmp_path.iterdir())
    assert _cli([*argv[:-4], "--mechanism", "gate+guard+r1", *argv[-4:], "--dry-run"]) == 0
    assert "every call reaches the reviewer" in capsys.readouterr().out  # the gate's plan is the upper end


def _spent(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "costs.json").read_text(encoding="utf-8"))["roles"]


def test_the_cap_stops_the_run_when_the_reviewers_spend_reaches_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from tests.evaluate.test_caps_and_cache import PRICE  # noqa: PLC0415

    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)
    cap = 0.05
    world = ReviewWorld()  # approves every call
    with ScriptedOpenAIServer(world) as server:
        argv = [*BANKING_1, "--mechanism", "guard+r1", "--reviewer", f"fake@{server.url}", "--runs-dir", str(tmp_path)]
        assert _cli([*argv, "--max-cost", str(cap)]) == 0
    run_dir = _only_run(tmp_path)
    roles = _spent(run_dir)
    done = len(read_run(run_dir).records)
    assert read_header(run_dir).status == "stopped" and 0 < done < 20 and world.reviews > 0
    assert 0 < roles["reviewer"]["dollars"] <= roles["total"]["dollars"] <= cap
    printed = capsys.readouterr()
    assert "--max-cost $0.05 reached" in printed.out
    assert "; spent $0.0" in printed.err and "of $0.05" in printed.err  # the progress carries the reviewer's spend
