"""``--max-cost`` for a whole optimize run: one capped ledger over GEPA and the test phase, across resumes.

Why a run-level ledger: ``--resume`` continues the same run, so a cap of $5 means $5 in total, not
$5 per attempt. ``open_ledger`` (``saag_opt.lm.spend.ledgerfile``, shared with evaluate and compare) adds
what earlier attempts spent (their ``costs.json``) before the cap is set; ``CostSaver`` rewrites
``costs.json`` after every GEPA iteration, so a crash loses at most one iteration's accounting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from saag_opt.lm.spend.ledgerfile import open_ledger, save_costs


class CostSaver:
    """gepa callback: keep ``costs.json`` current after every iteration (resume reads it)."""

    def __init__(self, run_dir: Path, ledger: Any) -> None:
        self.run_dir = run_dir
        self.ledger = ledger

    def on_iteration_end(self, event: Any) -> None:
        """Rewrite ``costs.json``."""
        save_costs(self.run_dir, self.ledger)


__all__ = ["CostSaver", "open_ledger", "save_costs"]
