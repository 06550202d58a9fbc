"""Prompt versions for people: the markdown page beside each version file, and a diff of two versions."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from saag_opt.artifacts.version import PromptVersion


def _cell(value: Any) -> str:
    """A markdown table cell: JSON-ish for containers, '-' for empty, pipes escaped."""
    if value in (None, "", [], {}):
        text = "-"
    elif isinstance(value, list):
        text = ", ".join(map(str, value))
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={v}" for k, v in value.items())
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(version: PromptVersion) -> str:
    """Human-readable page: metadata table (lineage, models, scores), then each instruction."""
    rows = [
        ("version", version.version), ("program", version.program), ("sha256", f"`{version.sha256}`"),
        ("parents", version.parents), ("source", version.source), ("created", version.created),
        ("models", version.models), ("dataset", version.dataset), ("split hash", version.split_hash),
        ("trained on", version.trained_on), ("selected on", version.selected_on),
        ("scores", version.scores), ("cost", version.cost),
    ]
    if version.saag_report is not None:  # only then: the seeds' pages stay as shipped
        rows.append(("tuned with SAAG report", f"yes (grounding {version.saag_report})"))
    if version.quarantine is not None:
        rows.append(("quarantined", version.quarantine))
    lines = [f"# {version.ref}", "", "<!-- generated from the .json by saag-opt; do not edit by hand -->", "",
             "| field | value |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in rows]
    if version.notes:
        lines += ["", version.notes.strip()]
    for name, text in version.instructions.items():
        fence = _fence(text)
        lines += ["", f"## Predictor `{name}`", "", f"{fence}text", text.rstrip("\n"), fence]
    return "\n".join(lines) + "\n"


_DIFF_FIELDS = ("program", "sha256", "parents", "source", "created", "models", "dataset", "split_hash",
                "trained_on", "selected_on", "saag_report", "scores", "cost", "notes", "quarantine")


def diff_versions(a: PromptVersion, b: PromptVersion) -> str:
    """Metadata changes, then a unified diff of each predictor's instructions (``a`` -> ``b``)."""
    out = [f"--- {a.ref}", f"+++ {b.ref}"]
    for field in _DIFF_FIELDS:
        old, new = getattr(a, field), getattr(b, field)
        if old != new:
            if field == "sha256":
                old, new = old[:12], new[:12]
            out.append(f"~ {field}: {json.dumps(old, sort_keys=True)} -> {json.dumps(new, sort_keys=True)}")
    for name in list(a.instructions) + [n for n in b.instructions if n not in a.instructions]:
        old_text, new_text = a.instructions.get(name), b.instructions.get(name)
        if old_text == new_text:
            out.append(f"= predictor {name}: instructions identical")
            continue
        body = difflib.unified_diff(
            (old_text or "").splitlines(), (new_text or "").splitlines(),
            fromfile=f"{a.ref}:{name}" + ("" if old_text is not None else " (absent)"),
            tofile=f"{b.ref}:{name}" + ("" if new_text is not None else " (absent)"), lineterm="",
        )
        out.extend(body)
    return "\n".join(out) + "\n"


__all__ = ["diff_versions", "render_markdown"]
