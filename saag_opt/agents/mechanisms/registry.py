"""Review mechanisms by name: the spec grammar, the registry and the built-in families (docs/design.md §3, §5).

Specs: ``none`` | ``binary`` | ``saag`` (SAAG self-repair, no LLM reviewer) | ``r<N>`` (progressive
review) | ``s<N>`` (best-of-N selection) | ``g<N>`` (best-of-N grading) | ``guard+r<N>``
(experimental: the runtime guard's loop, ``r<N>`` plus its stage 1-2 rules; agents/mechanisms/guarded.py) |
``saag+s<N>`` (experimental: SAAG-verified best-of-N, the first candidate the cascade passes;
agents/mechanisms/verified.py) |
``gate+r<N>`` / ``gate+s<N>`` / ``gate+g<N>`` / ``gate+guard+r<N>`` (experimental: the LLM reviewer
only runs when the gold-free SAAG cascade does not vouch for the base call).

One family per module (no_review, repair, progressive, selection, guarded, verified, gate), each on
the shared types of ``mechanisms.base``; none of them imports this module, so this one imports them
all and registers the built-ins below, in one fixed order (the order of ``mechanism_names``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.mechanisms.gate import Gate
from saag_opt.agents.mechanisms.guarded import GuardedReview
from saag_opt.agents.mechanisms.no_review import NoReview
from saag_opt.agents.mechanisms.progressive import Progressive
from saag_opt.agents.mechanisms.repair import SelfRepair
from saag_opt.agents.mechanisms.selection import Grading, Selection
from saag_opt.agents.mechanisms.verified import VerifiedOrAbstain, VerifiedSelection
from saag_opt.errors import ConfigError

MechanismFactory = Callable[..., Mechanism]
"""Builds a mechanism: ``factory(n=N, max_repairs=D)`` for numbered names, ``factory(max_repairs=D)`` else."""


@dataclass(frozen=True)
class _Registration:
    factory: MechanismFactory
    description: str
    numbered: bool


_MECHANISMS: dict[str, _Registration] = {}
_WORDS = r"[a-z][a-z_-]*(?:\+[a-z][a-z_-]*)*"
_NAME = re.compile(rf"^{_WORDS}$")
_SPEC = re.compile(rf"^(?P<name>{_WORDS})(?P<n>\d*)$")
GATE_PREFIX = "gate+"
"""``gate+<spec>`` wraps any mechanism that calls the reviewer in a ``Gate``."""


def register_mechanism(name: str, factory: MechanismFactory, description: str, *, numbered: bool = False) -> None:
    """Make ``name`` (``name<N>`` when ``numbered``) a mechanism spec; a new mechanism is a class plus this call.

    A name is lowercase words joined by ``+`` (``guard+r``); ``gate+`` is the gate's prefix.

    Raises:
        ConfigError: a name that is not lowercase letters, ``_``, ``-`` and inner ``+`` (digits belong to
            the grammar), or one that starts with ``gate+``.
    """
    if not _NAME.match(name) or name.startswith(GATE_PREFIX):
        raise ConfigError(f"mechanism name {name!r}: use lowercase letters, '_' or '-' (words joined by '+'), "
                          f"not starting with {GATE_PREFIX!r}")
    _MECHANISMS[name] = _Registration(factory, description, numbered)


def _form(name: str) -> str:
    return f"{name}<N>" if _MECHANISMS[name].numbered else name


def _sample(name: str) -> Mechanism:
    entry = _MECHANISMS[name]
    return entry.factory(n=1, max_repairs=None) if entry.numbered else entry.factory(max_repairs=None)


def mechanism_names(*, reviewer_only: bool = False) -> list[str]:
    """The accepted spec forms (gate+ forms last), for help texts and error messages."""
    forms = [_form(name) for name in _MECHANISMS if not reviewer_only or _sample(name).needs_reviewer]
    gated = [GATE_PREFIX + _form(name) for name in _MECHANISMS if _sample(name).needs_reviewer]
    return forms + gated


def describe_mechanisms() -> dict[str, str]:
    """Spec form -> one-line description."""
    out = {_form(name): f"{_form(name)}: {entry.description}" for name, entry in _MECHANISMS.items()}
    out[GATE_PREFIX + "<mechanism>"] = "experimental: LLM reviewer only when the SAAG cascade does not vouch for the call"
    return out


def parse_mechanism(spec: str, *, max_repairs: int | None = None) -> Mechanism:
    """Parse a registered spec (``mechanism_names()``: ``none``, ``r2``, ``guard+r2``, ...), optionally ``gate+``.

    Raises:
        ConfigError: unknown form, N < 1, or a gate around a mechanism without an LLM reviewer.
    """
    text = (spec or "").strip().lower()
    gate = text.startswith(GATE_PREFIX)
    match = _SPEC.match(text.removeprefix(GATE_PREFIX))
    entry = _MECHANISMS.get(match["name"]) if match else None
    if match is None or entry is None or entry.numbered != bool(match["n"]):
        raise ConfigError(f"unknown mechanism {spec!r}. Available: {mechanism_names()}")
    if max_repairs is not None and max_repairs < 0:
        raise ConfigError(f"max_repairs must be >= 0, got {max_repairs}")
    if entry.numbered:
        n = int(match["n"])
        if n < 1:
            raise ConfigError(f"mechanism {spec!r}: N must be >= 1")
        mechanism = entry.factory(n=n, max_repairs=max_repairs)
    else:
        mechanism = entry.factory(max_repairs=max_repairs)
    if gate and not mechanism.needs_reviewer:
        raise ConfigError(f"mechanism {spec!r}: gate+ wraps an LLM-reviewer mechanism "
                          f"({', '.join(mechanism_names(reviewer_only=True)[:3])}, ...)")
    return Gate(mechanism) if gate else mechanism


register_mechanism("none", lambda max_repairs: NoReview(), "base agent alone")
register_mechanism("binary", lambda max_repairs: SelfRepair("binary", informative=False, max_repairs=max_repairs),
                   "SAAG-triggered self-repair with 'incorrect, try again'")
register_mechanism("saag", lambda max_repairs: SelfRepair("saag", informative=True, max_repairs=max_repairs),
                   "SAAG self-repair with psi corrections")
register_mechanism("r", lambda n, max_repairs: Progressive(n), "progressive review, at most N reviews",
                   numbered=True)
register_mechanism("s", lambda n, max_repairs: Selection(n), "best-of-N selection", numbered=True)
register_mechanism("g", lambda n, max_repairs: Grading(n), "best-of-N grading", numbered=True)
register_mechanism("guard+r", lambda n, max_repairs: GuardedReview(n),
                   "the runtime guard's loop: r<N> plus its stage 1-2 rules (experimental)", numbered=True)
register_mechanism("saag+s", lambda n, max_repairs: VerifiedSelection(n),
                   "SAAG-verified best-of-N: the first candidate the cascade passes; "
                   "the selector only when it cannot decide (experimental)", numbered=True)
register_mechanism("saag+abstain", lambda max_repairs: VerifiedOrAbstain(),
                   "the base call if the SAAG cascade verifies it, else no call; no LLM reviewer (experimental)")


def resolve_mechanism(spec: str | Mechanism, *, max_repairs: int | None = None) -> Mechanism:
    """Name or instance -> instance (call once, at the boundary)."""
    return parse_mechanism(spec, max_repairs=max_repairs) if isinstance(spec, str) else spec


if TYPE_CHECKING:
    _f: Mechanism = Gate(Progressive(2))
