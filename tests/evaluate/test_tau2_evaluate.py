"""``saag-opt evaluate --dataset tau2:mock`` end to end on the scripted server: paired per task, tau2 scores, resume.

The server plays the base agent, the reviewer and tau2's user simulator. On mock's first two tasks
(both: create the task 'Important Meeting' for user_1) the agent first proposes a misspelt title; the
reviewer rejects it and the agent, given the feedback, proposes the right one. Base (unreviewed) scores 0
on both by tau2's DB check, ``r1`` scores 1: two fixes, no harm, per task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from saag_opt.agents.mechanisms.registry import parse_mechanism
from saag_opt.agents.tau2 import DEFAULT_SEED, USER_ROLE_REMINDER, task_sizes, trial_seeds
from saag_opt.cli import app
from saag_opt.data.catalog import load_episodes
from saag_opt.data.tau2_package import missing, tau2
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import preflight_evaluate, preflight_passes
from saag_opt.evaluation.estimate import CHARS_PER_TOKEN, tau2_task_steps
from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.runfiles import read_run
from saag_opt.testing import Reply, ScriptedOpenAIServer, tentative_calls
from tests.conftest import requires
from tests.runtime.world import verdict

pytestmark = [pytest.mark.integration, requires(missing())]

REPO = Path(__file__).resolve().parents[2]
RIGHT, WRONG = "Important Meeting", "Important Meting"
DONE = "The task is created."
PRICE = ModelPrice(input=2.5e-6, output=1e-5, cached_input=1.25e-6, max_output_tokens=400)
"""gpt-4o's rates with a small output limit, given to the scripted model in the cost test."""


def world(request: dict[str, Any]) -> Reply:
    """Agent, reviewer and user simulator (module docstring)."""
    messages = request["messages"]
    if "<scenario>" in str(messages[0].get("content") or ""):  # tau2's user simulator
        said = " ".join(str(m.get("content") or "") for m in messages[1:])
        return Reply(text="###STOP###" if DONE in said else "Please create a task 'Important Meeting' for user_1.")
    if "tools" not in request:  # the reviewer
        wrong = WRONG in tentative_calls(request)
        return verdict(wrong, f"The user asked for the title '{RIGHT}'." if wrong else "")
    if any(str(m["content"]).startswith("Tool result (") for m in messages):
        return Reply(text=DONE)
    feedback = any(str(m["content"]).startswith("Reviewer feedback") for m in messages)
    title = RIGHT if feedback else WRONG
    return Reply(tool_calls=[{"name": "create_task", "arguments": {"user_id": "user_1", "title": title}}])


def test_evaluate_pairs_base_and_reviewed_per_task_scores_with_tau2_and_resumes(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(world) as server:
        args = ["evaluate", "--dataset", "tau2:mock", "--split", "test", "--limit", "2", "--base", f"fake@{server.url}",
                "--reviewer", f"fake@{server.url}", "--mechanism", "r1", "--retries", "0",
                "--runs-dir", str(tmp_path / "runs")]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        printed = " ".join(result.output.split())  # rich wraps a title to its table's width
        assert "(tau2's evaluator)" in printed  # whose verdict the table shows: not BFCL's checkers,
        assert "BFCL" not in printed and "multi_turn_checker" not in printed  # nor BFCL's leaderboard number
        asked = len(server.chat_requests)
        (run_dir,) = (tmp_path / "runs").iterdir()
        run = read_run(run_dir)
        assert run.header.status == "success" and run.header.models["user"] == f"fake@{server.url}"
        assert [(r.example_id, r.condition, r.correct) for r in run.records] == [
            ("create_task_1", "base", False), ("create_task_1", "r1", True),
            ("create_task_1_with_env_assertions", "base", False), ("create_task_1_with_env_assertions", "r1", True)]
        hh = run.summary.help_harm
        assert (hh.fixed, hh.broken, hh.both_right, hh.both_wrong) == (2, 0, 0, 0)
        base, reviewed = run.records[0], run.records[1]
        assert base.judgement is not None and base.judgement.checks["db"] is False and base.judgement.reward == 0.0
        assert reviewed.judgement is not None and reviewed.judgement.reward == 1.0
        assert reviewed.turns[0].messages == [{"role": "user", "content": "Please create a task 'Important Meeting' for user_1."}]
        step = reviewed.turns[0].steps[0]
        assert [r.verdict for r in step.rounds] == ["reject"] and step.revised
        assert step.executed == [{"name": "create_task", "arguments": {"user_id": "user_1", "title": RIGHT}}]
        page = (run_dir / "report.html").read_text(encoding="utf-8")
        assert "Please create a task" in page and "communicate" in page  # the user's turns, tau2's breakdown
        assert "per category (tau2&#39;s evaluator)" in page or "per category (tau2's evaluator)" in page
        costs = json.loads((run_dir / "costs.json").read_text(encoding="utf-8"))
        user_calls = sum(1 for r in server.requests if r.body and "<scenario>" in str(r.body["messages"][0]["content"]))
        user = costs["roles"]["user"]  # tau2's user simulator is on the run's ledger: 2 tasks x 2 runs x 2 turns,
        assert user["calls"] == 8 and user["calls"] - user["cache_hits"] == user_calls > 0  # the rest from the cache
        again = CliRunner().invoke(app, ["evaluate", "--resume", str(run_dir)], env={"COLUMNS": "200"})
        assert again.exit_code == 0, again.output
        assert len(server.chat_requests) == asked  # every task finished: nothing is asked again
    assert read_run(run_dir).summary == run.summary


def test_a_user_model_without_a_tau2_dataset_is_refused() -> None:

    result = CliRunner().invoke(app, ["evaluate", "--dataset", "bfcl:multi_turn_base", "--user-model", "gpt-4o",
                                      "--base", "fake", "--mechanism", "none"])
    assert result.exit_code != 0 and "tau2's user simulator" in (result.output + str(result.exception))


def _unreviewed_mock_task(tmp_path: Path, *options: str) -> tuple[Path, list[dict[str, Any]]]:
    """One unreviewed ``evaluate`` of mock's first task with ``options``: its run dir and the user's requests."""
    with ScriptedOpenAIServer(world) as server:
        args = ["evaluate", "--dataset", "tau2:mock", "--split", "test", "--limit", "1", "--base", f"fake@{server.url}",
                "--mechanism", "none", "--retries", "0", *options, "--runs-dir", str(tmp_path / "runs")]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        users = [r.body for r in server.requests if r.body and "<scenario>" in str(r.body["messages"][0]["content"])]
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir, users


def test_user_reminder_reaches_every_user_request_and_is_kept_in_run_json(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    run_dir, users = _unreviewed_mock_task(tmp_path, "--user-reminder", "on")
    assert users and all(u["messages"][-1] == {"role": "system", "content": USER_ROLE_REMINDER} for u in users)
    assert read_run(run_dir).header.config["user_reminder"] == "on"


def test_max_steps_ends_a_tau2_run_unfinished_and_bounds_the_dry_run(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    run_dir, _ = _unreviewed_mock_task(tmp_path, "--max-steps", "2")
    run = read_run(run_dir)
    assert run.header.config["max_steps"] == 2
    (record,) = [r for r in run.records if r.condition == "base"]
    assert record.judgement is not None and record.judgement.details["termination_reason"] == "max_steps"
    assert not record.correct
    size = task_sizes(load_episodes("tau2:mock", split="test", limit=1))[0]
    assert tau2_task_steps(size, 2)[0] == 2 < tau2_task_steps(size)[0]


def test_the_default_tau2_options_leave_run_json_as_it_was_and_need_a_tau2_dataset_otherwise() -> None:

    dumped = EvaluateConfig(dataset="tau2:mock", base="fake", mechanism="none").model_dump(mode="json")
    assert "user_reminder" not in dumped and "max_steps" not in dumped
    for option, value, said in (("--user-reminder", "on", "tau2's user simulator"), ("--max-steps", "5", "tau2's step")):
        result = CliRunner().invoke(app, ["evaluate", "--dataset", "bfcl:multi_turn_base", option, value,
                                          "--base", "fake", "--mechanism", "none"])
        assert result.exit_code != 0 and said in (result.output + str(result.exception)), option


@pytest.fixture(scope="module")
def trials_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, list[Any]]:
    """One ``--tau2-trials 2`` evaluate of mock's first task: its printed output, run dir and the user's seeds."""
    runs = tmp_path_factory.mktemp("trials") / "runs"
    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer(world) as server:
        patch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
        args = ["evaluate", "--dataset", "tau2:mock", "--split", "test", "--limit", "1", "--tau2-trials", "2",
                "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--mechanism", "r1",
                "--retries", "0", "--runs-dir", str(runs)]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        user_seeds = [r.body.get("seed") for r in server.requests
                      if r.body and "<scenario>" in str(r.body["messages"][0].get("content"))]
    (run_dir,) = runs.iterdir()
    return result.output, run_dir, user_seeds


def test_trials_run_each_task_again_with_tau2s_next_seed_and_the_summary_has_pass_hat_k(
        trials_run: tuple[str, Path, list[Any]]) -> None:

    _, run_dir, user_seeds = trials_run
    run = read_run(run_dir)
    assert [(r.example_id, r.condition) for r in run.records] == [
        ("create_task_1/trial0", "base"), ("create_task_1/trial0", "r1"),
        ("create_task_1/trial1", "base"), ("create_task_1/trial1", "r1")]
    assert run.summary.pass_hat_k == {"base": {1: 0.0, 2: 0.0}, "r1": {1: 1.0, 2: 1.0}}
    assert set(user_seeds) == set(trial_seeds(DEFAULT_SEED, 2))  # tau2's seed per trial reached the user model


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│┃").split("│" if "│" in line else "┃")]


def test_the_printed_tables_show_pass_hat_1_to_k_per_condition(trials_run: tuple[str, Path, list[Any]]) -> None:

    lines = trials_run[0].splitlines()
    (head,) = [i for i, line in enumerate(lines) if "pass^1" in line]
    assert _cells(lines[head]) == ["condition", "pass^1", "pass^2"]
    rows = {cells[0]: cells[1:] for cells in map(_cells, lines[head + 1:head + 5]) if len(cells) == 3}
    assert rows == {"base": ["0.0", "0.0"], "r1": ["100.0", "100.0"]}


def test_the_report_shows_pass_hat_1_to_k_per_condition(trials_run: tuple[str, Path, list[Any]]) -> None:

    page = (trials_run[1] / "report.html").read_text(encoding="utf-8")
    section = page[page.index("pass^k per condition"):]
    section = section[:section.index("</table>")]
    assert [h in section for h in ("<th", "pass^1", "pass^2")] == [True] * 3
    cells = [c.split(">", 1)[1].split("<", 1)[0].strip() for c in section.split("<td")[1:]]
    assert cells == ["base", "0.0", "0.0", "r1", "100.0", "100.0"]


def _is_user(request: Any) -> bool:
    return bool(request.body) and "<scenario>" in str(request.body["messages"][0].get("content"))


def test_max_cost_holds_across_agent_reviewer_and_user_and_the_run_resumes(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))  # a private LM cache: counts are exact
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)  # the scripted model, priced
    cap = 0.03  # trial 0 (base and r1) fits; trial 1's first reviewer call could pass it (worst case)
    with ScriptedOpenAIServer(world) as server:
        args = ["evaluate", "--dataset", "tau2:mock", "--split", "test", "--limit", "1", "--tau2-trials", "2",
                "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--mechanism", "r1",
                "--retries", "0", "--workers", "1", "--max-cost", str(cap), "--runs-dir", str(tmp_path / "runs")]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        (run_dir,) = (tmp_path / "runs").iterdir()
        run = read_run(run_dir)
        assert run.header.status == "stopped" and run.summary.stopped is not None
        assert f"--max-cost ${cap} reached" in run.summary.stopped
        assert [(r.example_id, r.condition, r.correct, r.error) for r in run.records] == [
            ("create_task_1/trial0", "base", False, None), ("create_task_1/trial0", "r1", True, None)]
        roles = json.loads((run_dir / "costs.json").read_text(encoding="utf-8"))["roles"]
        total = roles["total"]
        assert 0 < total["dollars"] <= cap  # no call past the cap
        assert total["calls"] - total["cache_hits"] == len(server.chat_requests)  # every request sent is booked
        user = roles["user"]  # tau2's user simulator pays on the run's ledger, under its own role
        assert user["dollars"] > 0 and user["calls"] - user["cache_hits"] == sum(map(_is_user, server.requests))
        assert roles["base"]["dollars"] > 0 and roles["reviewer"]["dollars"] > 0
        assert sum(roles[r]["dollars"] for r in ("base", "reviewer", "user")) == pytest.approx(total["dollars"])
        sent = len(server.chat_requests)
        again = CliRunner().invoke(app, ["evaluate", "--resume", str(run_dir), "--max-cost", "1"],
                                   env={"COLUMNS": "200"})
        assert again.exit_code == 0, again.output
        resumed = read_run(run_dir)
        assert resumed.header.status == "success" and resumed.summary.stopped is None
        assert resumed.records[:2] == run.records and [r.example_id for r in resumed.records[2:]] == [
            "create_task_1/trial1"] * 2
        assert resumed.summary.pass_hat_k == {"base": {1: 0.0, 2: 0.0}, "r1": {1: 1.0, 2: 1.0}}
        assert len(server.chat_requests) == sent  # what the stopped attempt bought is replayed from the cache


def test_dry_run_estimates_agent_reviewer_and_user_from_tau2s_own_prompts() -> None:

    config = EvaluateConfig(dataset="tau2:mock", split="test", limit=2, trials=2, base="gpt-4o", reviewer="gpt-4o",
                            user_model="gpt-4o-mini", mechanism="r1")
    estimate = preflight_evaluate(config)
    assert estimate.examples == 4  # 2 tasks x 2 trials
    t = tau2()
    environment = t.registry.get_env_constructor("mock")()
    policy_chars = len(t.LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy(), llm=None,
                                  llm_args=None).system_prompt)
    base, user, reviewer = (estimate.roles[r] for r in ("base", "user", "reviewer"))
    assert base.prompt_tokens / base.calls > policy_chars / CHARS_PER_TOKEN  # tau2's prompt and policy per step
    steps = [tau2_task_steps(s) for s in task_sizes(load_episodes("tau2:mock", split="test", limit=2))]
    assert user.calls == 2 * 2 * sum(u for _, u in steps) and user.model == "gpt-4o-mini"  # base + reviewed runs
    assert user.dollars > 0 and reviewer.calls > 0 and base.dollars > 0
    unreviewed = preflight_evaluate(config.model_copy(update={"setup": config.setup.model_copy(
        update={"mechanism": parse_mechanism("none"), "reviewer": None})}))
    assert "reviewer" not in unreviewed.roles and unreviewed.roles["user"].calls == user.calls // 2


def test_compare_dry_run_pays_the_base_runs_user_once_and_each_versions_reviewed_runs() -> None:

    config = EvaluateConfig(dataset="tau2:mock", split="test", limit=2, base="gpt-4o", reviewer="gpt-4o",
                            mechanism="r1")
    estimate = preflight_passes(config, ["reviewer@v1", "reviewer@v2"])
    user_calls = sum(u for _, u in map(tau2_task_steps, task_sizes(load_episodes("tau2:mock", split="test", limit=2))))
    assert estimate.command == "compare" and estimate.roles["user"].calls == 3 * user_calls  # base pass + 2 versions
    one = preflight_evaluate(config)
    assert estimate.roles["reviewer"].calls == 2 * one.roles["reviewer"].calls


def test_dry_run_prints_the_user_simulators_row() -> None:

    result = CliRunner().invoke(app, ["evaluate", "--dataset", "tau2:mock", "--limit", "1", "--base", "gpt-4o",
                                      "--mechanism", "none", "--dry-run"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "│ user " in result.output and "tau2's user prompt" in result.output


def test_a_gated_dry_run_says_it_assumes_every_call_reaches_the_reviewer() -> None:

    def said(mechanism: str) -> list[str]:
        config = EvaluateConfig(dataset="tau2:mock", split="test", limit=1, base="gpt-4o", reviewer="gpt-4o",
                                mechanism=mechanism)
        return preflight_evaluate(config).assumptions

    gated, plain = said("gate+r5"), said("r5")
    assert any("gate+r5" in a and "upper end" in a for a in gated)
    assert not any("upper end" in a for a in plain) and set(plain) < set(gated)


def test_a_tau2_task_reports_its_steps_as_it_plays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tau2's orchestrator drives our agent: each of its steps is an event before the task finishes."""
    from saag_opt.evaluate.run import run_evaluation  # noqa: PLC0415

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    events: list[Any] = []
    with ScriptedOpenAIServer(world) as server:
        run_evaluation(EvaluateConfig(dataset="tau2:mock", split="test", limit=1, base=f"fake@{server.url}",
                                      reviewer=f"fake@{server.url}", mechanism="r1", runs_dir=tmp_path / "runs"),
                       on_event=events.append)
    kinds = [e.kind for e in events]
    steps = [e for e in events if e.kind == "step"]
    assert {e.data["condition"] for e in steps} == {"base", "r1"} and steps[0].data["steps"] == 1
    assert kinds.index("step") < kinds.index("example_finished")
