"""One-rule edits of a reviewer instruction: read the text as numbered rules, parse an edit, apply it.

Why edits: a small reflection model cannot rewrite a 1,661-character instruction (it shortens,
asks for instructions, or refuses), but it can write one rule. An edit is ``add`` a rule,
``replace`` rule N or ``delete`` rule N; this module reads the instruction as rules, parses the
reflection LM's JSON edit and applies it deterministically, so the rest of the text stays byte for
byte what it was. Pure: no LM, no I/O.

How a text is read as rules: blank lines split it into paragraphs; inside a paragraph a line that
starts a list item (``1.``, ``-``, ``*``) starts a new rule and other lines continue the one
before, and so does a list item indented under it (a sub-item is part of its rule); a line of its
own ending with ``:`` ("Criteria:") is a heading, not a rule. Every other
paragraph or list item is a rule, numbered from 1 in reading order. ``add`` appends to an
``Additional rules:`` list at the end (made the first time), or to a text that is one tight list.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz import fuzz

EditOp = Literal["add", "replace", "delete"]

NEAR_COPY = 95.0
"""rapidfuzz ratio at or above which a replacement is the old rule again (a tag or a comma dropped): measured
on a 1.5B model that answered "replace rule 9" with rule 9 minus its "[CRITICAL]" tag."""

MAX_EDIT_WORDS = 40
"""The length of rule the reflection LM is asked for: one rule a reviewer can apply."""

EDIT_REPLY_TOKENS = 200
"""The reply budget of one edit request: the JSON of one rule of at most ``HARD_EDIT_WORDS`` words fits."""

HARD_EDIT_WORDS = 60
"""The longest rule an edit may write: past it, a rewrite in disguise. Above ``MAX_EDIT_WORDS`` on purpose:
the 1.5B overshot the 40 it was asked for by 1 to 18 words in half its answers, and a cut rule reads worse."""

EDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": ["add", "replace", "delete"]},
        "rule": {"type": "integer"},
        "text": {"type": "string"},
    },
    "required": ["op", "rule", "text"],
    "additionalProperties": False,
}
"""The JSON the reflection LM must return (sent as a json_schema response_format; a grammar on the
embedded server). ``rule`` is 0 for ``add``; ``text`` is empty for ``delete``."""

def edit_schema(n_rules: int, add_only: bool = False) -> dict[str, Any]:
    """``EDIT_SCHEMA`` for a text of ``n_rules`` rules; ``add`` alone with none (an empty report note) or ``add_only``.

    Why in the schema: a small model asked to edit an empty note answered "replace rule 0"; the grammar
    makes the only applicable edit the only one it can write.
    """
    if n_rules and not add_only:
        return EDIT_SCHEMA
    properties = {**EDIT_SCHEMA["properties"], "op": {"type": "string", "enum": ["add"]}}
    return {**EDIT_SCHEMA, "properties": properties}


_ITEM_RE = re.compile(r"^(\s*)(\d+[.)]|[-*•])\s+")
_HEADING_RE = re.compile(r"^[^\n]{1,60}:$")


class EditError(ValueError):
    """An edit that cannot be parsed or applied (a bad op, a rule number out of range, no text)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of an instruction: its 1-based number, its text (marker removed) and where it sits."""

    number: int
    text: str
    start: int
    """Index of its first line in the instruction's lines."""
    end: int
    """Index after its last line."""
    marker: str | None
    """``1.``/``-``/``*`` for a list item, None for a paragraph."""
    indent: str = ""


@dataclass(frozen=True, slots=True)
class Edit:
    """One edit: ``add`` (``rule`` 0), ``replace`` or ``delete`` rule ``rule``; ``text`` the new rule."""

    op: EditOp
    rule: int = 0
    text: str = ""

    def describe(self) -> str:
        """One line for a log, a diff header or a reflection prompt."""
        if self.op == "add":
            return f"add a rule: {self.text}"
        if self.op == "delete":
            return f"delete rule {self.rule}"
        return f"replace rule {self.rule} with: {self.text}"


def read_rules(text: str) -> list[Rule]:
    """The instruction's rules in reading order (see the module docstring)."""
    lines = text.split("\n")
    rules: list[Rule] = []
    current: dict[str, Any] | None = None

    def close(end: int) -> None:
        nonlocal current
        if current is not None:
            body = " ".join(" ".join(lines[i].split()) for i in range(current["start"], end))
            if current["marker"] is not None:
                body = _ITEM_RE.sub("", body, count=1)
            rules.append(Rule(len(rules) + 1, body.strip(), current["start"], end, current["marker"], current["indent"]))
        current = None

    for i, line in enumerate(lines):
        stripped = line.strip()
        item = _ITEM_RE.match(line)
        if not stripped:
            close(i)
        elif item is not None and _nested(current, item.group(1)):
            continue  # a sub-item belongs to its parent rule: deleting or replacing the parent takes it along
        elif item is not None:
            close(i)
            current = {"start": i, "marker": item.group(2), "indent": item.group(1)}
        elif current is None and _is_heading(lines, i):
            continue
        elif current is None:
            current = {"start": i, "marker": None, "indent": ""}
    close(len(lines))
    return rules


def _nested(current: dict[str, Any] | None, indent: str) -> bool:
    """A list item indented deeper than the list item it follows is part of that item."""
    return current is not None and current["marker"] is not None and len(indent) > len(current["indent"])


def _is_heading(lines: list[str], i: int) -> bool:
    """Line ``i`` is a short line ending in ``:`` whose next non-blank line starts a list item."""
    if not _HEADING_RE.match(lines[i].strip()):
        return False
    following = next((line for line in lines[i + 1:] if line.strip()), "")
    return _ITEM_RE.match(following) is not None


def numbered(text: str) -> str:
    """The rules as ``[N] text`` lines: what the reflection LM edits."""
    return "\n".join(f"[{r.number}] {r.text}" for r in read_rules(text))


def parse_edit(reply: str | dict[str, Any], n_rules: int) -> Edit:
    """The edit in a reflection reply (a JSON object, possibly inside prose or a code fence).

    Raises:
        EditError: no JSON object, an unknown op, a rule number out of ``1..n_rules``, or a missing,
            multi-rule or overlong text.
    """
    data = reply if isinstance(reply, dict) else _json_object(reply)
    op = str(data.get("op", "")).strip().lower()
    if op not in ("add", "replace", "delete"):
        raise EditError(f"op must be add, replace or delete, got {data.get('op')!r}")
    raw = [line for line in str(data.get("text") or "").splitlines() if line.strip()]
    if sum(_ITEM_RE.match(line) is not None for line in raw) > 1:
        raise EditError(f"the text is a list of {len(raw)} lines; an edit writes one rule")
    text = _ITEM_RE.sub("", " ".join(" ".join(raw).split()), count=1).strip()
    if op == "add":
        rule = 0
    else:
        try:
            rule = int(data.get("rule"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise EditError(f"{op} needs a rule number, got {data.get('rule')!r}") from None
        if not 1 <= rule <= n_rules:
            raise EditError(f"rule {rule} does not exist (the instruction has rules 1-{n_rules})")
    if op == "delete":
        return Edit("delete", rule)
    if not text:
        raise EditError(f"{op} needs the new rule's text")
    words = len(text.split())
    if words > HARD_EDIT_WORDS:
        raise EditError(f"the new rule has {words} words; an edit writes one rule of at most {MAX_EDIT_WORDS} "
                        f"(refused past {HARD_EDIT_WORDS})")
    return Edit(op, rule, text)  # type: ignore[arg-type]


def _json_object(reply: str) -> dict[str, Any]:
    start = reply.find("{")
    while start != -1:
        try:
            value, _ = json.JSONDecoder().raw_decode(reply[start:])
        except json.JSONDecodeError:
            start = reply.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = reply.find("{", start + 1)
    raise EditError(f"no JSON object in the reply ({' '.join(reply.split())[:120]!r})")


def apply_edit(text: str, edit: Edit) -> str:
    """``text`` with ``edit`` applied; every line the edit does not touch is kept as it was.

    Raises:
        EditError: the rule does not exist, or the edit changes nothing (the same text again).
    """
    lines = text.split("\n")
    rules = read_rules(text)
    if edit.op == "add":
        new = _add(lines, rules, edit.text)
    else:
        if not 1 <= edit.rule <= len(rules):
            raise EditError(f"rule {edit.rule} does not exist (the instruction has rules 1-{len(rules)})")
        target = rules[edit.rule - 1]
        if edit.op == "delete":
            new = _delete(lines, rules, target)
        else:
            if " ".join(edit.text.split()) == target.text:
                raise EditError(f"replace rule {edit.rule} with the same text changes nothing")
            if fuzz.ratio(_plain(edit.text), _plain(target.text)) >= NEAR_COPY:
                raise EditError(f"replace rule {edit.rule} with nearly the same text (a tag, a word or punctuation) "
                                "changes nothing a reviewer would act on")
            new = lines[:target.start] + [_render(target.marker, target.indent, edit.text)] + lines[target.end:]
    result = "\n".join(new)
    if result == text:
        raise EditError("the edit changes nothing")
    return result


def _plain(text: str) -> str:
    """A rule without tags (``[CRITICAL]``), case and punctuation: what a near copy keeps."""
    return " ".join(re.sub(r"\[[A-Z ]+\]|[^\w\s]", " ", text).lower().split())


def _render(marker: str | None, indent: str, text: str) -> str:
    return f"{indent}{marker} {text}" if marker else text


ADDED_HEADING = "Additional rules:"
"""The list ``add`` writes to. Why its own: the last list of a text may be a scale ("1.0: ...") or an order
of preference, where a new rule would read as one more grade or preference."""


def _add(lines: list[str], rules: list[Rule], text: str) -> list[str]:
    """``text`` as the last item of the added-rules list (made at the end the first time), or of a text that is one list."""
    if any(fuzz.ratio(_plain(text), _plain(r.text)) >= NEAR_COPY for r in rules):
        raise EditError("add a rule the instruction already has (or nearly) changes nothing")
    if not rules:  # an empty text (the report note's default) gets its first rule
        return [f"- {text}"]
    heading = next((i for i, line in enumerate(lines) if line.strip() == ADDED_HEADING), None)
    if heading is None and (any(r.marker is None for r in rules)
                            or any(_is_heading(lines, i) for i in range(len(lines)))
                            or any(_gap(lines, a.end, b.start) for a, b in zip(rules, rules[1:]))):
        body = list(lines)
        while body and not body[-1].strip():
            body.pop()
        return [*body, "", ADDED_HEADING, f"- {text}"]
    start = 0 if heading is None else heading + 1
    last = [r for r in rules if r.start >= start and r.marker is not None and not _gap(lines, start, r.start)][-1]
    return lines[:last.end] + [_render("-", last.indent, text)] + lines[last.end:]



def _delete(lines: list[str], rules: list[Rule], target: Rule) -> list[str]:
    kept = lines[:target.start] + lines[target.end:]
    if target.marker is None:  # a paragraph: drop one of the blank lines around it
        at = target.start
        if at < len(kept) and not kept[at].strip() and (at == 0 or not kept[at - 1].strip()):
            del kept[at]
        elif at == len(kept) and at > 0 and not kept[at - 1].strip():
            del kept[at - 1]
        return kept
    if re.match(r"\d+[.)]", target.marker):  # renumber the rest of its list
        shift, previous_end = target.end - target.start, target.end
        for rule in rules[target.number:]:
            if rule.marker is None or not re.match(r"\d+[.)]", rule.marker) or rule.indent != target.indent \
                    or _gap(lines, previous_end, rule.start):
                break
            at = rule.start - shift
            old = re.match(r"(\s*)(\d+)([.)])", kept[at])
            if old is not None:
                kept[at] = f"{old.group(1)}{int(old.group(2)) - 1}{old.group(3)}{kept[at][old.end():]}"
            previous_end = rule.end
    return kept


def rule_changes(parent: str, child: str) -> list[str]:
    """The rule-level difference between two instructions, one line per change (``[]`` = same rules).

    Why: a candidate made by one edit reads best as that edit ("added: ...", "rule 4 replaced: ...");
    the report and the terminal show it without keeping a log of what the proposer did. A rewrite
    shows up as many changes.
    """
    before = [r.text for r in read_rules(parent)]
    after = [r.text for r in read_rules(child)]
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            out += [f"rule {i + 1} replaced: {after[j]}" for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
            continue
        out += [f"rule {i + 1} deleted: {before[i]}" for i in range(i1, i2)]
        out += [f"added as rule {j + 1}: {after[j]}" for j in range(j1, j2)]
    return out


def _gap(lines: list[str], start: int, end: int) -> bool:
    """A blank line between two list items ends the list."""
    return any(not lines[i].strip() for i in range(start, end))


__all__ = ["EDIT_REPLY_TOKENS", "EDIT_SCHEMA", "HARD_EDIT_WORDS", "MAX_EDIT_WORDS", "Edit", "EditError", "EditOp",
           "Rule", "apply_edit", "edit_schema", "numbered", "parse_edit", "read_rules", "rule_changes"]
