"""The new flags from the command line: --dry-run estimates without running, --max-cost says where
it stopped, and the unusable-review count is in the printed tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from saag_opt.cli import main
from saag_opt.data import load_dataset, round_robin
from saag_opt.lm.spend.accounting import ModelPrice
from saag_opt.testing import ScriptedOpenAIServer
from tests.evaluate.test_caps_and_cache import World
from tests.optimize import optimize_world as world

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0)


def _row(out: str, role: str) -> list[str]:
    line = next(line for line in out.splitlines() if re.match(rf"\W*{role}\b", line.strip("│ ")))
    return [cell.strip() for cell in line.split("│") if cell.strip()]


@pytest.mark.parametrize("command", [
    ["evaluate", "--mechanism", "r2"],
    ["compare", "reviewer@v1", "reviewer@v2", "--mechanism", "r2"],
])
def test_dry_run_prints_calls_tokens_and_dollars_by_role_and_runs_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code = _run([*command, "--base", "gpt-4o", "--reviewer", "gpt-5-mini", "--limit", "10", "--dry-run",
                 "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0 and "Pre-flight estimate" in out and not (tmp_path / "runs").exists()
    base, reviewer, total = _row(out, "base"), _row(out, "reviewer"), _row(out, "total")
    assert base[1] == "gpt-4o" and reviewer[1] == "gpt-5-mini"
    assert int(base[2]) >= 10 and int(reviewer[2]) >= 10  # calls: one base call and one review per example at least
    assert float(total[-1]) == pytest.approx(float(base[-1]) + float(reviewer[-1]), abs=2e-4) and float(total[-1]) > 0
    if command[0] == "compare":  # the base pass is paid once; each version adds its reviews
        assert int(reviewer[2]) >= 20


def test_optimize_dry_run_counts_reflection_and_the_test_phase(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    dataset, _ = world.write_world(tmp_path)
    code = _run(["optimize", "--base", "gpt-4o", "--reviewer", "gpt-5-mini", "--dataset", dataset,
                 "--mechanism", "r1", "--max-metric-calls", "40", "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0 and "Pre-flight estimate: optimize" in out and not (tmp_path / "runs").exists()
    assert int(_row(out, "reflection")[2]) > 0 and float(_row(out, "total")[-1]) > 0
    assert int(_row(out, "reviewer")[2]) >= 40 * 1 + 2 * 4  # every rollout reviews once, plus the test phase


def test_evaluate_stops_at_max_cost_with_a_clear_line_and_shows_unusable_reviews(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price",
                        lambda spec: ModelPrice(2.5e-6, 1e-5, 1.25e-6, max_output_tokens=400))
    examples = load_dataset("shipped:bfcl", split="test", limit=12)
    scripted = World(examples)
    scripted.garbled = {examples.index(round_robin(examples)[1])}  # the second example run (categories take turns)
    with ScriptedOpenAIServer(scripted) as server:
        code = _run(["evaluate", "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}",
                     "--prompt", "reviewer@v1", "--mechanism", "r1", "--limit", "12", "--workers", "1",
                     "--max-cost", "0.03", "--on-unusable", "reject", "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0
    assert "stopped early: --max-cost $0.03 reached" in out
    assert _row(out, "reviewer replies unusable")[-1] == "1"
    assert "1 reviewer reply could not be read" in out and "counted as rejections" in out
