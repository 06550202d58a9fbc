"""The informed reviewer's note on the SAAG report: its name, its empty default, and how a version stores it.

Import-light on purpose (no dspy): the rails, the optimize config and the CLI read these without
loading the reviewer.
"""

from __future__ import annotations

from collections.abc import Mapping

REPORT_NOTE = "report"
"""The informed reviewer's note on the SAAG report, kept in a prompt artifact beside the predictors' texts.

Why a component of its own: the small informed reviewer obeys the report rather than weighing it,
so what it is *shown* (how far to trust which finding, in what words) is a lever that its
instructions are not. GEPA edits it like an instruction; a plain reviewer ignores it; empty (the
default) shows the report exactly as before."""

COMPONENT_PREFIX = "reviewer."
"""GEPA's candidate keys are ``reviewer.<predictor>`` (``optimize.program.ReviewerProgram.named_predictors``)."""

EMPTY_NOTE = "(no note)"
"""The default report note, which shows nothing: dspy replaces an empty instruction with a generated one,
so "no note" needs a text of its own. A prompt version never stores it (``version_instructions``)."""


def is_note(component: str) -> bool:
    """Is this name (a GEPA component, ``reviewer.<name>``, or a bare predictor name) the report note?"""
    return component.removeprefix(COMPONENT_PREFIX) == REPORT_NOTE


def note_of(instructions: str) -> str:
    """The note a report-note text stands for ("" for the default)."""
    return "" if instructions.strip() in ("", EMPTY_NOTE) else instructions.strip()


def version_instructions(base: Mapping[str, str], candidate: Mapping[str, str]) -> dict[str, str]:
    """``base`` updated with a GEPA candidate's texts (keys ``reviewer.<name>``), as a prompt version stores them.

    The default report note is left out, so a version that never had a note gets none and keeps its hash.
    """
    out = dict(base)
    for key, text in candidate.items():
        name = key.removeprefix(COMPONENT_PREFIX)
        if is_note(name) and not note_of(text):
            out.pop(name, None)
        else:
            out[name] = text
    return out


def with_note(note: str, report: str) -> str:
    """The report as the informed reviewer sees it: the note (if any) above it."""
    return f"{note.strip()}\n\n{report}" if note.strip() else report


__all__ = ["COMPONENT_PREFIX", "EMPTY_NOTE", "REPORT_NOTE", "is_note", "note_of", "version_instructions", "with_note"]
