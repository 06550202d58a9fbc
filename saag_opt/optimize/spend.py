"""``--max-cost`` for a whole optimize run: one capped ledger over GEPA and the test phase, across resumes.

Why a run-level ledger: ``--resume`` continues the same run, so a cap of $5 means $5 in total, not
$5 per attempt. ``open_ledger`` adds what earlier attempts spent (their ``costs.json``) before the
cap is set; ``CostSaver`` rewrites ``costs.json`` after every GEPA iteration, so a crash loses at
most one iteration's accounting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def open_ledger(max_cost: float | None, run_dir: Path) -> Any:
    """The run's ledger: an earlier attempt's accounts restored, capped at ``max_cost`` in total."""
    from saag_opt.lm import CostLedger
    from saag_opt.lm.spendcap import SpendCap

    ledger = CostLedger()
    path = run_dir / "costs.json"
    if path.is_file():
        try:
            ledger.restore(json.loads(path.read_text(encoding="utf-8")).get("roles") or {})
        except (OSError, ValueError, TypeError):
            pass  # an unreadable earlier ledger: this attempt starts counting from zero
    if max_cost is None:
        return ledger
    capped = CostLedger(cap=SpendCap(max_cost, spent=ledger.total_dollars()))
    capped.restore(ledger.to_dict()["roles"])
    return capped


def save_costs(run_dir: Path, ledger: Any) -> dict[str, Any]:
    """Write ``costs.json`` (atomically) and return it."""
    from saag_opt.runfiles import atomic_write_json

    costs = ledger.to_dict()
    atomic_write_json(run_dir / "costs.json", costs)
    return costs


class CostSaver:
    """gepa callback: keep ``costs.json`` current after every iteration (resume reads it)."""

    def __init__(self, run_dir: Path, ledger: Any) -> None:
        self.run_dir = run_dir
        self.ledger = ledger

    def on_iteration_end(self, event: Any) -> None:
        """Rewrite ``costs.json``."""
        save_costs(self.run_dir, self.ledger)


__all__ = ["CostSaver", "open_ledger", "save_costs"]
