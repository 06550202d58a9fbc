"""A run's ``costs.json``: restore what earlier attempts spent, write it back atomically.

Why here (below evaluation and optimize): every resumable verb (``evaluate --resume``, ``compare
--resume``, ``optimize --resume``) continues the same run directory, so its totals, and its
``--max-cost``, must count what earlier attempts of that run already spent. One function does it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from saag_opt.atomic import atomic_write_json
from saag_opt.lm.spend.accounting import CostLedger
from saag_opt.lm.spend.cap import SpendCap
from saag_opt.runfiles import COSTS_FILE, read_costs


def earlier_roles(run_dir: Path) -> dict[str, Any]:
    """The per-role accounts in ``run_dir/costs.json`` ({} when there is none or it does not parse)."""
    costs = read_costs(run_dir)  # an unreadable earlier ledger: this attempt starts counting from zero
    return costs["roles"] if costs is not None else {}


def open_ledger(max_cost: float | None, run_dir: Path | None, *, parent: CostLedger | None = None) -> CostLedger:
    """The run's ledger with an earlier attempt's accounts restored (none for ``run_dir=None``: a new run).

    Without ``parent``: capped at ``max_cost`` in total (earlier spend included). With ``parent``
    (a pass of a bigger run whose cap covers it): a child of it; the restored accounts stay in the
    child (the parent restores its own total).
    """
    roles = earlier_roles(run_dir) if run_dir is not None else {}
    if parent is not None:
        ledger = parent.child()
    else:
        spent = CostLedger()
        spent.restore(roles)
        ledger = CostLedger(cap=SpendCap(max_cost, spent=spent.total_dollars()) if max_cost is not None else None)
    ledger.restore(roles)
    return ledger


def save_costs(run_dir: Path, ledger: CostLedger) -> dict[str, Any]:
    """Write ``costs.json`` (atomically) and return it."""
    costs = ledger.to_dict()
    atomic_write_json(run_dir / COSTS_FILE, costs)
    return costs


__all__ = ["COSTS_FILE", "earlier_roles", "open_ledger", "save_costs"]
