"""experiments/bench/proposer_yield.py replays recorded reflections through every proposer and prints the yield last."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jsonlines
import pytest

from saag_opt.optimize.feedback import GOLD_LABEL
from saag_opt.testing.scripted_server import Reply, ScriptedOpenAIServer
from tests.optimize import optimize_world as world

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "proposer_yield.py"
SEED = "You review tool calls and reject a wrong one.\n\nRules:\n- Defaults are fine."


def _handler(request: dict) -> Reply:
    """Edits add a real rule; a rewrite asks for instructions, as the 1.5B's did."""
    if world.is_edit_request(request):
        return world.edit_reply("Reject a call that covers only part of a request for several things.")
    return world.rewrite_reply(request, "Please provide the instructions for the reviewer.")


def test_the_bench_counts_usable_proposals_per_proposer_and_prints_the_ratio_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    item = {"Inputs": {"conversation": "user: weather in Paris and Rome?", "tentative_calls": "[]"},
            "Generated Outputs": {"error": False, "feedback": ""},
            "Feedback": f"Outcome: missed error. Advice.\nExpected (gold, {GOLD_LABEL}): two calls"}
    parent = {"reviewer.review": SEED, "reviewer.report": "(no note)"}
    with jsonlines.open(tmp_path / "reflections.jsonl", mode="w") as out:
        for i in (1, 2):  # the same reflection twice, as a resumed run records it: counted once
            out.write({"iteration": i, "parent": parent, "components": ["reviewer.review"],
                       "dataset": {"reviewer.review": [item]}})
        out.write({"iteration": 3, "parent": parent, "components": ["reviewer.report"],  # the note: no rewrite
                   "dataset": {"reviewer.report": [item]}})
    spec = importlib.util.spec_from_file_location("proposer_yield", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with ScriptedOpenAIServer(_handler) as server:
        assert module.main([str(tmp_path), "--model", f"fake@{server.url}"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "usable_edit=1.00 usable_rewrite=0.00 ratio=inf"
    assert "usable_add=1.00" in lines[-2] and "usable_edit=1.00" in lines[-2] and "usable_rewrite=0.00" in lines[-2]
    assert "reflections=2" in lines[-2] and "asked_rewrite=1" in lines[-2] and "asked_add=2" in lines[-2]
    assert any("[2/2] rewrite not asked" in line for line in lines)
    assert any("added as rule 3: Reject a call that covers only part" in line for line in lines)
