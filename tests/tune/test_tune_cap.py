"""``tune --max-cost`` is one hard cap over the whole run, the test re-evaluation included.

Against the scripted server at gpt-4o's rates (the real evaluate runner, a private LM cache), the
dollars every evaluation of the run wrote to its ``costs.json`` never pass the cap, whether it is
reached during the trials or during the test phase; the run is ``stopped`` with what finished
kept, and ``--resume`` with a higher cap finishes it without asking the server anything twice.
The shared cap file itself is checked across processes below.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saag_opt.errors import CostCapReached
from saag_opt.testing import ScriptedOpenAIServer
from saag_opt.tune import TuneConfig, run_tune, spend
from saag_opt.tune.spend import SPEND_FILE, SharedSpendCap
from tests.evaluate.test_caps_and_cache import PRICE
from tests.tune.test_tune_runner import World, _space

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UNCAPPED_TRIALS, UNCAPPED_RUN = 0.0383, 0.0619
"""Dollars this grid's four trials, and the whole run with its test phase, cost without a cap (measured)."""


@pytest.fixture(autouse=True)
def _priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "lm-cache"))  # private: every call is paid once
    monkeypatch.setattr("saag_opt.lm.spend.accounting.model_price", lambda spec: PRICE)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(World()) as srv:
        yield srv


def _tune(tmp_path: Path, server: ScriptedOpenAIServer, **options: Any) -> Any:
    return run_tune(TuneConfig(space=_space(tmp_path, server), sampler="grid", runs_dir=tmp_path / "runs",
                               test_limit=4, **options))


def _spent(run_dir: Path) -> float:
    """Every evaluation's own ledger (trials, test): what the run paid."""
    return sum(json.loads(p.read_text())["roles"]["total"]["dollars"] for p in run_dir.rglob("costs.json"))


def _bodies(server: ScriptedOpenAIServer) -> set[str]:
    return {json.dumps(r.body, sort_keys=True) for r in server.chat_requests}


@pytest.mark.parametrize(("cap", "phase"), [(0.025, "trials"), (0.055, "test")])
def test_spend_never_passes_the_cap_including_the_test_phase_and_a_resume_finishes(
        tmp_path: Path, server: ScriptedOpenAIServer, cap: float, phase: str) -> None:
    assert cap < (UNCAPPED_TRIALS if phase == "trials" else UNCAPPED_RUN)
    stopped = _tune(tmp_path, server, max_cost=cap)
    run_dir = stopped.run_dir
    assert 0 < _spent(run_dir) <= cap
    assert json.loads((run_dir / SPEND_FILE).read_text())["spent"] <= cap
    header = json.loads((run_dir / "run.json").read_text())
    assert header["status"] == "stopped" and f"--max-cost ${cap:g} reached" in header["error"]["message"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] and summary["max_cost"] == cap and summary["spent"] <= cap
    states = {row.number: row.state for row in stopped.rows}
    if phase == "trials":  # the cut trial failed and waits for a resume; no test evaluation ran
        assert "FAIL" in states.values() and "WAITING" in states.values() and summary["test"] == []
        cut = next(r for r in stopped.rows if r.state == "FAIL")
        assert "cut by --max-cost" in (cut.error or "")
    else:  # every trial finished; the test phase stopped at the cap, finished results kept
        assert set(states.values()) == {"COMPLETE"}
        test = summary["test"]
        assert any(t["summary"] for t in test) and any(t["error"] and "--max-cost" in t["error"] for t in test)
    first = _bodies(server)
    server.reset()
    resumed = _tune(tmp_path, server, max_cost=1.0, resume=run_dir)
    assert resumed.run_dir == run_dir and json.loads((run_dir / "run.json").read_text())["status"] == "success"
    assert resumed.summary is not None and resumed.summary.stopped is None
    assert resumed.summary.test and all(t.summary is not None for t in resumed.summary.test)
    assert sum(r.state == "COMPLETE" and r.duplicate_of is None for r in resumed.rows) == 4
    assert not first & _bodies(server)  # what the first attempt paid for is replayed, not bought again


def test_local_worker_processes_stay_under_one_cap_with_the_test_phase(
        tmp_path: Path, server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = Path(__file__).parent / "priced"  # its sitecustomize prices the workers' calls like ours
    monkeypatch.setenv("PYTHONPATH", f"{hook}{os.pathsep}{REPO}")
    monkeypatch.setenv("SAAG_OPT_TEST_GPT4O_PRICES", "1")
    from tests.tune.priced.sitecustomize import PRICE as WORKER_PRICE  # noqa: PLC0415 - side effect: prices fake@ calls, once the env is set

    assert WORKER_PRICE == PRICE
    cap = 0.045
    outcome = _tune(tmp_path, server, max_cost=cap, workers=2)
    run_dir = outcome.run_dir
    workers = {row.worker for row in outcome.rows if row.state == "COMPLETE"}
    assert workers and not any(w.startswith(f"{os.getpid()}@") for w in workers)  # the workers ran the trials
    assert 0 < _spent(run_dir) <= cap
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    trials = sum(json.loads(p.read_text())["roles"]["total"]["dollars"] for p in run_dir.glob("trials/*/costs.json"))
    assert trials > 0  # the workers' calls were priced and booked under the cap


def book(cap: Any, seed: int, low: float, high: float, times: int | None = None) -> float:
    """Reserve a worst case in ``[low, high]`` and settle 20-100% of it, ``times`` times or until refused; the paid sum.

    Why one loop: the cap tests hammer it from spawned, forked and database-sharing processes alike.
    """
    rng, paid, done = random.Random(seed), 0.0, 0
    while times is None or done < times:
        worst = rng.uniform(low, high)
        try:
            hold = cap.reserve(worst)
        except CostCapReached:
            break
        actual = worst * rng.uniform(0.2, 1.0)
        hold.settle(actual)
        paid, done = paid + actual, done + 1
    return paid


def _hammer(path: str, cap: float, n: int, seed: int) -> None:
    book(SharedSpendCap(Path(path), cap), seed, 0.01, 0.05, n)


def test_processes_sharing_the_cap_file_never_pass_it_together(tmp_path: Path) -> None:
    path, cap = tmp_path / SPEND_FILE, 1.0
    shared = SharedSpendCap(path, cap, restart=True)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_hammer, args=(str(path), cap, 200, seed)) for seed in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert all(w.exitcode == 0 for w in workers)
    assert shared.reached and 0.9 < shared.spent <= cap and shared.held == 0
    with pytest.raises(CostCapReached, match=r"--max-cost \$1 reached"):
        shared.reserve(0.0001)


def test_a_dead_processes_hold_counts_at_its_worst_case_and_a_higher_cap_lifts_the_stop(tmp_path: Path) -> None:
    path = tmp_path / SPEND_FILE
    shared = SharedSpendCap(path, 1.0, restart=True)
    state = json.loads(path.read_text())
    state["holds"]["gone"] = {"worker": "999999999@" + __import__("socket").gethostname(), "dollars": 0.7}
    path.write_text(json.dumps(state))
    assert shared.held == pytest.approx(0.7)
    with pytest.raises(CostCapReached):
        shared.reserve(0.5)  # the dead hold is settled at 0.7 first: 0.7 + 0.5 > 1
    assert shared.spent == pytest.approx(0.7) and shared.held == 0 and shared.reached
    again = SharedSpendCap(path, 2.0, restart=True)  # a resume with a higher --max-cost
    assert not again.reached and again.spent == pytest.approx(0.7)
    again.reserve(0.5).settle(0.25)
    assert again.spent == pytest.approx(0.95)


def test_a_resume_counts_spend_of_an_uncapped_attempt_the_file_did_not_see(tmp_path: Path) -> None:
    path = tmp_path / SPEND_FILE
    SharedSpendCap(path, 1.0, restart=True).reserve(0.5).settle(0.25)  # a capped attempt
    resumed = SharedSpendCap(path, 1.0, restart=True, spent=0.75)  # the run files say 0.75 (an uncapped attempt)
    assert resumed.spent == pytest.approx(0.75)
    with pytest.raises(CostCapReached):
        resumed.reserve(0.3)


_INHERITED: list[SharedSpendCap] = []
"""The parent's cap, used as is by forked children (its lock file descriptor came along)."""


def _hammer_inherited(out: str, seed: int) -> None:
    Path(out).write_text(repr(book(_INHERITED[0], seed, 0.001, 0.004, 150)))


def test_forked_children_of_a_process_that_used_the_cap_still_exclude_each_other(tmp_path: Path) -> None:
    """The cap keeps its lock file open; a forked child must lock through its own, or updates get lost."""
    path = tmp_path / SPEND_FILE
    shared = SharedSpendCap(path, 1.0, restart=True)
    shared.reserve(0.01).settle(0.01)  # the parent has used (opened) its lock
    _INHERITED[:] = [shared]
    context = multiprocessing.get_context("fork")
    outs = [tmp_path / f"paid-{n}" for n in range(3)]
    children = [context.Process(target=_hammer_inherited, args=(str(out), n)) for n, out in enumerate(outs)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert all(c.exitcode == 0 for c in children)
    paid = 0.01 + sum(float(out.read_text()) for out in outs)
    assert shared.spent == pytest.approx(paid) and shared.spent <= 1.0 and shared.held == 0  # no update lost


def test_a_hold_waiting_for_room_does_not_rewrite_the_cap_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / SPEND_FILE
    first, second = SharedSpendCap(path, 1.0, restart=True), SharedSpendCap(path, 1.0)
    hold = first.reserve(0.9)
    writes: list[Path] = []
    real_write = spend.atomic_write_json
    monkeypatch.setattr(spend, "atomic_write_json", lambda p, state: writes.append(p) or real_write(p, state))
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(second.reserve(0.5)))
    thread.start()
    thread.join(0.4)  # ~8 polls at POLL_SECONDS: the state did not change, so neither did the file
    assert thread.is_alive() and writes == []
    hold.settle(0.3)
    thread.join(10)
    assert got and len(writes) == 2  # the settle, then the hold that now fits
    assert second.spent == pytest.approx(0.3) and second.held == pytest.approx(0.5)


def test_a_hold_of_a_silent_process_elsewhere_is_settled_after_the_grace_and_a_beating_one_is_not(
        tmp_path: Path) -> None:
    """Another host's pid cannot be checked: a hold there counts as dead only after ``grace`` seconds of silence."""
    path = tmp_path / SPEND_FILE
    shared = SharedSpendCap(path, 1.0, restart=True, grace=30.0)
    state = json.loads(path.read_text())
    now = __import__("time").time()
    state["holds"]["silent"] = {"worker": "7@elsewhere", "dollars": 0.4, "at": now - 60}
    state["holds"]["beating"] = {"worker": "8@elsewhere", "dollars": 0.3, "at": now - 60}
    state["holds"]["fresh"] = {"worker": "9@elsewhere", "dollars": 0.1, "at": now}
    state["beats"] = {"8@elsewhere": now - 5}
    path.write_text(json.dumps(state))
    shared.reserve(0.1).settle(0.05)
    after = json.loads(path.read_text())
    assert sorted(after["holds"]) == ["beating", "fresh"]
    assert shared.spent == pytest.approx(0.4 + 0.05) and shared.held == pytest.approx(0.4)


def test_each_study_storage_has_one_account_every_process_finds(tmp_path: Path) -> None:
    from saag_opt.tune.storage import StorageSpec  # noqa: PLC0415

    run_dir = tmp_path / "run"
    assert spend.spend_store(run_dir).path == run_dir / SPEND_FILE
    default_journal = StorageSpec("journal", str(run_dir / "study.journal"))
    assert spend.spend_store(run_dir, default_journal, "s1").path == run_dir / SPEND_FILE
    shared = StorageSpec("journal", str(tmp_path / "nfs" / "study.journal"))  # workers on other machines mount it
    here, there = spend.spend_store(run_dir, shared, "s1"), spend.spend_store(tmp_path / "other-run", shared, "s1")
    assert here.path == there.path == tmp_path / "nfs" / "study.journal.s1.spend.json"
    with pytest.warns(UserWarning, match="kept in PostgreSQL only"):  # our SQL is PostgreSQL's
        assert spend.spend_store(run_dir, StorageSpec("rdb", "mysql+pymysql://u@db/optuna"), "s1").path == (
            run_dir / SPEND_FILE)
