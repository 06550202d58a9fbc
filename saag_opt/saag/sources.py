"""Where the text a call's values can come from sits: the user's and system messages, and each tool result.

The injection check (``saag.injection``) and the data-flow policy (``saag.flow``) read the same
sources; a tool result keeps the call that produced it, so the policy can tell whether the user's
request names that result ("pay the bill in bill-december.txt": ``read_file`` was called with a
name from the request).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Sources", "ToolText"]


@dataclass(frozen=True)
class ToolText:
    """One tool result: the tool that produced it and its text (JSON results are read field by field)."""

    tool: str
    text: str
    arguments: Mapping[str, Any] | None = None
    """The arguments of the call that produced it (None: not known, e.g. a result without its call)."""


@dataclass(frozen=True)
class Sources:
    """What the values of a call can come from: the user's and system messages, and the tool results."""

    user: tuple[str, ...] = ()
    system: tuple[str, ...] = ()
    tools: tuple[ToolText, ...] = ()
