"""The edit proposer: dspy.GEPA's ``instruction_proposer`` that asks the reflection LM for one rule edit.

Why: a small reflection model asked to rewrite a whole reviewer instruction shortens it, asks for
instructions or refuses (every committed run's proposals); asked for one rule, as JSON under a
schema, it can write one (ACE's delta edits, gepa's open requests for add-only and bounded
mutations). Each call of ``EditProposer``:

1. reads the parent instruction as numbered rules (``edits.read_rules``);
2. shows the reflection LM those rules, the minibatch's cases (failures first, each with its
   outcome, the SAAG finding, the verdict and the gold-labelled feedback the metric wrote) and the
   edits already refused from this parent (``EditMemory``), and asks for one edit as JSON
   constrained by ``edits.edit_schema`` (a json_schema response_format: OpenAI's structured
   output, a grammar on the embedded server);
3. applies it deterministically (``edits.apply_edit``) and checks the new rule with the rails
   (``rails.check_rule``); an unreadable, inapplicable, repeated or flagged edit is remembered and
   asked for once more, with the refusal in the prompt.

The second attempt's edit is returned even when the rails flag it, so the acceptance criterion
quarantines it where the lineage shows it; with no applicable edit the component is left out and
gepa skips the proposal without spending rollouts on it. ``ReviewerAcceptance`` tells the memory
about every proposal it refuses (rails or minibatch score), so the same edit is not proposed from
the same parent again, after a resume too (``<run>/edit_memory.json``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from saag_opt.agents.report_note import EMPTY_NOTE, is_note, note_of
from saag_opt.atomic import atomic_write_json
from saag_opt.events import EventSink, emit
from saag_opt.lm.client import chat_completion
from saag_opt.optimize import rails
from saag_opt.optimize.candidates import candidate_edit
from saag_opt.optimize.edits import (
    EDIT_REPLY_TOKENS,
    MAX_EDIT_WORDS,
    EditError,
    apply_edit,
    edit_schema,
    numbered,
    parse_edit,
    read_rules,
)
from saag_opt.optimize.feedback import FAILING, GOLD_LABEL, clip_text, outcome_of
from saag_opt.runfiles import read_model

EDIT_MEMORY_FILE = "edit_memory.json"
"""``<run>/edit_memory.json``: the refused edits a resumed run still remembers."""

MAX_CASES = 4
"""Cases shown per reflection: a 1.5B model's attention, not its context, is the limit."""

MAX_FEEDBACK_LINES = 14
"""Feedback lines shown per case, each clipped; line by line, so the gold stays on its own labelled line."""

REMEMBERED_PER_PARENT = 5
"""Refused edits shown per parent (the most recent), as gepa's rejected-proposal memory proposals do."""

REPORT_LABEL = "Automatic check report shown to the reviewer"
"""How a case shows the SAAG report an informed reviewer read."""

SYSTEM_PROMPT = (
    "You maintain the numbered rules of a REVIEWER. The reviewer checks a tool-calling assistant's proposed call "
    "before it runs: it answers error=true with feedback (the assistant then revises) or error=false (the call runs). "
    "Approving a wrong call and rejecting a right one are equally bad. You change the rules with exactly one edit."
)

NOTE_PROMPT = (
    "You maintain the numbered rules of a NOTE shown to a REVIEWER above an automatic check report. The reviewer "
    "checks a tool-calling assistant's proposed call before it runs and answers error=true (reject) or error=false "
    "(approve). The report's findings are heuristics: some are real errors, some are false alarms (a value restated "
    "in other words, a sensible default). The note tells the reviewer how far to trust which kind of finding. "
    "Approving a wrong call and rejecting a right one are equally bad. You change the note with exactly one edit."
)
"""The system prompt for the report note (``agents.report_note``), which frames what the reviewer sees."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class RefusedEdit(BaseModel):
    """One refused proposal from a parent text: its rule-level change and why it was refused."""

    child: str
    """sha256 prefix of the refused text."""
    changes: list[str]
    reason: str


class EditMemoryFile(BaseModel):
    """``<run>/edit_memory.json``: refused edits per component and parent text (sha256 prefix)."""

    refused: dict[str, list[RefusedEdit]] = Field(default_factory=dict)


class EditMemory:
    """Edits refused from each parent text, so a deterministic proposer does not repeat a dead end."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._refused: dict[str, list[RefusedEdit]] = {}
        if path is not None and path.is_file():
            self._refused = dict(read_model(path, EditMemoryFile).refused)

    @staticmethod
    def _key(component: str, parent: str) -> str:
        return f"{component}:{_sha(parent)}"

    def refuse(self, component: str, parent: str, child: str, reason: str) -> None:
        """Remember that ``child`` (proposed from ``parent``) was refused, and why (persisted atomically)."""
        if child == parent:
            return
        changes = candidate_edit({component: parent}, {component: child})[:3] or ["(no rule-level change)"]
        entry = RefusedEdit(child=_sha(child), changes=changes, reason=clip_text(reason, 200))
        with self._lock:
            entries = self._refused.setdefault(self._key(component, parent), [])
            if any(e.child == entry.child for e in entries):
                return
            entries.append(entry)
            if self.path is not None:
                atomic_write_json(self.path, EditMemoryFile(refused=self._refused).model_dump(mode="json"))

    def refused(self, component: str, parent: str) -> list[RefusedEdit]:
        """Every refusal remembered for this parent, oldest first."""
        with self._lock:
            return list(self._refused.get(self._key(component, parent), ()))

    def was_refused(self, component: str, parent: str, child: str) -> str | None:
        """Why ``child`` was refused from ``parent`` before, or None."""
        sha = _sha(child)
        return next((e.reason for e in self.refused(component, parent) if e.child == sha), None)


DIAGNOSES: dict[str, str] = {
    "broken": "the reviewer REJECTED a RIGHT call, and the revision made it wrong",
    "false alarm": "the reviewer REJECTED a RIGHT call (the revision happened to stay right)",
    "missed error": "the reviewer APPROVED a WRONG call",
    "kept wrong after review": "the reviewer rightly rejected a wrong call, but its feedback did not get it fixed",
    "reviewer error": "the reviewer's answer could not be read",
    "fixed": "the reviewer rightly rejected a wrong call and the revision fixed it",
    "kept right": "the reviewer rightly approved a right call",
}
"""One line per outcome class, said first: a small model reads the verdict's direction before the details."""


def _outcome(item: Mapping[str, Any]) -> str:
    return outcome_of(str(item.get("Feedback") or "")) or ""


def render_case(index: int, item: Mapping[str, Any]) -> str:
    """One reflective example: what went wrong first, then the request, the call, the report, the verdict, the feedback.

    The tool documentation is cut to function names and first sentences: the rules must be general,
    and a small model copies what it reads at length.
    """
    inputs = item.get("Inputs") or {}
    outputs = item.get("Generated Outputs") or {}
    diagnosis = DIAGNOSES.get(_outcome(item), "the rollout failed")
    lines = [f"Case {index}: {diagnosis}."]
    if isinstance(inputs, Mapping):
        if inputs.get("conversation"):
            lines.append(f"Request: {clip_text(str(inputs['conversation']), 400)}")
        if inputs.get("tool_docs"):
            lines.append(f"Tools: {_tool_summary(str(inputs['tool_docs']))}")
        if inputs.get("tentative_calls"):
            lines.append(f"Proposed call: {clip_text(str(inputs['tentative_calls']), 300)}")
        report = inputs.get("saag_report") or inputs.get("checks")  # the review's input, or the note's
        if report:
            lines.append(f"{REPORT_LABEL}: {clip_text(str(report), 300)}")
    if isinstance(outputs, Mapping) and set(outputs) != {"shown"}:  # the note's "output" is the report itself
        lines.append("Reviewer answered: " + ", ".join(f"{k}={clip_text(str(v), 200)}" for k, v in outputs.items()))
    elif not isinstance(outputs, Mapping):
        lines.append(f"Reviewer answered: {clip_text(str(outputs), 300)}")
    lines.append("Details:")
    lines += _feedback_lines(str(item.get("Feedback") or ""))
    return "\n".join(lines)


def _feedback_lines(feedback: str) -> list[str]:
    """At most ``MAX_FEEDBACK_LINES``, in order, always with the outcome (first) and the gold-labelled lines."""
    lines = [clip_text(line, 300) for line in feedback.splitlines() if line.strip()]
    keep = {0} | {i for i, line in enumerate(lines) if GOLD_LABEL in line}
    for i in range(len(lines)):
        if len(keep) >= MAX_FEEDBACK_LINES:
            break
        keep.add(i)
    return [lines[i] for i in sorted(keep)]


def _tool_summary(docs: str) -> str:
    try:
        tools = json.loads(docs)
    except json.JSONDecodeError:
        return clip_text(docs, 200)
    if not isinstance(tools, list):
        return clip_text(docs, 200)
    parts = []
    for tool in tools[:6]:
        if isinstance(tool, Mapping):
            about = str(tool.get("description") or "").split(". ")[0]
            parts.append(f"{tool.get('name')} ({clip_text(about, 80)})")
    more = f" and {len(tools) - 6} more" if len(tools) > 6 else ""
    return "; ".join(parts) + more


def _is_failure(item: Mapping[str, Any]) -> bool:
    return _outcome(item) in FAILING


def _gold_lines(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    """The gold-labelled feedback lines of the cases: what the reviewer must never be shown."""
    return [line for c in cases for line in str(c.get("Feedback") or "").splitlines() if GOLD_LABEL in line]


def pick_cases(items: Sequence[Mapping[str, Any]], limit: int = MAX_CASES) -> list[Mapping[str, Any]]:
    """Failures first (in minibatch order), then successes, at most ``limit``: a rule is learned from what went wrong."""
    failures = [i for i in items if _is_failure(i)]
    return (failures + [i for i in items if not _is_failure(i)])[:limit]


def edit_prompt(parent: str, cases: Sequence[Mapping[str, Any]], refused: Sequence[RefusedEdit], *,
                note: bool = False, add_only: bool = False) -> str:
    """The user message of one edit request (``note``: the report note's, whose rules may be none yet).

    Cases come first and the rules last, next to the task, and the task asks for a new rule unless an
    existing one causes the mistakes: a 1.5B model shown the rules first kept "replacing" the rule it
    had just read with the same text.
    """
    whose = "note" if note else "reviewer"
    wrong = [c for c in cases if _is_failure(c)]
    right = [c for c in cases if c not in wrong]
    parts = [f"A reviewer checks a tool-calling assistant's call before it runs. It got {len(wrong)} of these "
             f"{len(cases)} cases wrong (the right answers are for you only; the reviewer never sees them).", ""]
    parts += [render_case(i, c) + "\n" for i, c in enumerate(wrong + right, start=1)]
    parts += [f"The {whose}'s rules now:", numbered(parent) or "(none yet: the report is shown without a note)", ""]
    if refused:
        parts += ["Edits already tried and refused (do not propose them again):"]
        parts += [f"- {'; '.join(r.changes)} (refused: {r.reason})" for r in refused[-REMEMBERED_PER_PARENT:]]
        parts += [""]
    task = ("Write ONE new rule for the note, at most {n} words, that tells the reviewer how far to trust the "
            "report's findings so that it decides the wrong cases correctly and keeps the right ones.") if note else (
            "Write ONE new rule for the reviewer, at most {n} words, that would have made it decide the wrong cases "
            "correctly and keep the right ones.")
    general = " Say it in general terms: no function names, values or names from the cases."
    if add_only or not numbered(parent):
        parts += [task.format(n=MAX_EDIT_WORDS) + general + " The existing rules stay as they are.",
                  'Reply with JSON only: {"op": "add", "rule": 0, "text": "<the new rule>"}.']
    else:
        parts += [task.format(n=MAX_EDIT_WORDS) + general + " Only if an existing rule causes the mistakes, replace or "
                  "delete that rule instead (give its number).",
                  'Reply with JSON only, for example {"op": "add", "rule": 0, "text": "<the new rule>"} '
                  'or {"op": "replace", "rule": <number>, "text": "<the rule rewritten>"} '
                  'or {"op": "delete", "rule": <number>, "text": ""}.']
    return "\n".join(parts)


class EditProposer:
    """dspy.GEPA ``instruction_proposer``: one rule edit per component to update (module docstring)."""

    def __init__(self, lm: Any, memory: EditMemory | None = None, *, attempts: int = 2, add_only: bool = False,
                 sink: EventSink | None = None) -> None:
        self.lm = lm
        self.add_only = add_only
        """Only ``add`` (``--proposer add``): the parent's rules stay as they are, ACE's add-only playbook."""
        self.memory = memory if memory is not None else EditMemory()
        self.attempts = attempts
        self.sink = sink

    def __call__(self, candidate: dict[str, str], reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                 components_to_update: list[str]) -> dict[str, str]:
        """New texts for the components an edit could be applied to (gepa skips an empty dict)."""
        out: dict[str, str] = {}
        for component in components_to_update:
            items = list(reflective_dataset.get(component) or ())
            if not items or component not in candidate:
                continue
            text = self.propose(component, candidate[component], items)
            if text is not None:
                out[component] = text
        return out

    def propose(self, component: str, parent: str, items: Sequence[Mapping[str, Any]]) -> str | None:
        """One edited text of ``parent``, or None when no attempt gave an applicable edit."""
        cases = pick_cases(items)
        note = is_note(component)
        text = note_of(parent) if note else parent
        last: str | None = None
        just_now: list[RefusedEdit] = []
        for attempt in range(self.attempts):
            reply = self._ask(component, text, cases, [*self.memory.refused(component, parent), *just_now], attempt)
            try:
                edit = parse_edit(reply, len(read_rules(text)))
                child = apply_edit(text, edit)
                if note and not child.strip():  # the note's last rule deleted: back to no note
                    child = EMPTY_NOTE
            except EditError as exc:
                self._note(component, f"unusable edit ({exc})")
                just_now.append(RefusedEdit(child="", changes=[clip_text(reply, 160)], reason=str(exc)))
                continue
            earlier = self.memory.was_refused(component, parent, child)
            if earlier is not None:
                self._note(component, f"repeated a refused edit ({edit.describe()})")
                continue
            last = child
            # The rails' copy checks need the minibatch's examples and run at acceptance, after gepa has shown the
            # child to the reviewer on the minibatch: a value only the gold holds is refused here, before that.
            findings = [] if edit.op == "delete" else [
                *rails.check_rule(edit.text), *filter(None, [rails.copies_gold(edit.text, text, _gold_lines(cases))])]
            if not findings:
                emit(self.sink, "proposal", f"{component}: {edit.describe()}", component=component,
                     edit=edit.describe())
                return child
            self.memory.refuse(component, parent, child, "; ".join(map(str, findings)))
        return last

    def _ask(self, component: str, parent: str, cases: Sequence[Mapping[str, Any]], refused: Sequence[RefusedEdit],
             attempt: int) -> str:
        note = is_note(component)
        messages = [{"role": "system", "content": NOTE_PROMPT if note else SYSTEM_PROMPT},
                    {"role": "user", "content": edit_prompt(parent, cases, refused, note=note,
                                                            add_only=self.add_only)}]
        result = chat_completion(self.lm, messages, temperature=0.0 if attempt == 0 else 0.7,
                                 max_tokens=EDIT_REPLY_TOKENS,
                                 response_format={"type": "json_schema",
                                                  "json_schema": {"name": "rule_edit",
                                                                  "schema": edit_schema(len(read_rules(parent)),
                                                                                        self.add_only),
                                                                  "strict": True}},
                                 role="reflection")
        return result.text

    def _note(self, component: str, why: str) -> None:
        emit(self.sink, "proposal", f"{component}: {why}", component=component, reason=why)


__all__ = ["EDIT_MEMORY_FILE", "MAX_CASES", "NOTE_PROMPT", "REPORT_LABEL", "SYSTEM_PROMPT",
           "EditMemory",
           "EditMemoryFile", "EditProposer", "RefusedEdit", "edit_prompt", "pick_cases", "render_case"]
