"""One cost-estimate model: every verb's ``--dry-run`` returns an ``Estimate`` and prints it through one table.

What a user relies on: the five verbs' dry-runs read alike (roles, calls, tokens, dollars, a total
and the assumptions); a model without a known price says ``unknown`` instead of $0; an older
optimize run's stored estimate still reads back.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from saag_opt.cli import main
from saag_opt.data.tau2_package import missing as tau2_missing
from saag_opt.evaluation.estimate import Estimate, RoleEstimate
from saag_opt.optimize.summary import OptimizeSummary
from saag_opt.report import estimate_tables
from tests.conftest import requires

REPO = Path(__file__).resolve().parents[2]
MODELS = ["--base", "gpt-4o", "--reviewer", "gpt-5-mini"]
needs_agentdojo = requires(None if importlib.util.find_spec("agentdojo") else
                           "the agentdojo extra is not installed (pip install 'saag-opt[agentdojo]')")


def _space(tmp_path: Path) -> Path:
    path = tmp_path / "space.toml"
    path.write_text('[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\nlimit = 4\n[search]\nmechanism = ["r1"]\n',
                    encoding="utf-8")
    return path


VERBS = [  # (verb, the module whose preflight the CLI calls, its name, the command line after the verb)
    ("evaluate", "saag_opt.evaluate.run", "preflight_evaluate", [*MODELS, "--mechanism", "r2", "--limit", "4"]),
    ("compare", "saag_opt.compare.run", "preflight_compare",
     ["reviewer@v1", "reviewer@v2", *MODELS, "--mechanism", "r1", "--limit", "4"]),
    ("optimize", "saag_opt.optimize.preflight", "preflight_optimize",
     [*MODELS, "--mechanism", "r1", "--train-limit", "4", "--val-limit", "3", "--test-limit", "2",
      "--max-metric-calls", "20"]),
    ("tune", "saag_opt.tune.preflight", "preflight_tune", ["--sampler", "grid"]),
    pytest.param("security", "saag_opt.security.run", "preflight_security",
                 ["--suite", "banking", "--attack", "important_instructions", "--user-tasks", "1",
                  "--agent", "gpt-4o-mini", "--mechanism", "guard+r1", "--reviewer", "gpt-4o-mini"],
                 marks=needs_agentdojo),
]


@pytest.mark.parametrize(("verb", "module", "name", "argv"), VERBS)
def test_every_verbs_dry_run_returns_an_estimate_and_prints_it_through_the_one_table(
        verb: str, module: str, name: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("COLUMNS", "200")
    returned: list[Any] = []
    rendered: list[dict[str, Any]] = []
    preflight = getattr(importlib.import_module(module), name)
    monkeypatch.setattr(importlib.import_module(module), name,
                        lambda *a, **k: returned.append(preflight(*a, **k)) or returned[-1])
    table = estimate_tables.estimate_table
    monkeypatch.setattr(estimate_tables, "estimate_table", lambda e: rendered.append(dict(e)) or table(e))
    if verb == "tune":
        argv = ["--space", str(_space(tmp_path)), *argv]
    with pytest.raises(SystemExit) as exit_info:
        main([verb, *argv, "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert exit_info.value.code in (0, None) and not (tmp_path / "runs").exists()
    (estimate,) = returned
    assert type(estimate) is Estimate and estimate.command == verb
    assert rendered == [estimate.to_dict()]  # the one table, of what the verb's preflight returned
    assert "reviewer" in estimate.roles and estimate.roles["reviewer"].calls > 0
    total = estimate.total
    assert total.dollars is not None and total.dollars > 0 and f"{total.dollars:.4f}" in out
    assert f"Pre-flight estimate: {verb} ({estimate.examples} {estimate.unit}; nothing was run)" in out
    assert "--max-cost USD caps the real spend" in out


@requires(tau2_missing())  # tau2's tasks are what a simulated user's pass is priced from
def test_tune_prices_a_pass_as_evaluate_does_the_simulated_user_included(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On tau2 a trial is evaluate's pass: its base pass and one reviewed pass cost what one evaluate costs."""
    from saag_opt.evaluate.config import EvaluateConfig  # noqa: PLC0415
    from saag_opt.evaluate.run import preflight_evaluate  # noqa: PLC0415
    from saag_opt.tune import TuneConfig  # noqa: PLC0415
    from saag_opt.tune.preflight import preflight_tune  # noqa: PLC0415

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    fixed = {"base": "gpt-4o", "reviewer": "gpt-5-mini", "dataset": "tau2:airline", "split": "train", "limit": 3}
    space = tmp_path / "space.toml"
    space.write_text("[fixed]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in fixed.items())
                     + '[search]\nmechanism = ["r1"]\n', encoding="utf-8")
    tune = preflight_tune(TuneConfig(space=space, sampler="grid", no_test=True))
    evaluate = preflight_evaluate(EvaluateConfig(**fixed, mechanism="r1"))
    assert {r: p.calls for r, p in tune.roles.items()} == {r: p.calls for r, p in evaluate.roles.items()}
    assert tune.roles["user"].calls > 0 and tune.total.dollars == pytest.approx(evaluate.total.dollars, abs=1e-4)


def test_an_unknown_price_reads_unknown_in_the_total_and_the_table() -> None:
    estimate = Estimate("evaluate", 2)
    estimate.add("base", RoleEstimate(2, 100, 10, 0.25, "gpt-4o"))
    estimate.add("reviewer", RoleEstimate(2, 200, 20, None, "gpt-9-unlisted"))
    assert estimate.roles["base"].dollars == 0.25 and estimate.total.dollars is None
    console = Console(file=io.StringIO(), width=200)
    estimate_tables.print_estimate(console, estimate.to_dict())
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert "0.2500" in next(line for line in lines if "base" in line)
    assert "unknown" in next(line for line in lines if "reviewer" in line)
    assert "unknown" in next(line for line in lines if "total" in line)


def test_parts_add_up_to_the_roles_and_read_back() -> None:
    """security's breakdown: a part per suite and attack, merged when a label repeats (the search's two passes)."""
    whole = Estimate("security", 0, unit="runs")
    for runs, calls in ((4, 6), (36, 54), (18, 27)):
        part = Estimate("security", runs, unit="runs")
        part.add("base", RoleEstimate(calls, calls * 1000, calls * 60, calls * 0.001, "gpt-4o-mini"))
        whole.add_part("banking / none" if runs == 4 else "banking / adaptive_search", part)
    assert list(whole.parts) == ["banking / none", "banking / adaptive_search"]
    assert whole.parts["banking / adaptive_search"].examples == 54 and whole.examples == 58
    assert whole.roles["base"].calls == 87 == sum(p.roles["base"].calls for p in whole.parts.values())
    assert Estimate.from_dict(whole.to_dict()).to_dict() == whole.to_dict()


def test_an_older_optimize_runs_stored_estimate_still_reads_back() -> None:
    """summary.json of runs before the one model kept GEPA's own record: its roles and sentence read as an Estimate."""
    old = {"assumptions": "1.50 reviews and 0.75 base revisions per rollout; base first answers cached; reflection "
                          "calls not capped by max_metric_calls",
           "base_calls": 60, "dollars": 0.0, "lm_calls": 208, "reflection_calls": 28, "reviewer_calls": 120,
           "rollouts": 80, "tokens": 398683,
           "roles": {"base": {"calls": 60, "completion_tokens": 3600, "dollars": 0.0, "prompt_tokens": 26751},
                     "reflection": {"calls": 28, "completion_tokens": 84000, "dollars": 0.0, "prompt_tokens": 97420},
                     "reviewer": {"calls": 120, "completion_tokens": 14400, "dollars": 0.0, "prompt_tokens": 172512}}}
    summary = OptimizeSummary.model_validate({
        "run_dir": "runs/x-optimize", "status": "success", "seed_version": "v2", "best_version": "v2",
        "versions": {0: "v2"}, "val_scores": [0.5], "metric_calls": 80, "stopped_by": "max_metric_calls",
        "costs": {"roles": {}}, "estimate": old})
    estimate = summary.estimate
    assert type(estimate) is Estimate and estimate.command == "optimize"
    assert {r: p.calls for r, p in estimate.roles.items()} == {"base": 60, "reflection": 28, "reviewer": 120}
    assert estimate.total.calls == old["lm_calls"] and estimate.total.dollars == 0.0
    assert estimate.total.prompt_tokens + estimate.total.completion_tokens == old["tokens"]
    assert estimate.assumptions == ["80 rollouts on train/val", old["assumptions"]]
    again = OptimizeSummary.model_validate(summary.to_dict()).estimate  # a new run writes to_dict and reads it back
    assert again.to_dict() == estimate.to_dict() and summary.to_dict()["estimate"]["roles"]["total"]["calls"] == 208
