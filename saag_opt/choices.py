"""The closed sets of choices the package offers, each written once.

Import-light on purpose (typing only): the CLI builds its option enums from these, configs type their
fields with them, and the prompt store types a version's ``saag_report`` with ``GroundingName``, all
without loading the SAAG cascade, dspy or optuna. Add a value here and every place that offers the
choice offers it.
"""

from __future__ import annotations

from typing import Literal, get_args

GroundingName = Literal["paper", "calibrated"]
"""Stage 3 of the SAAG cascade: the paper's verbatim test or the calibrated rules (docs/design.md)."""

OnUnusable = Literal["approve", "reject"]
"""What an unreadable review means, after its one retry."""

AcceptName = Literal["strict", "equal"]
"""GEPA's acceptance of a proposal on its minibatch: a strict gain, or a tie too."""

ProposerName = Literal["edit", "add", "rewrite"]
"""How GEPA's reflection LM changes the reviewer's instruction: one rule edit (add, replace or delete), one rule
added (nothing else changes), or a whole new text."""

BudgetName = Literal["light", "medium", "heavy"]
"""GEPA's auto budgets (rollouts scale with the candidates each names)."""

ReasoningEffort = Literal["minimal", "low", "medium", "high"]
"""The reasoning effort a reasoning model (gpt-5*, o*) is asked for."""

SplitName = Literal["train", "val", "test"]
"""The three hash splits of a dataset; GEPA and tune see train and val only."""

GuardAction = Literal["allow", "revise", "block"]
"""What the runtime guard does with proposed calls: run them, run its revision instead, or run nothing."""

OnError = Literal["allow", "block"]
"""What the runtime guard does when its review fails (timeout, dead server, unusable reply)."""

UserReminder = Literal["auto", "on", "off"]
"""tau2's user simulator: end its prompt with a reminder that it is the customer (``auto``: for the embedded
model only, which otherwise answers as the agent; API models get tau2's prompt unchanged)."""


def values(choice: object) -> tuple[str, ...]:
    """The values of one of the Literals above, in their written order (for CLI enums and messages)."""
    return tuple(str(v) for v in get_args(choice))
