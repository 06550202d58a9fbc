"""The ``Exporter`` contract: pure, deterministic, complete text covering every predictor."""

from __future__ import annotations

from saag_opt.artifacts.export import Exporter
from saag_opt.artifacts.version import PromptVersion


def check_exporter(exporter: Exporter, version: PromptVersion) -> str:
    """Export ``version`` through the contract; returns the text.

    Use a version with plain instructions (no characters a format must escape), so the check
    "every instruction appears" is meaningful for every format.

    Raises:
        AssertionError: the first broken rule, named.
    """
    before = version.model_dump()
    text = exporter.export(version)
    assert isinstance(text, str) and text.endswith("\n"), "export must return text ending with a newline"
    assert exporter.export(version) == text, "export is not deterministic"
    assert version.model_dump() == before, "export mutated the version"
    missing = [name for name, instruction in version.instructions.items() if instruction not in text]
    assert not missing, f"the export lacks the instructions of predictor(s) {missing}"
    return text


__all__ = ["check_exporter"]
