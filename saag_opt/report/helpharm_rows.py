"""The help/harm rows every report prints: evaluate (one column), compare and optimize (one per version).

Built once so the three reports name and format the same measures the same way. Each column is
the ``HelpHarm`` of one reviewed condition against the base agent alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.table import Table

from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.report.format import ci_points, pct, points, ratio

_COUNTS = (("both right", "both_right"), ("fixed (base wrong -> right)", "fixed"),
           ("broken (base right -> wrong)", "broken"), ("both wrong", "both_wrong"))


def helpharm_table(title: str, columns: Mapping[str, HelpHarm],
                   unusable: Sequence[int] | None = None) -> Table:
    """Counts of the paired 2x2 table, then the rates with conditional denominators; a column per version.

    ``unusable``: reviewer replies per column that stayed unreadable after a retry; shown last, because
    a reviewer that cannot be read looks harmless in every other row.
    """
    table = Table(title=title)
    table.add_column("measure")
    for name in columns:
        table.add_column(name, justify="right")
    cols = list(columns.values())
    for label, key in _COUNTS:
        table.add_row(label, *(str(getattr(h, key)) for h in cols))
    table.add_section()
    table.add_row("helpfulness % = fixed / base wrong", *(pct(h.helpfulness) for h in cols))
    table.add_row("harmfulness % = broken / base right", *(pct(h.harmfulness) for h in cols))
    table.add_row("benefit-to-risk ratio", *(ratio(h.ratio) for h in cols))
    table.add_row("net accuracy change vs base", *(points(h.net_change) for h in cols))
    table.add_row("bootstrap 95% CI", *(ci_points(h.net_change_ci95) for h in cols))
    table.add_row("McNemar exact p vs base (fixed vs broken)", *(f"{h.p_value:.4g}" for h in cols))
    if unusable is not None:
        table.add_section()
        table.add_row("reviewer replies unusable (after a retry)", *(str(n) for n in unusable))
    return table


__all__ = ["helpharm_table"]
