"""optimize --saag-informed: GEPA evolves the prompt of the reviewer that sees the gold-free SAAG report.

Proved from the scripted server's request log: every reviewer request of the rollouts (train
minibatches, val scoring) and of the seed-vs-best test phase carries the report, none does without
the flag, the rollouts ask exactly what ``evaluate --saag-informed`` asks, and no gold-only value
reaches the reviewer (the reflection LM reads gold only in its labelled feedback line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saag_opt.artifacts.store import PromptStore, PromptVersion
from saag_opt.cli import main
from saag_opt.errors import ConfigError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.events import RunEvent
from saag_opt.optimize import OptimizeConfig, OptimizeResult, run_optimize
from saag_opt.optimize.edit_proposer import NOTE_PROMPT, REPORT_LABEL
from saag_opt.runfiles import read_header
from saag_opt.testing import read_request
from saag_opt.testing.scripted_server import RecordedRequest, Reply, ScriptedOpenAIServer
from saag_opt.testing.scripted_world import BaseRequest, EditRequest, Request, ReviewRequest
from tests.optimize import optimize_world as world

pytestmark = pytest.mark.integration

GOLD_LINE = "Expected (gold, for your analysis only"
"""The one feedback line that quotes gold to the reflection LM (docs/design.md §7: the training signal)."""


@pytest.fixture(autouse=True)
def _private_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh LM and base-prediction caches, so every call of the run reaches the server's log."""
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))


def _messages(request: RecordedRequest) -> str:
    return json.dumps((request.body or {}).get("messages", []))


def _is_reflection(request: RecordedRequest) -> bool:
    return world.is_reflection(request.body or {})


def _view(request: RecordedRequest) -> Request:
    return read_request(request.body or {})


def _reviewer(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """The reviewer's review requests (not the base agent's, not the reflection LM's)."""
    return [r for r in requests if _view(r).role == "review"]


def _report(request: RecordedRequest) -> str | None:
    """The SAAG report a review request shows (None: the plain reviewer's request)."""
    view = _view(request)
    return view.saag_report if isinstance(view, ReviewRequest) else None


def _optimize(tmp_path: Path, dataset: str, prompts: str, server: ScriptedOpenAIServer,
              **options: object) -> tuple[OptimizeResult, list[int]]:
    """A small r1 run; returns the result and [index of the first test-phase request] (via the event)."""
    marks: list[int] = []

    def on_event(event: RunEvent) -> None:
        if event.kind == "evaluating" and not marks:
            marks.append(len(server.chat_requests))

    spec = f"fake@{server.url}"
    config = OptimizeConfig.model_validate(dict(
        base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts, mechanism="r1",
        runs_dir=str(tmp_path / "runs"), max_metric_calls=40, workers=2) | options)
    return run_optimize(config, on_event=on_event), marks


@pytest.mark.parametrize("informed", [True, False])
def test_every_reviewer_request_shows_the_report_only_with_the_flag(tmp_path: Path, informed: bool) -> None:
    dataset, prompts = world.write_world(tmp_path)
    with ScriptedOpenAIServer(world.handler) as server:
        result, marks = _optimize(tmp_path, dataset, prompts, server, saag_informed=informed)
        log = server.chat_requests
    assert marks, "the test phase ran"
    gepa, test_phase = _reviewer(log[:marks[0]]), _reviewer(log[marks[0]:])
    reflection = [r for r in log[:marks[0]] if _is_reflection(r)]
    assert gepa and test_phase and reflection
    with_report = [r for r in gepa + test_phase if _report(r) is not None]
    assert len(with_report) == (len(gepa) + len(test_phase) if informed else 0)
    # The reflection LM reads the reviewer's inputs: the report it saw, when it saw one.
    assert any(REPORT_LABEL in _messages(r) or "saag_report" in _messages(r) for r in reflection) is informed

    run_dir = result.run_dir
    header = read_header(run_dir)
    assert (header.config["saag_informed"], header.config["grounding"]) == (informed, "calibrated")
    assert header.plugins["reviewer"] == {"class": "SaagInformedReviewer" if informed else "Reviewer",
                                          "experimental": informed, "grounding": "calibrated"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["saag_informed"], summary["grounding"]) == (informed, "calibrated")
    test_run = Path(summary["test"]["compare_run"])
    for side in ("a", "b"):  # the test phase's evaluate passes ran the same reviewer
        (side_run,) = (test_run / side).glob("*-evaluate")
        assert read_header(side_run).config["saag_informed"] is informed
    best = PromptStore(prompts).get("reviewer", result.best_version)
    assert best.source == "gepa" and best.saag_report == ("calibrated" if informed else None)


class QualifyingWorld(world.OptimizeWorld):
    """The world, but the base agent answers "<city>, France": the paper grounding test fails that call,
    the calibrated one passes it, so the report the reviewer sees depends on ``--grounding``."""

    def base(self, request: BaseRequest) -> Reply:
        city = world._asked_city(request.user_text)
        return Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": f"{city}, France"}}])


def test_rollouts_ask_the_reviewer_exactly_what_evaluate_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's val scoring inside GEPA sends evaluate --saag-informed's reviewer requests, byte for byte."""
    dataset, prompts = world.write_world(tmp_path)
    with ScriptedOpenAIServer(QualifyingWorld()) as server:
        spec = f"fake@{server.url}"
        run_evaluation(EvaluateConfig(base=spec, reviewer=spec, prompt="reviewer@v2", prompts_dir=Path(prompts),
                                      mechanism="r1", saag_informed=True, grounding="paper", dataset=dataset,
                                      split="val", workers=1, runs_dir=tmp_path / "runs"))
        asked = _reviewer(server.chat_requests)
        evaluated = {_messages(r) for r in asked}
        start = len(server.chat_requests)
        monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy-optimize"))  # nothing replays from evaluate's
        _optimize(tmp_path, dataset, prompts, server, saag_informed=True, grounding="paper",
                  evaluate_test=False)
        rollouts = {_messages(r) for r in _reviewer(server.chat_requests[start:])}
    assert evaluated and all("failed at stage 3" in (_report(r) or "") for r in asked)  # paper's verdict
    assert evaluated <= rollouts


@pytest.mark.parametrize("informed", [True, False])
def test_no_gold_only_value_reaches_the_reviewer_and_reflection_reads_it_only_as_labelled_gold(
        tmp_path: Path, informed: bool) -> None:
    secret = "Zanzibar-7"  # an acceptable gold value no query, tool doc, call or SAAG report contains
    dataset, prompts = world.write_world(tmp_path)
    rows = [json.loads(line) for line in Path(dataset).read_text(encoding="utf-8").splitlines()]
    for row in rows:
        for call in row["gold"]:
            for params in call.values():
                for values in params.values():
                    values.append(secret)
    Path(dataset).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with ScriptedOpenAIServer(world.handler) as server:
        _optimize(tmp_path, dataset, prompts, server, saag_informed=informed)
        log = server.chat_requests
    reviewer, reflection = _reviewer(log), [r for r in log if _is_reflection(r)]
    assert reviewer and reflection
    assert [r for r in reviewer if secret in json.dumps(r.body)] == []  # rollouts and test phase
    assert [r for r in log if _view(r).role == "base" and secret in json.dumps(r.body)] == []  # base agent
    texts = [m.get("content") or "" for r in reflection for m in (r.body or {}).get("messages", [])]
    assert any(secret in t for t in texts)  # the check can fail: the reflection prompt does carry gold ...
    outside = [line for t in texts for line in str(t).splitlines() if secret in line and GOLD_LINE not in line]
    assert outside == []  # ... only in the labelled gold line: never in the reviewer inputs it quotes


def test_resume_refuses_a_change_of_what_the_reviewer_sees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset, prompts = world.write_world(tmp_path, 6, 4, 2)
    with ScriptedOpenAIServer(world.handler) as server:
        first, _ = _optimize(tmp_path, dataset, prompts, server, saag_informed=True, evaluate_test=False)
        run_dir = first.run_dir
        before = len(server.chat_requests)
        for changed, message in (({"saag_informed": False}, "--saag-informed False (the run has True)"),
                                 ({"grounding": "paper"}, "--grounding 'paper' (the run has 'calibrated')")):
            with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
                run_optimize(OptimizeConfig(resume=str(run_dir), max_metric_calls=60, **changed),  # type: ignore[arg-type]
                             overrides={"max_metric_calls", *changed})
        with pytest.raises(SystemExit) as info:  # the CLI: one line, exit 2
            main(["optimize", "--resume", str(run_dir), "--grounding", "paper", "--max-metric-calls", "60"])
        assert info.value.code == 2
        assert "--grounding 'paper' (the run has 'calibrated')" in " ".join(capsys.readouterr().err.split())
        assert len(server.chat_requests) == before  # refused before any call
        assert read_header(run_dir).status == "success"  # the run is untouched
        # Repeating the recorded value, or not typing it, continues the informed run.
        more = run_optimize(OptimizeConfig(resume=str(run_dir), max_metric_calls=60, saag_informed=True,
                                           evaluate_test=False), overrides={"max_metric_calls", "saag_informed"})
        resumed = _reviewer(server.chat_requests[before:])  # most rollouts replay from the LM cache
    assert more.saag_informed and read_header(run_dir).config["saag_informed"] is True
    assert more.metric_calls > first.metric_calls and all(_report(r) is not None for r in resumed)


def test_the_cli_flags_reach_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    dataset, prompts = world.write_world(tmp_path, 6, 4, 2)
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        with pytest.raises(SystemExit) as info:
            main(["optimize", "--base", spec, "--reviewer", spec, "--mechanism", "gate+r1", "--saag-informed",
                  "--grounding", "paper", "--dataset", dataset, "--store", prompts, "--max-metric-calls", "30",
                  "--workers", "1", "--no-test", "--runs-dir", str(tmp_path / "runs")])
        assert info.value.code in (0, None)
    (run_dir,) = (tmp_path / "runs").glob("*-optimize")
    config = read_header(run_dir).config
    assert (config["saag_informed"], config["grounding"], config["mechanism"]) == (True, "paper", "gate+r1")
    assert "reviewer: SAAG-informed (experimental; it saw the gold-free SAAG report, grounding paper" in \
        " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("mechanism", ["s3", "g3", "gate+s3"])
def test_selection_and_grading_mechanisms_accept_the_flag_as_evaluate_does(mechanism: str) -> None:
    """Evaluate accepts --saag-informed with any reviewer mechanism (only the review predictor shows the report)."""
    assert EvaluateConfig(base="gpt-4o", reviewer="gpt-4o", mechanism=mechanism, saag_informed=True).setup.saag_informed
    assert OptimizeConfig(mechanism=mechanism, saag_informed=True).setup.saag_informed


def test_optimize_still_refuses_a_mechanism_without_a_reviewer() -> None:
    with pytest.raises(ValueError, match="never calls the LLM reviewer"):
        OptimizeConfig(mechanism="saag", saag_informed=True)


def _version(saag_report: str | None, source: str = "gepa") -> PromptVersion:
    return PromptVersion(version="v3-gepa", program="reviewer", instructions={"review": "Check."}, source=source,
                         saag_report=saag_report)  # type: ignore[arg-type]


@pytest.mark.parametrize(("saag_report", "source", "informed", "grounding", "expected"), [
    ("calibrated", "gepa", False, "calibrated", "tuned for a reviewer that sees the SAAG report"),
    ("calibrated", "gepa", True, "calibrated", None),
    ("calibrated", "gepa", True, "paper", "tuned beside a SAAG report with --grounding calibrated"),
    (None, "gepa", True, "calibrated", "tuned for a reviewer without the SAAG report"),
    (None, "gepa", False, "paper", None),
    (None, "manual", True, "calibrated", None),  # a hand-written prompt (the seeds) fits either reviewer
])
def test_a_version_knows_which_reviewer_it_was_tuned_for(saag_report: str | None, source: str, informed: bool,
                                                         grounding: str, expected: str | None) -> None:
    why = _version(saag_report, source).reviewer_mismatch(informed, grounding)
    assert (why is None) if expected is None else (why is not None and why.startswith(expected))


def test_evaluate_warns_when_a_gepa_prompt_meets_another_reviewer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    dataset, prompts = world.write_world(tmp_path, 2, 2, 2)
    PromptStore(prompts).save_new("reviewer", {"review": world.PROPOSED_INSTRUCTION}, parents=["v2"], source="gepa",
                                  saag_report="calibrated")
    monkeypatch.setenv("COLUMNS", "250")
    printed = {}
    with ScriptedOpenAIServer(world.handler) as server:
        spec = f"fake@{server.url}"
        for flags in (["--saag-informed"], []):
            out = tmp_path / f"e{len(flags)}.json"
            with pytest.raises(SystemExit) as info:
                main(["evaluate", "--prompt", "reviewer@v3-gepa", *flags, "--base", spec, "--reviewer", spec,
                      "--mechanism", "r1", "--dataset", dataset, "--split", "test", "--workers", "1", "--store", prompts,
                      "--runs-dir", str(tmp_path / "runs"), "--json", str(out)])
            assert info.value.code in (0, None)
            printed[bool(flags)] = (" ".join(capsys.readouterr().out.split()), json.loads(out.read_text()))
    assert "WARNING" not in printed[True][0] and printed[True][1]["reviewer_mismatch"] is None
    assert ("WARNING: reviewer@v3-gepa was tuned for a reviewer that sees the SAAG report (--saag-informed --grounding "
            "calibrated); this reviewer does not see it") in printed[False][0]
    assert printed[False][1]["reviewer_mismatch"].startswith("tuned for a reviewer that sees the SAAG report")


class NotingWorld(world.OptimizeWorld):
    """The world, except that an edit of the report note writes the keyword into the note, and the reviewer
    acts on the keyword wherever it reads it (its instruction or the note above the report)."""

    def edit(self, request: EditRequest) -> Reply:
        if request.system == NOTE_PROMPT:
            return world.edit_reply(world.PROPOSED_INSTRUCTION)
        return world.edit_reply("Approve a call that answers the request with the documented function.")

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        read = f"{request.instructions}\n{request.saag_report or ''}"
        return world.review_verdict(read, request.conversation, request.tentative_calls)


def test_the_informed_reviewers_report_note_is_a_component_gepa_edits_and_the_reviewer_then_reads(
        tmp_path: Path) -> None:
    dataset, prompts = world.write_world(tmp_path)
    with ScriptedOpenAIServer(NotingWorld()) as server:
        result, _ = _optimize(tmp_path, dataset, prompts, server, saag_informed=True, evaluate_test=False)
        log = server.chat_requests
    notes = [r for r in log if _is_reflection(r) and (r.body or {})["messages"][0]["content"] == NOTE_PROMPT]
    assert notes and "(none yet: the report is shown without a note" in _messages(notes[0])
    best = PromptStore(prompts).get("reviewer", result.best_version)
    assert best.instructions["report"] == f"- {world.PROPOSED_INSTRUCTION}"  # the note, not the instruction, won
    assert best.instructions["review"] == world.SEED_INSTRUCTION
    shown = [r for r in _reviewer(log) if f"- {world.PROPOSED_INSTRUCTION}\n\ncall 0" in (_report(r) or "")]
    assert shown  # the reviewer read the note above the report


def test_the_note_is_a_component_of_the_edit_proposers_only_and_an_old_run_resumes_as_a_rewrite_run() -> None:
    base = dict(base="local", reviewer="local", saag_informed=True, mechanism="r2")
    assert OptimizeConfig.model_validate(base).components == ("review", "report")
    assert OptimizeConfig.model_validate(base | {"proposer": "edit"}).components == ("review", "report")
    assert OptimizeConfig.model_validate(base | {"proposer": "rewrite"}).components == ("review",)
    assert OptimizeConfig.model_validate(base | {"saag_informed": False}).components == ("review",)
