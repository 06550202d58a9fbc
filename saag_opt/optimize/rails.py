"""GEPA rails for small data and small models: pure checks of a proposed instruction, and the `best` margin.

Why: with a 1.5B reflection LM GEPA proposed texts that ask *for* instructions instead of giving them
(experiment 3: "Please provide a comprehensive and well-structured instruction for the assistant to
consider..."), and one became ``best`` on one val example of twenty. Each check here is a rule with a
name, a threshold and the evidence it found, so a quarantine can be read and argued with; nothing
here calls an LM or does I/O.

* ``quarantine_reason(candidate, parent, examples)``: why a proposal is not a reviewer instruction
  (``None`` = it passes). Rules, each on every predictor text that changed:
  ``not_instructions`` (a request for instructions, a question, no decision language),
  ``truncated`` (empty, or cut off mid-sentence), ``length`` (outside ``LENGTH_RATIO`` of its parent),
  ``copies_values`` (literals of the reflected examples: registry identifiers, gold bindings and
  values, quoted strings, numbers, proper names, absent from the parent) and ``copies_ngrams``
  (``NGRAM_N`` consecutive words of one reflected example's query or tool docs).
* ``minibatch_collapse(before, after)``: on a minibatch tie, a candidate whose verdicts collapsed
  (approves or rejects everything where the parent did not, wrongly) or that broke more right calls.
* ``pick_best(...)``: ``best`` moves off the seed only with ``BEST_MARGIN_EXAMPLES`` more val examples
  right and ``BEST_MARGIN_POINTS`` points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from saag_opt.agents.report_note import COMPONENT_PREFIX, is_note, note_of
from saag_opt.model import Example
from saag_opt.optimize.edits import read_rules

LENGTH_RATIO = (0.25, 5.0)
"""Allowed proposal/parent length (characters). Under a quarter of its parent a rewrite has dropped most
of its rules (experiment 3's proposals were under a fifth of v2; v1 is 0.27 of v2's review prompt and
passes); five times is more than v1 -> v2 (3.7x), the largest hand-written rewrite, and a text that
long from a short parent is pasting, not generalising."""

MIN_WORDS = 8
"""Fewer words than this cannot state a reviewer's decision rule (checked as ``truncated``: empty)."""

NGRAM_N = 8
"""Copied run length, in words. Generic task phrases are shorter ("the documentation of the available
tools" is 6); eight words of one example's query or tool doc is that example, not a rule."""

MAX_NOTE_WORDS = 150
"""Longest report note: a few rules on the report, not a second instruction."""

EDIT_SIZE = 2
"""At most this many rules added or rewritten is an edit, whose new rules are also checked one by one."""

BEST_MARGIN_EXAMPLES = 2
"""``best`` leaves the seed only when a candidate gets at least this many more val examples right ..."""
BEST_MARGIN_POINTS = 5.0
"""... and at least this many points more val accuracy (see ``pick_best`` for why both)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule that fired, with what it saw."""

    rule: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.evidence}"


# -- text helpers ----------------------------------------------------------------------------------

_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(text)]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT_RE.split(text) if s and s.strip(" \t-*•#>")]


def _quote(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


# -- not_instructions ------------------------------------------------------------------------------

_REQUEST_VERBS = ("provide", "write", "give", "create", "generate", "draft", "produce", "compose", "craft",
                  "improve", "rewrite", "revise", "refine", "update", "suggest", "propose", "share", "send")
_INSTRUCTION_NOUNS = r"(?:instructions?|prompts?|guidelines?|system\s+(?:message|prompt))"
_REQUEST_RE = re.compile(rf"\b(?:{'|'.join(_REQUEST_VERBS)})\b((?:\W+[\w'’-]+){{0,5}}?)\W+{_INSTRUCTION_NOUNS}\b",
                         re.I)
_NOT_THE_OBJECT_RE = re.compile(r"\b(?:agent|assistant|model|user)s?\b|\b(?:with|for|to|of|on|in|that|which|who|"
                                r"about|from|as|into|by)\b", re.I)
"""Words between the verb and the noun that make the noun not the verb's object: ``give the agent
instructions`` (the reviewer instructing the agent), ``write feedback with instructions``."""
_ADDRESS_RE = re.compile(r"(?:^|[.!?,;:]\s*|\n\s*)please\b|\b(?:can|could|would|will)\s+you\b|"
                         r"\bI\s+(?:need|want|would\s+like)\b|\blet\s+me\s+know\b", re.I)
_CONTEXT_RE = re.compile(
    r"\b(?:based\s+on|given|using|from)\s+(?:the|these|those)\s+(?:above|provided|given|following|preceding|"
    r"previous|below)\s+(?:information|examples?|feedback|data|details|responses|outputs)\b|"
    r"\bthe\s+(?:information|examples?|feedback|data|details|responses)\s+(?:above|below|shown\s+above)\b",
    re.I)
"""Material only the reflection LM saw (its examples and feedback); a reviewer has none 'above'."""
_DECISION_RE = re.compile(
    r"\b(?:errors?|erroneous|approv\w*|reject\w*|accept\w*|flag\w*|verdicts?|wrong|correct\w*|incorrect|mistakes?|"
    r"problems?|defects?|invalid|true|false|scores?|rate|rating|grades?|index|choose|select|pick|rank\w*|decide|decision)\b",
    re.I)
"""What a reviewer predictor outputs: a verdict (error, approve/reject, correct, a problem), a choice (index) or a grade.

"correct" and "problem" since experiment 5: GEPA's "assess whether the calls fulfill the criteria: ...
tool-call correctness ...; if any criterion is not met, say which call or parameter has a problem" is a
decision rule, and was quarantined for lacking the word "error"."""


def not_instructions(text: str) -> Finding | None:
    """A request for instructions or a question instead of instructions.

    Strong signals (one suffices): a request for an instruction in the first or last sentence
    ("Please provide ... instruction"), only questions, no decision language at all. Moderate signals
    (two needed): such a request in between, a polite address to the reader ("please", "could you"), a
    closing question, a reference to material only the reflection LM saw ("based on the provided
    information"). "You" alone is no signal: the seeds address the reviewer as "you".
    """
    sentences = _sentences(text)
    if not sentences:
        return None
    strong: list[str] = []
    moderate: list[str] = []
    for i, sentence in enumerate(sentences):
        for match in _REQUEST_RE.finditer(sentence):
            if _NOT_THE_OBJECT_RE.search(match.group(1)):
                continue
            (strong if i in (0, len(sentences) - 1) else moderate).append(
                f"asks for instructions ({_quote(match.group(0))})")
            break
    if (address := _ADDRESS_RE.search(text)) is not None:
        moderate.append(f"addresses the reader ({_quote(address.group(0).strip(' .,;:'))})")
    questions = [s for s in sentences if s.rstrip().endswith("?")]
    if len(questions) == len(sentences):
        strong.append(f"only questions ({_quote(questions[0])})")
    elif sentences[-1].rstrip().endswith("?"):
        moderate.append(f"ends with a question ({_quote(sentences[-1])})")
    if (context := _CONTEXT_RE.search(text)) is not None:
        moderate.append(f"refers to the reflection's own material ({_quote(context.group(0))})")
    if _DECISION_RE.search(text) is None:
        strong.append("no decision language (none of error, approve, reject, flag, wrong, score, index, choose...)")
    if strong or len(moderate) >= 2:
        return Finding("not_instructions", "; ".join(strong + moderate))
    return None


# -- one rule (an edit) -----------------------------------------------------------------------------

_FIRST_PERSON_RE = re.compile(r"\b(?:I|I'm|I am|I'll)\b|\b(?i:my|me)\b|(?i:\bas an (?:ai|assistant|language model)\b)")
"""The reflection LM speaking for itself ("I am unable to accurately review ..."): no reviewer rule does."""


def not_a_rule(text: str) -> Finding | None:
    """A rule an edit wrote that is not a rule for the reviewer.

    Stricter than ``not_instructions``, which weighs a sentence by where it sits in a long text: one
    rule has nowhere to hide, so any one signal suffices: a request for instructions, a question, an
    address to the reader, the writer speaking as itself, or material only the reflection LM saw.
    """
    signals = []
    for match in _REQUEST_RE.finditer(text):
        if not _NOT_THE_OBJECT_RE.search(match.group(1)):
            signals.append(f"asks for instructions ({_quote(match.group(0))})")
            break
    if text.rstrip().endswith("?"):
        signals.append(f"is a question ({_quote(text)})")
    if (address := _ADDRESS_RE.search(text)) is not None:
        signals.append(f"addresses the reader ({_quote(address.group(0).strip(' .,;:'))})")
    if (person := _FIRST_PERSON_RE.search(text)) is not None:
        signals.append(f"speaks as the writer ({_quote(person.group(0))})")
    if (context := _CONTEXT_RE.search(text)) is not None:
        signals.append(f"refers to the reflection's own material ({_quote(context.group(0))})")
    return Finding("not_a_rule", "; ".join(signals)) if signals else None


def check_rule(text: str, parent: str = "", examples: Sequence[Example] = ()) -> list[Finding]:
    """Every rule that fires on one rule an edit adds or rewrites (empty list = it passes).

    ``parent``/``examples``: the instruction it joins and the reflected examples, for the copy
    checks (skipped without examples).
    """
    checks = [not_a_rule(text)]
    if len(_WORD_RE.findall(text)) < 3:
        checks.append(Finding("truncated", f"a rule of {len(_WORD_RE.findall(text))} word(s) states no decision"))
    if examples:
        checks += [copies_values(text, parent, examples), copies_ngrams(text, parent, examples)]
    return [f for f in checks if f is not None]


# -- truncated -------------------------------------------------------------------------------------

_DANGLING = frozenset("a an the and or but nor to of in on at by for with from into that which who whose whether "
                      "if when while because than as is are was were be its their your each every any".split())
"""Words a finished sentence does not end on ("... a value is not taken from the")."""
_BRACKETS = (("(", ")"), ("[", "]"), ("{", "}"))


def _empty(text: str) -> Finding | None:
    words = _WORD_RE.findall(text)
    if len(words) < MIN_WORDS:
        return Finding("truncated", f"empty or too short to be an instruction ({len(words)} words, "
                                    f"fewer than {MIN_WORDS})")
    return None


def truncated(text: str) -> Finding | None:
    """Empty, or cut off: a trailing ellipsis, colon or connective, an unclosed bracket or code fence."""
    empty = _empty(text)
    if empty is not None:
        return empty
    words = _WORD_RE.findall(text)
    tail = text.rstrip()
    if tail.endswith(("...", "…")):
        return Finding("truncated", f"ends with an ellipsis ({_quote(tail[-60:])})")
    if tail.endswith((":", ",", ";", "(", "-", "—")) and tail.splitlines()[-1].strip("-— "):  # not a rule line
        return Finding("truncated", f"ends with {tail[-1]!r}: the sentence or list it announces is missing "
                                    f"({_quote(tail[-60:])})")
    last = words[-1].lower()
    if last in _DANGLING and tail[-1].isalnum():
        return Finding("truncated", f"ends mid-sentence on {words[-1]!r} ({_quote(tail[-60:])})")
    if text.count("```") % 2:
        return Finding("truncated", "an unclosed ``` code fence")
    for opening, closing in _BRACKETS:
        if text.count(opening) > text.count(closing):
            return Finding("truncated", f"an unclosed {opening!r} ({text.count(opening)} opened, "
                                        f"{text.count(closing)} closed)")
    return None


# -- length ----------------------------------------------------------------------------------------


def length_ratio(text: str, parent: str) -> Finding | None:
    """Much shorter or much longer than the parent (characters, outer whitespace stripped)."""
    new, old = len(text.strip()), len(parent.strip())
    if not old:
        return None
    ratio = new / old
    low, high = LENGTH_RATIO
    if ratio < low:
        return Finding("length", f"{new} characters against the parent's {old} (ratio {ratio:.2f} < {low:.2f})")
    if ratio > high:
        return Finding("length", f"{new} characters against the parent's {old} (ratio {ratio:.2f} > {high:.2f})")
    return None


# -- copies_values ---------------------------------------------------------------------------------

_IDENTIFIER_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*|[A-Za-z]+\d+[A-Za-z0-9]*")
"""Names no English sentence uses: ``solve_quadratic``, ``number_theory.gcd``, ``getWeather``, ``number1``."""
_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_QUOTED_RE = re.compile(r"'([^'\n]{3,80})'|\"([^\"\n]{3,80})\"|“([^”\n]{3,80})”")
_CAPITAL_RE = re.compile(r"\b[A-Z][A-Za-z]{2,}\b")
_GENERIC_CAPITALS = frozenset({"JSON", "API", "URL", "HTTP", "HTTPS", "SQL", "CSV", "XML", "HTML", "PDF", "LLM",
                               "SAAG", "BFCL", "CRITICAL", "IMPORTANT", "NOTE"})


def _specific_number(token: str) -> bool:
    """At least two significant digits ("15", "3.14", "2023"): single digits and 0.5 are generic."""
    digits = token.replace(",", "").replace(".", "").strip("0")
    return len(digits) >= 2


def _proper_names(text: str) -> set[str]:
    """Capitalised words not at the start of a sentence or line (names, places, titles)."""
    names: set[str] = set()
    for sentence in _sentences(text):
        for match in _CAPITAL_RE.finditer(sentence):
            before = sentence[: match.start()]
            if not _WORD_RE.search(before) or before.rstrip().endswith((":", "(", "[", '"', "'")):
                continue
            if match.group(0) not in _GENERIC_CAPITALS:
                names.add(match.group(0))
    return names


def _string_values(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _string_values(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _string_values(item)


def _specific_string(value: str) -> bool:
    """A gold string worth calling example-specific: several words, a digit, an identifier or a capital."""
    value = value.strip()
    return len(value) >= 3 and (" " in value or any(c.isdigit() for c in value) or bool(_IDENTIFIER_RE.fullmatch(value))
                                or value[:1].isupper())


def _has(text: str, literal: str, *, case: bool = True) -> bool:
    pattern = rf"(?<![\w.]){re.escape(literal)}(?![\w])"
    return re.search(pattern, text, 0 if case else re.I) is not None


@dataclass(frozen=True, slots=True)
class _Literals:
    """What of one example is specific to it, by kind (for the evidence)."""

    identifiers: set[str]
    bindings: set[tuple[str, str]]
    values: set[str]
    quoted: set[str]
    numbers: set[str]
    names: set[str]


def _literals(example: Example) -> _Literals:
    query = example.query
    identifiers: set[str] = set()
    for tool in example.registry:
        identifiers.add(tool.name)
        identifiers.update(p for p in tool.properties if _IDENTIFIER_RE.fullmatch(p))
    bindings: set[tuple[str, str]] = set()
    values: set[str] = set()
    names = _proper_names(query)  # one capitalised word ("Action") is a name: it counts where a name can be
    for gold in example.gold or ():
        for name, params in gold.items():
            identifiers.add(name)
            for param, accepted in params.items():
                for value in accepted or ():
                    if value in ("", None) or isinstance(value, bool):
                        continue
                    if isinstance(value, (str, int, float)):
                        bindings.add((param, str(value)))
                    strings = [v.strip() for v in _string_values(value) if _specific_string(v)]
                    values.update(v for v in strings if not _CAPITAL_RE.fullmatch(v))
                    names.update(v for v in strings if _CAPITAL_RE.fullmatch(v))
                    if isinstance(value, (int, float)) and _specific_number(str(value)):
                        values.add(str(value))
    quoted = [next(g for g in m.groups() if g).strip() for m in _QUOTED_RE.finditer(query)]
    names.update(q for q in quoted if _CAPITAL_RE.fullmatch(q))
    quoted = [q for q in quoted if _specific_string(q) and not _CAPITAL_RE.fullmatch(q)]
    numbers = {n for n in _NUMBER_RE.findall(query) if _specific_number(n)}
    return _Literals({i for i in identifiers if _IDENTIFIER_RE.fullmatch(i)}, bindings, values, set(quoted), numbers,
                     names)


def copies_values(text: str, parent: str, examples: Sequence[Example]) -> Finding | None:
    """Example-specific literals of the reflected examples that the proposal has and its parent has not."""
    names_here = _proper_names(text)
    found: dict[str, list[str]] = {}

    def note(kind: str, literal: str) -> None:
        if literal not in found.setdefault(kind, []):
            found[kind].append(literal)

    for example in examples:
        lit = _literals(example)
        for ident in sorted(lit.identifiers):
            if _has(text, ident) and not _has(parent, ident, case=False):
                note("registry names", ident)
        for param, value in sorted(lit.bindings):
            binding = re.compile(rf"(?<![\w.]){re.escape(param)}\s*[=:]\s*['\"`]?{re.escape(value)}(?![\w])")
            if binding.search(text) and not binding.search(parent):
                note("gold arguments", f"{param}={value}")
        for value in sorted(lit.values | lit.quoted):
            if _has(text, value) and not _has(parent, value, case=False):
                note("gold values and quoted strings", value)
        for number in sorted(lit.numbers):
            if _has(text, number) and not _has(parent, number):
                note("numbers from the query", number)
        for name in sorted(lit.names & names_here):
            if not _has(parent, name):
                note("proper names from the query or gold", name)
    if not found:
        return None
    return Finding("copies_values", "; ".join(f"{kind}: {', '.join(repr(v) for v in items[:5])}"
                                              for kind, items in found.items()))


_GOLD_VALUE_RE = re.compile(r'"((?:[^"\\]|\\.){2,80})"|(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w])')
"""A quoted string or a number in a gold line (``feedback.render_gold`` writes values as canonical JSON)."""


def copies_gold(text: str, parent: str, gold_lines: Sequence[str]) -> Finding | None:
    """Values of the reflected gold (strings, numbers of two or more digits) that ``text`` has and its parent lacks.

    Why before the reviewer sees it: gepa scores a proposal on its minibatch before the acceptance
    criterion runs the full copy checks, so a rule quoting a gold value would reach the reviewer.
    """
    values = set()
    for line in gold_lines:
        after = line.split("):", 1)[-1]
        for match in _GOLD_VALUE_RE.finditer(after):
            value = (match.group(1) or match.group(2) or "").strip()
            if match.group(2) is not None and not _specific_number(value):
                continue
            if len(value) >= 2 and not value.isspace():
                values.add(value)
    copied = sorted(v for v in values if _has(text, v, case=False) and not _has(parent, v, case=False))
    return Finding("copies_gold", f"gold values: {', '.join(map(repr, copied[:5]))}") if copied else None


# -- copies_ngrams ---------------------------------------------------------------------------------


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _example_text(example: Example) -> str:
    parts = [example.query]
    for tool in example.registry:
        parts.append(tool.description)
        parts.extend(str(schema.get("description") or "") for schema in tool.properties.values()
                     if isinstance(schema, Mapping))
    return "\n".join(parts)


def copies_ngrams(text: str, parent: str, examples: Sequence[Example], n: int = NGRAM_N) -> Finding | None:
    """A run of ``n`` words from one reflected example's query or tool docs, absent from the parent.

    A run found in two or more of the reflected examples is boilerplate of the dataset (a note every
    tool doc carries), not one example's content, and does not count.
    """
    mine = _ngrams(_words(text), n) - _ngrams(_words(parent), n)
    if not mine:
        return None
    per_example = [_ngrams(_words(_example_text(ex)), n) for ex in examples]
    shared = {g for i, grams in enumerate(per_example) for g in grams
              if any(g in other for j, other in enumerate(per_example) if j != i)}
    copied = [(ex.id, g) for ex, grams in zip(examples, per_example, strict=True) for g in sorted(mine & grams)
              if g not in shared]
    if not copied:
        return None
    example_id, first = copied[0]
    ids = sorted({i for i, _ in copied})
    return Finding("copies_ngrams", f"{len(copied)} run(s) of {n} words copied from example(s) {', '.join(ids)}, "
                                    f"e.g. {' '.join(first)!r} (from {example_id})")


# -- the proposal ----------------------------------------------------------------------------------


def check_instruction(text: str, parent: str, examples: Sequence[Example] = ()) -> list[Finding]:
    """Every rule that fires on one predictor's proposed ``text`` (empty list = it passes)."""
    empty = _empty(text)
    if empty is not None:
        return [empty]  # nothing else is worth saying about an empty text
    checks = (not_instructions(text), truncated(text), length_ratio(text, parent), copies_values(text, parent, examples),
              copies_ngrams(text, parent, examples))
    return [f for f in checks if f is not None]


def quarantine_reason(candidate: Mapping[str, str], parent: Mapping[str, str],
                      examples: Sequence[Example] = ()) -> str | None:
    """Why a proposed candidate must not enter GEPA's pool, or None.

    ``candidate`` and ``parent`` map a component (``reviewer.review``) to its text; only texts that
    changed are checked, each against the parent's text of the same component and the training
    examples the reflection read.
    """
    reasons = []
    for name, text in candidate.items():
        before = parent.get(name, "")
        if text == before:
            continue
        if is_note(name):
            findings = check_note(text, before, examples)
        else:
            findings = check_instruction(text, before, examples) + _edited_rules(text, before)
        if findings:
            reasons.append(f"{name.removeprefix(COMPONENT_PREFIX)}: " + "; ".join(map(str, findings)))
    return " | ".join(reasons) or None


def check_note(text: str, parent: str, examples: Sequence[Example] = ()) -> list[Finding]:
    """The report note's rails: each new rule is a rule (``check_rule``), and the note stays short.

    The whole-text rules of an instruction do not apply: the note starts empty and holds a few
    sentences on how far to trust the report, with no decision of its own to state.
    """
    found = [f for rule in _new_rules(note_of(text), note_of(parent)) for f in check_rule(rule, parent, examples)]
    words = len(_WORD_RE.findall(text))
    if words > MAX_NOTE_WORDS:
        found.append(Finding("length", f"the note has {words} words; a note on the report keeps to {MAX_NOTE_WORDS}"))
    return found


def _new_rules(text: str, parent: str) -> list[str]:
    """The rules of ``text`` that ``parent`` does not have, in order."""
    old = {r.text for r in read_rules(parent)}
    return [r.text for r in read_rules(text) if r.text not in old]


def _edited_rules(text: str, parent: str) -> list[Finding]:
    """``not_a_rule`` on each new rule of an edit-sized change (a rewrite is judged as a whole text)."""
    new = _new_rules(text, parent)
    if len(new) > EDIT_SIZE:
        return []
    return [f for f in map(not_a_rule, new) if f is not None]


# -- minibatch collapse ----------------------------------------------------------------------------

_OBJECTED = frozenset({"fixed", "broken", "false alarm", "kept wrong after review"})
_APPROVED = frozenset({"kept right", "missed error"})
_BASE_RIGHT = frozenset({"broken", "false alarm", "kept right"})


def minibatch_collapse(before: Sequence[str | None], after: Sequence[str | None]) -> str | None:
    """Why a candidate that tied its parent on a minibatch still must not be accepted, or None.

    ``before``/``after``: the parent's and the candidate's outcome class per example
    (``feedback.classify_outcome``; None = unknown). Refused: more broken calls (harm) than the
    parent; approving every call where the parent objected to one and some approved call was wrong;
    rejecting every call where the parent approved one and some rejected call was right. A uniform
    verdict that is right on every example (approving a batch of right calls) is no collapse.
    """
    broken_before, broken_after = list(before).count("broken"), list(after).count("broken")
    if broken_after > broken_before:
        return f"raises harm: breaks {broken_after} right call(s) on the minibatch, the parent {broken_before}"
    if len(after) < 2 or any(c is None for c in after) or len(before) != len(after):
        return None
    if all(c in _APPROVED for c in after) and any(c in _OBJECTED for c in before) and "missed error" in after:
        return (f"approves all {len(after)} minibatch calls, {list(after).count('missed error')} of them wrong, "
                "where the parent objected")
    if all(c in _OBJECTED for c in after) and any(c in _APPROVED for c in before) and any(c in _BASE_RIGHT for c in after):
        return (f"rejects all {len(after)} minibatch calls, {sum(c in _BASE_RIGHT for c in after)} of them right, "
                "where the parent approved")
    return None


# -- best ------------------------------------------------------------------------------------------


def pick_best(seed: str, seed_score: float | None, scores: Mapping[str, float], n_val: int) -> tuple[str, str]:
    """The version to alias ``best`` and why: the seed unless a candidate clears the margin over it.

    A candidate displaces the seed only with at least ``BEST_MARGIN_EXAMPLES`` more val examples right
    AND ``BEST_MARGIN_POINTS`` more points of val accuracy; the highest such score wins (the first
    found on a tie) and a tie with the seed never displaces it. Why two examples: one flipped verdict
    is what a paraphrase does on a small val set (experiment 3's best was one example of twenty).
    Why the points too: on a large val set two examples are under a point. Not a significance test:
    at n = 20 a paired exact test needs six discordant examples all one way (30 points), which GEPA
    could never show on val; the held-out TEST comparison carries the significance.

    ``scores``: candidate version -> mean val score (1.0 = right), in discovery order.
    """
    if seed_score is None or n_val <= 0 or not scores:
        return seed, "no val score to compare" if seed_score is None else "no candidate"
    need = max(BEST_MARGIN_EXAMPLES, math.ceil(BEST_MARGIN_POINTS / 100 * n_val - 1e-9))
    clearing = {v: s for v, s in scores.items() if round((s - seed_score) * n_val) >= need}
    margin = (f"the margin is {need} more of {n_val} val examples right (at least {BEST_MARGIN_EXAMPLES} examples "
              f"and {BEST_MARGIN_POINTS:g} points)")
    if not clearing:
        top_version, top = max(scores.items(), key=lambda kv: kv[1])
        gained = round((top - seed_score) * n_val)
        return seed, (f"best stays the seed {seed}: the top candidate {top_version} has {gained:+d} val examples "
                      f"({(top - seed_score) * 100:+.1f} points); {margin}")
    version = max(clearing, key=lambda v: clearing[v])  # max keeps the first of equal scores
    gained = round((clearing[version] - seed_score) * n_val)
    return version, (f"best is {version}: {gained:+d} of {n_val} val examples "
                     f"({(clearing[version] - seed_score) * 100:+.1f} points) over the seed {seed}; {margin}")


__all__ = ["BEST_MARGIN_EXAMPLES", "BEST_MARGIN_POINTS", "EDIT_SIZE", "LENGTH_RATIO", "MAX_NOTE_WORDS", "MIN_WORDS",
           "NGRAM_N", "Finding", "check_instruction", "check_note", "check_rule", "copies_gold", "copies_ngrams", "copies_values",
           "length_ratio", "minibatch_collapse", "not_a_rule", "not_instructions", "pick_best", "quarantine_reason",
           "truncated"]
