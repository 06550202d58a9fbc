"""``--max-cost`` as a hard cap: reserve a call's worst case before it is sent, settle after.

Why reservations rather than checking the spend so far: concurrent workers each send a call
whose price is only known afterwards, so "spent < cap" before a call still lets a run end above
the cap. Here every attempt of every LM call first holds its worst-case price (prompt tokens +
``max_tokens`` at the model's rates, ``accounting.worst_case_dollars``); the cap refuses a hold
that could not fit, so ``settled + held <= max_cost`` at every instant and the spend never
passes the cap.

A refused hold waits while other calls' holds are in flight (they usually settle far below their
worst case) and is refused for good only when the settled spend alone leaves no room; from then
on every hold is refused (``reached``) so all workers stop at once and the run ends cleanly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from saag_opt.errors import ConfigError, CostCapReached


@dataclass
class Hold:
    """One reserved worst case; ``settle`` it exactly once with what the attempt cost."""

    cap: SpendCap
    dollars: float
    settled: bool = False

    def settle(self, actual: float | None) -> None:
        """Release the hold and count ``actual`` dollars (None = unknown: count the worst case)."""
        self.cap._settle(self, self.dollars if actual is None else actual)


ROUNDING_MARGIN = 1e-9
"""Dollars kept free under the cap so float sums taken in another order (the ledger's) stay below it."""


class SpendCap:
    """A dollar ceiling shared by every LM of a run (all roles, all workers, all passes)."""

    def __init__(self, max_cost: float, *, spent: float = 0.0) -> None:
        if max_cost <= 0:
            raise ConfigError(f"max_cost: must be > 0 USD, got {max_cost}")
        self.max_cost = float(max_cost)
        self._spent = float(spent)
        self._held = 0.0
        self._cond = threading.Condition()
        self.reached = self._spent >= self.max_cost
        self.refused: str | None = "spend before this attempt already reached the cap" if self.reached else None

    @property
    def spent(self) -> float:
        """Dollars settled so far (failed attempts that may have been billed count their worst case)."""
        with self._cond:
            return self._spent

    @property
    def held(self) -> float:
        """Dollars reserved by calls in flight."""
        with self._cond:
            return self._held

    def reserve(self, dollars: float, *, what: str = "the next LM call") -> Hold:
        """Hold ``dollars`` for one attempt, waiting for in-flight holds if they might free room.

        Raises:
            CostCapReached: the cap cannot take this call (or an earlier call was already refused).
        """
        dollars = max(0.0, float(dollars))
        with self._cond:
            while True:
                if self.reached:
                    raise CostCapReached(self.message())
                if self._spent + dollars > self.max_cost - ROUNDING_MARGIN:
                    self.reached = True
                    self.refused = (f"{what} could cost up to ${dollars:.4f} and ${self._spent:.4f} "
                                    f"of ${self.max_cost:.2f} is spent")
                    self._cond.notify_all()
                    raise CostCapReached(self.message())
                if self._spent + self._held + dollars <= self.max_cost - ROUNDING_MARGIN:
                    self._held += dollars
                    return Hold(self, dollars)
                self._cond.wait()

    def _settle(self, hold: Hold, actual: float) -> None:
        with self._cond:
            if hold.settled:
                return
            hold.settled = True
            self._held = max(0.0, self._held - hold.dollars)
            self._spent += max(0.0, float(actual))
            self._cond.notify_all()

    def message(self) -> str:
        """The one line a user reads when the run stops."""
        why = f": {self.refused}" if self.refused else ""
        return f"--max-cost ${self.max_cost:g} reached{why}; finished work is kept, resume with a higher --max-cost"


__all__ = ["Hold", "SpendCap"]
