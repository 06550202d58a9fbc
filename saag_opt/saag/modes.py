"""The stage-3 mode vocabulary: which grounding a cascade runs, named once for the whole package.

``paper`` is the paper's verbatim test; ``calibrated`` adds the accept rules of
``saag.calibration`` and the flag checks of ``saag.flags``; a set of rule names runs some of them
(the benchmark's ablation). Import-light on purpose (typing and ``saag_opt.choices`` only): configs,
the reviewer and the runtime guard name a mode without loading the rules.
"""

from __future__ import annotations

from typing import Union

from saag_opt.choices import GroundingName

ACCEPT_RULES: tuple[str, ...] = ("default", "format", "inflection", "qualifier", "date", "relative_date", "time",
                                 "number_word", "scaled_number", "unit", "code", "described_code", "template")
"""Rules that accept a value the paper's stage 3 missed, in the order they are tried (``saag.calibration``)."""

REGISTRY_RULES: tuple[str, ...] = ("default",)
"""Accept rules that ground a value in the registry, not the query: what they accept is an assumption
(``saag.calibration``); every other accept rule finds the value in the request in another form."""

FLAG_CHECKS: tuple[str, ...] = ("types", "duplicates")
"""Checks that flag what the paper's cascade does not see (``saag.flags``)."""

CALIBRATION_RULES: tuple[str, ...] = ACCEPT_RULES + FLAG_CHECKS
"""Every rule and check of calibrated mode."""

RuleSet = frozenset[str]
ModeName = GroundingName
"""The two named stage-3 modes (what CLI options and configs accept): ``saag_opt.choices.GroundingName``."""
GroundingMode = Union[ModeName, RuleSet]
"""``"paper"``, ``"calibrated"`` (every rule) or a set of rule names (the benchmark's ablation)."""

_ALL: RuleSet = frozenset(CALIBRATION_RULES)

INTERVENTION_GROUNDING: ModeName = "calibrated"
"""Stage-3 mode of the cascade wherever it triggers an intervention (self-repair, gate, SAAG-informed
reviewer, runtime guard). ``calibrated`` (``saag_opt.saag.calibration``): on every BFCL gold call and
its invalid perturbations it flags 9.4% of correct calls instead of 44.3% and 91.6% of invalid ones
instead of 79.2% (experiments/bench/grounding_calibration.py), so it sends fewer correct calls and more
wrong ones to repair. ``score`` keeps ``paper`` so its numbers stay the paper's."""


def calibration_rules(mode: GroundingMode) -> RuleSet:
    """The rules a mode enables (empty for ``paper``); raises ValueError on an unknown mode or rule."""
    if mode == "paper":
        return frozenset()
    if mode == "calibrated":
        return _ALL
    if isinstance(mode, frozenset):
        unknown = mode - _ALL
        if unknown:
            raise ValueError(f"unknown calibration rule(s) {sorted(unknown)}; known: {list(CALIBRATION_RULES)}")
        return mode
    raise ValueError(f"grounding must be 'paper' or 'calibrated', got {mode!r}")


__all__ = [
    "ACCEPT_RULES", "CALIBRATION_RULES", "FLAG_CHECKS", "INTERVENTION_GROUNDING", "REGISTRY_RULES", "GroundingMode",
    "ModeName", "RuleSet", "calibration_rules",
]
