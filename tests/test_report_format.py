"""Cell formatting shared by the report tables (saag_opt.report.format)."""

from __future__ import annotations

import math

import pytest

from saag_opt.errors import RunError
from saag_opt.report.format import cached_reviews, ci_points, delta, num, pct, points, ratio, resume_command, run_footer
from saag_opt.runfiles import new_header, write_header


def test_rates_deltas_and_ratios_spell_missing_and_infinite_values_one_way() -> None:
    assert pct(None) == "-" and pct(0.123) == "12.3"
    assert delta(None, 0.5) == "-" and delta(0.5, 0.5) == "0.0"
    assert delta(0.5, 0.75) == "[green]+25.0[/]" and delta(0.75, 0.5) == "[red]-25.0[/]"
    assert ratio(None) == "-" and ratio("inf") == "inf" and ratio(math.inf) == "inf" and ratio(2.7) == "2.70:1"
    assert num(None) == "-" and num(float("inf")) == "inf" and num(0.03857, ".4f") == "0.0386"


def test_cached_reviews_counts_replayed_calls_out_of_all_calls() -> None:
    """The ledger's ``calls`` includes cache hits, so a fully replayed run reads ``6 / 6``."""
    costs = {"roles": {"reviewer": {"calls": 6, "cache_hits": 6}, "base": {"calls": 6, "cache_hits": 0}}}
    assert cached_reviews(costs) == "6 / 6"
    assert cached_reviews({"roles": {"reviewer": {"calls": 4, "cache_hits": 1}}}) == "1 / 4"
    assert cached_reviews({"roles": {"base": {"calls": 3}}}) == "-" and cached_reviews(None) == "-"


def test_accuracy_changes_are_signed_points() -> None:
    assert points(None) == "-" and points(0.025) == "+2.5 pts" and points(-0.1) == "-10.0 pts"
    assert ci_points(None) == "-" and ci_points([-0.01, 0.04]) == "[-1.0, +4.0] pts"


def test_one_footer_and_one_resume_command_for_every_verb(tmp_path) -> None:  # noqa: ANN001
    """evaluate, compare and optimize ended with three spellings of this, the CLI built the command twice."""
    run = tmp_path / "20260101-000000-tune"
    run.mkdir()
    write_header(run, new_header(run, "tune"))
    assert resume_command(run) == f"saag-opt tune --space SPACE.toml --resume {run}"  # the verb from run.json
    assert resume_command("runs/x", "compare") == "saag-opt compare --resume runs/x"
    assert run_footer("evaluate", "runs/x", stopped="--max-cost $1 reached", covered="3 finished") == [
        "[yellow]stopped early:[/] --max-cost $1 reached (3 finished)",
        "continue it: saag-opt evaluate --resume runs/x --max-cost <higher>", "run directory: runs/x"]
    assert run_footer("compare", "runs/x") == ["run directory: runs/x"]
    assert run_footer("optimize", None, stopped="why") == ["[yellow]stopped early:[/] why"]
    with pytest.raises(RunError, match="cannot read run.json"):
        resume_command(tmp_path / "not-a-run")
