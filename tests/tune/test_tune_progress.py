"""What tune shows before and while it runs: ``--dry-run`` prints evaluate's estimate models added up
the way a tune run spends (and runs nothing), and the live bar / per-event lines carry trials done
of the budget, spend against the cap and the current front."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from saag_opt.agents.mechanisms.registry import parse_mechanism
from saag_opt.artifacts import resolve_ref
from saag_opt.cli import main
from saag_opt.data import load_dataset
from saag_opt.evaluation.estimate import estimate_evaluation
from saag_opt.events import RunEvent
from saag_opt.report.tune_tables import TuneProgress
from saag_opt.tune import TuneConfig, run_tune
from saag_opt.tune.preflight import FRONT_GUESS, preflight_tune
from tests.tune.test_study import TABLE, _space_file
from tests.tune.tune_fakes import FakeEvaluate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("COLUMNS", "200")


def _space(tmp_path: Path, search: str = 'mechanism = ["r1", "r2"]') -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "space.toml"
    path.write_text(f'[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\nlimit = 10\n[search]\n{search}\n',
                    encoding="utf-8")
    return path


def _row(out: str, role: str) -> list[str]:
    line = next(line for line in out.splitlines() if re.match(rf"\W*{role}\b", line.strip("│ ")))
    return [cell.strip() for cell in line.split("│") if cell.strip()]


def test_dry_run_prints_calls_tokens_and_dollars_by_role_and_creates_no_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["tune", "--space", str(_space(tmp_path)), "--sampler", "grid", "--dry-run",
              "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert info.value.code in (0, None) and "Pre-flight estimate: tune" in out
    assert not (tmp_path / "runs").exists()
    base, reviewer, total = _row(out, "base"), _row(out, "reviewer"), _row(out, "total")
    assert base[1] == "gpt-4o" and reviewer[1] == "gpt-5-mini" and int(reviewer[2]) > 0
    assert float(total[-1]) == pytest.approx(float(base[-1]) + float(reviewer[-1]), abs=2e-4) and float(total[-1]) > 0
    assert "--max-cost USD caps the real spend" in out


def test_the_estimate_is_evaluates_per_pass_added_up_as_tune_spends(tmp_path: Path) -> None:
    space = _space(tmp_path, 'mechanism = ["r1"]')
    val, test = load_dataset("shipped:bfcl", split="val", limit=10), load_dataset("shipped:bfcl", split="test", limit=4)

    def reviews(examples: list[Any]) -> int:
        instructions = resolve_ref("reviewer@v2").instructions
        return estimate_evaluation(examples, base="gpt-4o", reviewer="gpt-5-mini", mechanism=parse_mechanism("r1"),
                                   instructions=instructions).roles["reviewer"].calls

    one = preflight_tune(TuneConfig(space=space, sampler="grid", test_limit=4)).to_dict()
    assert one["roles"]["reviewer"]["calls"] == reviews(val) + reviews(test)  # one trial, a front of one
    assert one["examples"] == len(val) + len(test)
    two = preflight_tune(TuneConfig(space=_space(tmp_path / "two", 'mechanism = ["r1", "r2"]'), trials=6,
                                    test_limit=4))
    assert any("2 distinct configurations tried (6 trials" in a for a in two.assumptions)  # repeats are free
    assert any(f"front of {min(FRONT_GUESS, 2)} configurations" in a for a in two.assumptions)
    untested = preflight_tune(TuneConfig(space=space, sampler="grid", no_test=True)).to_dict()
    assert untested["roles"]["total"]["dollars"] < one["roles"]["total"]["dollars"]


def test_each_finished_trial_carries_done_budget_spend_and_the_front(tmp_path: Path) -> None:
    events: list[RunEvent] = []
    space = _space_file(tmp_path, search='mechanism = ["r1", "r2", "gate+r1", "s3"]', constraints="")
    run_tune(TuneConfig(space=space, sampler="grid", no_test=True, max_cost=100.0, runs_dir=tmp_path / "runs"),
             evaluate=FakeEvaluate(TABLE, through_cap=True), on_event=events.append)
    finished = [e.data for e in events if e.kind == "trial_finished"]
    assert [d["done"] for d in finished] == [1, 2, 3, 4] and {d["budget"] for d in finished} == {4}
    assert [d["spent"] for d in finished] == sorted(d["spent"] for d in finished) and finished[-1]["spent"] == 4.5
    assert finished[-1]["max_cost"] == 100.0 and events[0].kind == "run_started" and events[0].data["done"] == 0
    front = {p["number"] for p in finished[-1]["front"]}
    assert front and all(set(p["values"]) == {"help", "harm"} for p in finished[-1]["front"])
    assert len(front) == len([r for r in finished[-1]["front"]])


def _events() -> list[RunEvent]:
    front = [{"number": 0, "values": {"help": 0.5, "harm": 0.0}}, {"number": 2, "values": {"help": 0.75, "harm": 0.1}}]
    progress = {"budget": 4, "spent": 0.0123, "max_cost": 0.5}
    return [RunEvent("run_started", "tune s (coordinator): r", {"done": 0, "front": [], **progress}),
            RunEvent("trial_finished", "trial 0   COMPLETE mechanism=r1", {"done": 1, "front": front[:1], **progress}),
            RunEvent("trial_finished", "trial 1   COMPLETE mechanism=r2", {"done": 2, "front": front, **progress}),
            RunEvent("stage", "TEST 1/2: trial 0", {"stage": "test"}),
            RunEvent("run_finished", "tune s finished: r", {})]


def test_off_a_terminal_each_event_is_one_line_with_the_progress_on_it() -> None:
    out = io.StringIO()
    with TuneProgress(Console(file=out, width=200)) as progress:
        for event in _events():
            progress(event)
    assert out.getvalue().splitlines() == [
        "trial 0   COMPLETE mechanism=r1  [1/4 trials  $0.0123 of $0.5  front 1: #0 help 50.0% harm 0.0%]",
        "trial 1   COMPLETE mechanism=r2  [2/4 trials  $0.0123 of $0.5  front 2: #0 help 50.0% harm 0.0%; "
        "#2 help 75.0% harm 10.0%]",
        "TEST 1/2: trial 0"]


def test_on_a_terminal_a_live_bar_shows_trials_spend_and_the_front() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, color_system=None)
    with TuneProgress(console) as progress:
        assert progress.progress.live.is_started
        for event in _events():
            progress(event)
        progress.progress.refresh()
        shown = out.getvalue()
    assert re.search(r"tune .*2/4 trials .*\$0\.0123 of \$0\.5  front 2: #0 help 50\.0% harm 0\.0%; #2", shown)
    assert "trial 1   COMPLETE mechanism=r2\n" in shown  # the trial's line above the bar, without the progress
