"""The conversation browser's data: a real multi-turn run (scripted server, BFCL's checker) and a record
model with more fields (what a tau2 record adds) drawn by the same code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from saag_opt.evaluation.conversation_records import EpisodeRecord, JudgementRecord, TurnRecord
from saag_opt.report.html import REPORT_NAME
from saag_opt.report.pages import build_part
from saag_opt.report.pages.base import new_part
from saag_opt.report.pages.conversations import conversation_section
from tests.episodes.world import needs_bfcl


def _section(part: Any) -> dict[str, Any]:
    return next(s for s in part.sections if s.get("kind") == "conversations")


@needs_bfcl
@pytest.mark.integration
def test_a_multi_turn_run_draws_every_turn_step_review_and_the_failing_check(multiturn_run: Path) -> None:
    part = build_part(multiturn_run)
    section = _section(part)
    rows = section["rows"]
    assert [r["outcome"] for r in rows] == ["fixed", "unchanged-right", "unchanged-right"]
    assert section["outcomes"][0] == "flipped" and section["outcome_counts"]["flipped"] == 1
    assert rows[0]["stage"] == "valid" and section["stages"] == ["valid"]
    entry = part.data["episodes"][rows[0]["i"]]
    assert entry["user"] and entry["user"][0][0][0] == "user"  # the dataset's user turns
    base, reviewed = entry["conditions"]
    assert (base["label"], reviewed["label"]) == ("base", "r2")
    assert not base["verdict"]["valid"] and base["verdict"]["error_type"] == "multi_turn:instance_state_mismatch"
    assert base["verdict"]["failed_turn"] == 0 and "checker failed here" in base["turns"][0]["marks"]
    assert "details" in base["verdict"] and base["verdict"]["checks"]["multi_turn_checker"] is False
    step = reviewed["turns"][0]["steps"][0]
    assert [r["verdict"] for r in step["rounds"]] == ["reject", "approve"]
    assert "temp" in step["rounds"][0]["feedback"] and "revised" in step["marks"]
    assert ["mkdir", {"dir_name": "temp"}] in step["executed"]
    assert ["mkdir", {"dir_name": "tmp"}] in step["proposed"]["calls"]
    assert step["results"] and all(len(r) == 3 for r in step["results"])
    assert reviewed["verdict"]["valid"] and "failed_turn" not in reviewed["verdict"]
    assert reviewed["turns"][-1]["steps"][-1]["proposed"] == {"calls": [], "text": "Done."}
    html = (multiturn_run / REPORT_NAME).read_text(encoding="utf-8")
    assert "Conversation browser" in html and 'data-kind="conversations"' in html and "Failed check" in html


class _SimTurn(TurnRecord):
    messages: list[dict[str, Any]] = Field(default_factory=list)


class _RewardJudgement(JudgementRecord):
    reward_breakdown: dict[str, float] = Field(default_factory=dict)


class _SimRecord(EpisodeRecord):
    turns: list[_SimTurn] = Field(default_factory=list)  # type: ignore[assignment]
    judgement: _RewardJudgement | None = None
    reward: float | None = None
    termination: str | None = None


def _record(condition: str, correct: bool) -> _SimRecord:
    turn = _SimTurn(index=0, messages=[{"role": "user", "content": "Cancel my reservation EHGLP3."}],
                    steps=[{"turn": 0, "index": 0, "proposed": {"calls": [{"name": "cancel_reservation",
                                                                            "arguments": {"id": "EHGLP3"}}]},
                            "final": {"calls": []}, "withheld": True}])
    judgement = _RewardJudgement(valid=correct, reward_breakdown={"DB": float(correct), "COMMUNICATE": 1.0})
    return _SimRecord(run_id="r", example_id="airline_0", category="airline", condition=condition, correct=correct,
                      turns=[turn], judgement=judgement, reward=float(correct), termination="user_stop")


def test_a_record_model_with_more_fields_renders_them_without_a_change() -> None:
    part = new_part("evaluate", "t", 0)
    section = conversation_section([_record("base", False), _record("guard+r2", True)],
                                   [("base", "base"), ("guard+r2", "guard+r2")], ("base", "guard+r2"), {}, part)
    assert section is not None and section["rows"][0]["outcome"] == "fixed"
    reviewed = part.data["episodes"][0]["conditions"][1]
    turn = reviewed["turns"][0]
    assert turn["user"] == [["user", "Cancel my reservation EHGLP3."]]  # the turn's own (simulated) messages
    assert turn["steps"][0]["marks"] == ["withheld"] and "executed" not in turn["steps"][0]
    extra = dict(reviewed["verdict"]["extra"])
    assert extra["reward_breakdown"] == '{"COMMUNICATE": 1.0, "DB": 1.0}'
    assert extra["reward"] == "1.0" and extra["termination"] == "user_stop"
