"""Stable train/val/test splits from a hash of each example's id.

A split is a pure function of the id (SHA-256 of ``salt:id``), so it does not depend on file order,
on which other examples are loaded, or on the Python version, and an optimizer can never see a
test example by accident. Registry-size variants (``<id>@r10``) hash their *base* id, so one
question lands in the same split at every registry size.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Literal

from saag_opt.episodes import Episode
from saag_opt.errors import ConfigError
from saag_opt.model import Example

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.5, 0.25, 0.25)
DEFAULT_SALT = "saag-opt"


def base_id(example_id: str) -> str:
    """The id before any ``@`` variant suffix (``simple_python_3@r10`` -> ``simple_python_3``)."""
    return example_id.split("@", 1)[0]


def _check_fractions(fractions: Sequence[float]) -> None:
    if len(fractions) != 3 or any(not math.isfinite(f) or f < 0 for f in fractions):
        raise ConfigError(f"split fractions must be three non-negative numbers (train, val, test), got {fractions}")
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ConfigError(f"split fractions must sum to 1, got {list(fractions)} (sum {sum(fractions):g})")


def split_of(example_id: str, fractions: Sequence[float] = DEFAULT_FRACTIONS, salt: str = DEFAULT_SALT) -> Split:
    """The split of one id: ``train`` | ``val`` | ``test``.

    Raises:
        ConfigError: fractions are not three non-negative numbers summing to 1.
    """
    _check_fractions(fractions)
    digest = hashlib.sha256(f"{salt}:{base_id(example_id)}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < fractions[0]:
        return "train"
    if u < fractions[0] + fractions[1]:
        return "val"
    return "test"


def assign_splits(examples: Iterable[Example], fractions: Sequence[float] = DEFAULT_FRACTIONS,
                  salt: str = DEFAULT_SALT, *, overwrite: bool = False) -> list[Example]:
    """Copies of ``examples`` tagged with their split; a split already recorded is kept unless ``overwrite``.

    Raises:
        ConfigError: bad fractions.
    """
    _check_fractions(fractions)
    return [ex if ex.split is not None and not overwrite else ex.with_split(split_of(ex.id, fractions, salt))
            for ex in examples]


def split_hash(examples: Iterable[Example | Episode]) -> str:
    """SHA-256 (hex) of the sorted ids (examples or episodes), recorded so a run names exactly what it used."""
    ids = sorted(ex.id for ex in examples)
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()
