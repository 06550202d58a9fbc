"""``reflections.jsonl``: each proposal's parent and reflective dataset, written as GEPA reflects."""

from __future__ import annotations

from pathlib import Path

import dspy

from saag_opt.optimize.reflections import REFLECTIONS_FILE, ReflectionRecorder, read_reflections


def test_each_proposal_start_is_one_json_line_read_back_in_order(tmp_path: Path) -> None:
    recorder = ReflectionRecorder(tmp_path)
    dataset = {"reviewer.review": [{"Inputs": {"conversation": "user: hi"}, "Generated Outputs": {"error": False},
                                    "Feedback": "Outcome: missed error.", "extra": dspy.Prediction(x=1)}]}
    for i in (1, 2):
        recorder.on_proposal_start({"iteration": i, "parent_candidate": {"reviewer.review": f"Rules {i}."},
                                    "components": ["reviewer.review"], "reflective_dataset": dataset})
    rows = list(read_reflections(tmp_path / REFLECTIONS_FILE))
    assert [r["iteration"] for r in rows] == [1, 2] and rows[1]["parent"] == {"reviewer.review": "Rules 2."}
    item = rows[0]["dataset"]["reviewer.review"][0]
    assert item["Generated Outputs"] == {"error": False} and isinstance(item["extra"], str)
