"""Tune's search logic against a table-driven runner: memoised repeats, constraints, the Pareto set
and its test re-evaluation, the grid, budgets, seeds, joining and resuming."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonlines
import pytest

from saag_opt.errors import ConfigError, SaagOptError
from saag_opt.events import RunEvent
from saag_opt.tune import TuneConfig, run_tune
from tests.tune.tune_fakes import FakeEvaluate

TABLE = {
    "r1": {"fixed": 4, "broken": 1, "calls": 1.0, "dollars": 1.0},
    "r2": {"fixed": 6, "broken": 1, "calls": 2.0, "dollars": 2.0},  # dominates r1 but makes too many calls
    "gate+r1": {"fixed": 2, "broken": 0, "calls": 0.5, "dollars": 0.5},
    "s3": {"fixed": 1, "broken": 3, "calls": 1.0, "dollars": 1.0},  # dominated by r1
}


def _space_file(tmp_path: Path, name: str = "space.toml", *, search: str = 'mechanism = ["r1", "r2", "gate+r1", "s3"]',
                constraints: str = "reviewer_calls_per_item = 1.5") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(f'[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\nlimit = 20\n[search]\n{search}\n'
                    f'[constraints]\n{constraints}\n', encoding="utf-8")
    return path


def _run(tmp_path: Path, fake: FakeEvaluate, **options: Any) -> Any:
    if "space" not in options:
        options["space"] = _space_file(tmp_path)
    values: dict[str, Any] = {"runs_dir": tmp_path / "runs"} | options
    return run_tune(TuneConfig(**values), evaluate=fake)


def _rows(run_dir: Path) -> list[dict]:
    with jsonlines.open(run_dir / "trials.jsonl") as reader:
        return list(reader)


def test_grid_runs_every_point_once_and_reports_the_feasible_pareto_set_on_test(tmp_path: Path) -> None:
    fake = FakeEvaluate(TABLE)
    outcome = _run(tmp_path, fake, sampler="grid")
    rows = {r["params"]["mechanism"]: r for r in _rows(outcome.run_dir)}
    assert len(_rows(outcome.run_dir)) == 4 and set(rows) == set(TABLE)
    assert sorted(m for m, split in fake.calls if split == "val") == sorted(TABLE)
    assert rows["r2"]["feasible"] is False and rows["r2"]["constraints"] == {"reviewer_calls_per_item": 0.5}
    assert rows["r1"]["values"] == {"help": pytest.approx(4 / 8), "harm": pytest.approx(1 / 12)}
    assert {m for m, r in rows.items() if r["pareto"]} == {"r1", "gate+r1"}  # r2 infeasible, s3 dominated
    assert sorted(m for m, split in fake.calls if split == "test") == ["gate+r1", "r1"]
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["pareto"] == sorted(rows[m]["number"] for m in ("r1", "gate+r1"))
    assert summary["states"] == {"COMPLETE": 4} and summary["distinct_configs"] == 4
    test = {t["params"]["mechanism"]: t for t in summary["test"]}
    assert set(test) == {"r1", "gate+r1"} and test["r1"]["summary"]["help_harm"]["mcnemar_p"] is not None
    assert test["r1"]["val"]["reviewer_calls_per_item"] == 1.0
    assert all(r["run_dir"] and r["worker"].count("@") == 1 for r in rows.values())
    assert (outcome.run_dir / "study.db").is_file() and outcome.role == "coordinator"
    header = json.loads((outcome.run_dir / "run.json").read_text())
    assert header["status"] == "success" and header["verb"] == "tune" and header["packages"]["optuna"] == "5.0.0"


def test_a_repeated_configuration_is_answered_from_the_stored_result(tmp_path: Path) -> None:
    fake = FakeEvaluate(TABLE)
    events: list[RunEvent] = []
    outcome = run_tune(TuneConfig(space=_space_file(tmp_path, search='mechanism = ["r1", "gate+r1"]'), trials=12,
                                  no_test=True, runs_dir=tmp_path / "runs"), evaluate=fake, on_event=events.append)
    rows = _rows(outcome.run_dir)
    kinds = [e.kind for e in events]
    assert kinds == ["run_started", *["trial_finished"] * 12, "run_finished"]
    finished = [e for e in events if e.kind == "trial_finished"]
    assert [e.data["row"]["number"] for e in finished] == list(range(12))
    assert any("repeat of" in e.message and "0 LM calls" in e.message for e in finished)
    assert len(rows) == 12 and all(r["state"] == "COMPLETE" for r in rows)
    originals = {r["number"]: r for r in rows if r["duplicate_of"] is None}
    repeats = [r for r in rows if r["duplicate_of"] is not None]
    assert len(originals) == 2 and len(fake.calls) == 2  # TPE repeats a 2-point space; no repeat runs anything
    for r in repeats:
        source = originals[r["duplicate_of"]]
        assert (r["params"], r["values"], r["constraints"], r["run_dir"]) == (
            source["params"], source["values"], source["constraints"], source["run_dir"])
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["duplicates"] == 10 and summary["test_skipped"] and summary["test"] == []
    assert len(summary["pareto"]) == 2  # one per configuration, not one per repeat


def test_no_feasible_trial_gives_an_empty_front_and_no_test_run(tmp_path: Path) -> None:
    fake = FakeEvaluate(TABLE)
    outcome = _run(tmp_path, fake, sampler="grid", space=_space_file(tmp_path, constraints="cost_per_item_usd = 0.001"))
    assert outcome.summary is not None and outcome.summary.pareto == [] and outcome.summary.test == []
    assert all(r["feasible"] is False for r in _rows(outcome.run_dir))


def test_max_cost_stops_starting_trials(tmp_path: Path) -> None:
    fake = FakeEvaluate(TABLE)
    space = _space_file(tmp_path, search='mechanism = ["r1", "s3"]\nprompt = ["reviewer@v1", "reviewer@v2"]',
                        constraints="")
    outcome = _run(tmp_path, fake, sampler="grid", max_cost=2.5, no_test=True, space=space)
    assert len(_rows(outcome.run_dir)) == 3  # 1 $ each: after 3 $ no new trial starts


def test_the_same_seed_suggests_the_same_trials(tmp_path: Path) -> None:
    space = _space_file(tmp_path, search='mechanism = ["r1", "r2", "gate+r1", "s3"]\n'
                                         'temperature = { low = 0.0, high = 1.0 }')
    runs = [_run(tmp_path / str(i), FakeEvaluate(TABLE), trials=6, no_test=True, seed=7, space=space)
            for i in range(2)]
    params = [[r["params"] for r in _rows(o.run_dir)] for o in runs]
    assert params[0] == params[1] and len({json.dumps(p, sort_keys=True) for p in params[0]}) > 2
    other = _run(tmp_path / "other", FakeEvaluate(TABLE), trials=6, no_test=True, seed=8, space=space)
    assert [r["params"] for r in _rows(other.run_dir)] != params[0]


def test_resume_continues_the_same_study(tmp_path: Path) -> None:
    fake = FakeEvaluate(TABLE)
    first = _run(tmp_path, fake, trials=3, no_test=True)
    again = _run(tmp_path, fake, trials=5, no_test=True, resume=first.run_dir)
    assert again.run_dir == first.run_dir and again.study == first.study
    assert [r["number"] for r in _rows(first.run_dir)] == [0, 1, 2, 3, 4]


def test_joining_a_study_needs_the_same_space(tmp_path: Path) -> None:
    fake = FakeEvaluate(TABLE)
    storage = f"journal:{tmp_path / 'shared.journal'}"
    first = _run(tmp_path, fake, trials=2, no_test=True, storage=storage, study="shared")
    assert first.role == "coordinator"
    joined = _run(tmp_path, fake, trials=3, no_test=True, storage=storage, study="shared")
    assert joined.role == "worker" and joined.summary is None and len(joined.rows) == 3
    assert not (joined.run_dir / "summary.json").exists() and (joined.run_dir / "trials.jsonl").is_file()
    with pytest.raises(ConfigError, match="the study searches another space"):
        _run(tmp_path, fake, storage=storage, study="shared",
             space=_space_file(tmp_path / "x", search='mechanism = ["r1"]'))


def test_sqlite_refuses_several_workers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sqlite is for one process; use --storage journal:PATH"):
        _run(tmp_path, FakeEvaluate(TABLE), workers=2, storage=f"sqlite:///{tmp_path / 's.db'}")


@pytest.mark.parametrize(("fixed", "search", "message"), [
    ("", 'mechanism = ["r1"]\nprompt = ["reviewer@v2", "reviewer@v99"]',
     r"space\.toml: search\.prompt: prompt reference 'reviewer@v99' not found"),
    ('prompt = "reviewer@v99"', 'mechanism = ["r1"]', r"space\.toml: fixed\.prompt: prompt reference 'reviewer@v99'"),
    ('dataset = "NOPE.jsonl"', 'mechanism = ["r1"]', r"NOPE\.jsonl: no such dataset file"),
])
def test_inputs_every_trial_reads_are_checked_before_any_trial(tmp_path: Path, fixed: str, search: str,
                                                               message: str) -> None:
    """A bad choice used to surface only in the trial that drew it, after others were paid for."""
    fake = FakeEvaluate(TABLE)
    space = tmp_path / "space.toml"
    space.write_text(f'[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\n{fixed}\n[search]\n{search}\n')
    with pytest.raises(SaagOptError, match=message):
        _run(tmp_path, fake, space=space)
    assert fake.calls == [] and not (tmp_path / "runs").exists()


def test_a_trial_failing_on_a_user_error_is_logged_without_a_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """optuna logs a failed trial with its traceback; for a user error one line says it all."""
    class Refusing(FakeEvaluate):
        def __call__(self, config: Any, *, ledger: Any = None) -> Any:
            if config.setup.mechanism.spec == "s3":
                raise ConfigError("mechanism s3: not with this reviewer")
            return super().__call__(config, ledger=ledger)

    with caplog.at_level("WARNING", logger="optuna"):
        _run(tmp_path, Refusing(TABLE), sampler="grid", no_test=True)
    failed = [r for r in caplog.records if "failed" in r.getMessage() and "not with this reviewer" in r.getMessage()]
    assert failed and all(r.exc_info is None and r.exc_text is None for r in failed)


def test_a_trial_waits_for_an_earlier_running_one_that_has_not_stored_its_configuration_yet() -> None:
    """Two workers on one grid point: the later must not run it while the earlier is between ask and its key."""
    import threading  # noqa: PLC0415 - only this test races

    import optuna  # noqa: PLC0415 - heavy: optuna

    from saag_opt.tune import study as study_module  # noqa: PLC0415 - the module under test

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize"])
    earlier, later = study.ask(), study.ask()  # both RUNNING; the earlier has no key yet

    def earlier_finishes() -> None:
        earlier.set_user_attr(study_module.KEY_ATTR, "same")
        study.tell(earlier, [0.5])

    timer = threading.Timer(0.3, earlier_finishes)
    timer.start()
    try:
        objective = study_module.Objective.__new__(study_module.Objective)
        objective.storage_kind = "inmemory"
        found = objective._earlier_result(later, "same")
    finally:
        timer.join()
    assert found is not None and found.number == earlier.number  # waited, then repeats its result
    later.set_user_attr(study_module.KEY_ATTR, "same")  # the later one now runs its repeat
    assert objective._earlier_result(study.ask(), "other") is None  # another configuration runs at once
