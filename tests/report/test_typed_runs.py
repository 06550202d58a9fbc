"""Runs of every verb read back as their verb's models, and compare reads an optimize run's TEST conditions."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.compare.comparison import CompareSummary
from saag_opt.compare.run import CompareConfig, run_compare
from saag_opt.evaluation.results import EvaluationSummary, ExampleRecord
from saag_opt.optimize.summary import OptimizeSummary
from saag_opt.runfiles import read_run
from saag_opt.tune.results import TrialRow, TuneSummary

pytestmark = pytest.mark.integration


def test_each_verb_reads_back_as_its_own_models(eval_runs: dict[str, Path], optimize_run: Path,
                                                tune_run: Path) -> None:
    evaluate, compare = read_run(eval_runs["evaluate"]), read_run(eval_runs["compare"])
    optimize, tune = read_run(optimize_run), read_run(tune_run)
    assert isinstance(evaluate.summary, EvaluationSummary) and isinstance(compare.summary, CompareSummary)
    assert isinstance(optimize.summary, OptimizeSummary) and isinstance(tune.summary, TuneSummary)
    assert all(isinstance(r, ExampleRecord) for run in (evaluate, compare, optimize) for r in run.records)
    assert tune.records and all(isinstance(r, TrialRow) for r in tune.records)
    test = optimize.summary.test
    assert test is not None and isinstance(test.comparison, CompareSummary)
    assert read_run(test.compare_run).summary == test.comparison  # the compare run inside holds the same numbers
    assert optimize.summary.estimate.roles["reviewer"].calls > 0 and optimize.summary.reviewer_unusable is not None


def test_comparing_an_optimize_runs_test_conditions_names_the_prompts_behind_them(optimize_run: Path,
                                                                                    tmp_path: Path) -> None:
    """An optimize run's rows come from the compare run of its TEST phase: that run says which prompt each was."""
    summary = run_compare(CompareConfig(a=f"{optimize_run}#r1@v2", b=f"{optimize_run}#r1@v3-gepa",
                                        runs_dir=tmp_path / "runs")).summary
    assert (summary.a.source["verb"], summary.a.source["prompt"]) == ("optimize", "reviewer@v2")
    assert summary.b.source["prompt"] == "reviewer@v3-gepa"
    assert summary.paired.b_only_right == 2 and summary.paired.a_only_right == 0
