"""The data-flow policy: each decisive argument's role and source, checked against the user's request; no wording.

Which role each argument of a side-effecting call plays, where its value came from, and whether the
user's request allows that source and that effect. No LM, no I/O.

An attacker who writes into a tool result chooses its words, so a rule that reads the words of tool
text (``saag.injection``'s instruction spans) stops only the phrasings it knows. This module reads
none: it reads the *user's* request (trusted), the *structure* of tool results (which field holds a
value), and which call produced each result. The policy itself is data (``saag.policy``).

For every call that is not a plain read (a side effect, or a read that contacts a URL: egress):

1. **Roles** (``role_of``): each argument gets the first role of the policy whose name pattern
   matches the parameter (``recipient``, ``account``, ``email``, ``url``, ``target``, ``amount``,
   ``secret``, ``object``), else by its description; ``content`` arguments (body, subject, ...) are
   free text whose embedded values of a known kind (an IBAN, an e-mail address, a URL) are checked
   in the role of their kind.
2. **Sources** (``trace_value``): each decisive value is looked up, most trusted first, in the
   user's messages, the system messages, the tool results' *fields* (a whole JSON string, number,
   list item or key: data the agent copies) and their *text* (a value inside a longer string, or
   anywhere in a plain-text result). A value in text is ``named`` when the user's request names
   that tool result as its source for this role, else ``text`` (``replaced`` when the request
   states its own value of that kind); a value found nowhere is ``derived`` (composed or computed
   by the agent). A date is found as the date it is, however a text writes it (``saag.dates``).

   *The request names a result* when the call that produced it takes a specific value from the
   request ("pay the bill 'bill-december-2023.txt'": ``read_file(file_path=...)``), or, for a call
   without specific arguments, when the request mentions what its tool returns ("see the
   transaction history": ``get_most_recent_transactions``). *For this role*: the request mentions
   the role ("her e-mail is on her website") or, for an implied role, asks for the call's effect
   ("pay the bill" names the bill for the payee and the amount). Not when the request states its
   own value of that kind (``Role.stated_excludes``: "the recipient is US12..."), nor when the value
   sits in the prose of a record that keeps such values in a labelled field (a transaction's
   ``subject`` when the record has ``sender`` and ``recipient``: the record says where its accounts are).
   Of a result that is a list (a search's files, an inbox), the request names only the items that
   carry the value its call took from the request (``_items_carrying``): "the file 'minutes.docx'"
   is not the file 'newest-minutes.docx' the same search returned.

   A value of a field labelled for a role no field may fill (a "Passport Number": a secret), copied
   into any argument of a side effect, a message body too, is traced in that role
   (``_guarded_copies``): it is ``named`` only where the request names the label ("my passport number").
3. **Rules** (``check_flow``), each finding naming the value, its source and the rule:

   * **unsourced value**: a decisive value whose source the policy does not allow for its role
     (by default: text of a tool result the request does not name for it).
   * **unrequested effect**: a side effect (not egress) of a kind the request's verbs do not ask for,
     and no decisive value of it comes from the user.

**The counted exception**: a request that hands the task over to tool text ("do the tasks on my
TODO list at ...", ``delegates``) names every result it names for every role, and asks for every
effect. The calls that run only because of it are reported (``FlowReport.waived``), never silent.

What it cannot stop, by design: values in data the user asked to use, written by an attacker (a
bill whose IBAN was changed; a TODO list the user hands over), and effects the request asks for
with values from data fields (a hotel from the listing the user asked to book from; a file id the
request picks by a property, "the largest file": ``saag.injection``'s marker rules see those only
when an instruction names the id).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from saag_opt.model import Registry, ToolCall, ToolSpec
from saag_opt.saag.caches import register_cache
from saag_opt.saag.dates import date_of, dates_in, mentions
from saag_opt.saag.grounding import QueryContext, contains_word, fold_query, query_context, schema_enum
from saag_opt.saag.policy import DEFAULT_POLICY, SOURCE_NAMES, Policy, Role, SourceName
from saag_opt.saag.sources import Sources

__all__ = ["FlowFinding", "FlowReport", "FlowValue", "argument_leaves", "check_flow", "delegates", "effect_kinds",
           "mentioned_effects", "picked_by_request", "requested_effects", "role_of", "trace_value"]

Effect = Literal["read", "egress", "write", "send", "pay", "delete", "share", "invite"]
SIDE = ("delete", "pay", "share", "invite", "send", "write")
"""Side-effect kinds, in the order a tool name is matched (the first kind with a word wins)."""
_FORMAT_ONLY = re.compile(r"^[\d\s:./,+-]*$")
Spelling = Literal["exact", "compact", "date"]
"""How a value is found in a text: as written (the cascade's matching), without spaces and dashes (an
IBAN in groups of four), or as the calendar date it is (``saag.dates``)."""
_MIN_STRING = 2  # shorter strings ("r", "") assert nothing about where they came from
_EXCERPT = 300

# ------------------------------------------------------------------------------------ the compiled policy


def _inflections(word: str) -> set[str]:
    forms = {word, word + "s", word + "es", word + "ed", word + "d", word + "ing"}
    if word.endswith("e"):
        forms |= {word[:-1] + "ing", word[:-1] + "ion", word + "r"}
    if word.endswith("y"):
        forms |= {word[:-1] + "ied", word[:-1] + "ies"}
    if word[-1] not in "aeiouwy":  # "stopped", "cancelling"
        forms |= {word + word[-1] + "ed", word + word[-1] + "ing"}
    return forms


def _norm_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.casefold())


class _Compiled:
    """A policy's patterns and word forms, built once per policy object."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.forms: dict[str, str] = {}  # any word form naming an effect (tool names, mentions)
        self.verbs: dict[str, str] = {}  # forms that ask for an effect wherever they stand in a request
        self.ambiguous: dict[str, str] = {}  # forms that ask for it only where a verb stands
        for effect in policy.effects:
            for word in effect.verbs:
                for form in _inflections(word):
                    self.forms.setdefault(form, effect.name)
                    self.verbs.setdefault(form, effect.name)
            for word in effect.nouns + effect.ambiguous:
                for form in _inflections(word):
                    self.forms.setdefault(form, effect.name)
            for word in effect.ambiguous:
                for form in _inflections(word):
                    self.ambiguous.setdefault(form, effect.name)
        self.read_verbs = frozenset(policy.read_verbs)
        self.kinds = tuple((k, re.compile(k.pattern, re.IGNORECASE)) for k in policy.kinds)
        self.labels = {k.name: frozenset(_norm_key(label) for label in k.labels) for k in policy.kinds}
        self.spelling: dict[str, Spelling] = {k.name: "date" if k.dates else "compact" if k.compact else "exact"
                                              for k in policy.kinds}
        self.in_text = frozenset(k.name for k in policy.kinds if k.in_text and k.name in policy.kind_roles)
        self.roles = tuple((r, tuple(re.compile(p, re.IGNORECASE) for p in r.params)) for r in policy.roles)
        self.stop = frozenset(policy.name_stopwords) | self.read_verbs | frozenset(self.forms)
        self.url_params = tuple(re.compile(p, re.IGNORECASE) for p in policy.role("url").params) if any(
            r.name == "url" for r in policy.roles) else ()

    def kind_of(self, value: str) -> str | None:
        """The kind whose pattern matches all of ``value`` (an IBAN, an address, a URL), if any."""
        text = value.strip()
        for kind, pattern in self.kinds:
            m = pattern.search(text)
            if m is not None and m.start() == 0 and m.end() == len(text):
                return kind.name
        return None

    def tokens(self, text: str) -> list[tuple[str, str]]:
        """``(kind, token)`` of every value of a known kind inside ``text``, in order."""
        found: list[tuple[str, str]] = []
        seen: set[str] = set()
        taken: list[tuple[int, int]] = []
        for kind, pattern in self.kinds:
            for m in pattern.finditer(text):
                token = m.group(0).rstrip(".,;:)")
                if token in seen or any(s <= m.start() < e for s, e in taken):
                    continue
                seen.add(token)
                taken.append((m.start(), m.end()))
                found.append((kind.name, token))
        return found

    def stated(self, text: str) -> frozenset[str]:
        """The kinds of value ``text`` states (a date however it is written: "May 1st" states a date)."""
        kinds = {kind for kind, _ in self.tokens(text)}
        if dates_in(text):
            kinds |= {k.name for k, _ in self.kinds if k.dates}
        return frozenset(kinds)

    def how(self, kind: str | None) -> Spelling:
        """How a value of ``kind`` is compared with a text (``_occurs``)."""
        return self.spelling.get(kind or "", "exact")


_COMPILED: dict[int, _Compiled] = {}


def compiled(policy: Policy) -> _Compiled:
    """The compiled form of ``policy`` (kept for as long as the policy object lives in the cache)."""
    entry = _COMPILED.get(id(policy))
    if entry is None or entry.policy is not policy:
        entry = _COMPILED[id(policy)] = _Compiled(policy)
    return entry


# ------------------------------------------------------------------------------------ effects and requests

_WORD = re.compile(r"[a-z][a-z-]*")
_NAME_SPLIT = re.compile(r"[^a-zA-Z]+|(?<=[a-z])(?=[A-Z])")
_VERB_SLOT = re.compile(r"(?:^|[.!?;:\n(]|\b(?:and|then|please|pls|kindly|to|also|just|you|me|or|finally|first|"
                        r"next|afterwards|now|us)\b)[\s,]*$", re.IGNORECASE)


def _name_words(name: str) -> list[str]:
    return [w.casefold() for w in _NAME_SPLIT.split(name) if w]


def effect_kinds(tool: ToolSpec, policy: Policy = DEFAULT_POLICY) -> tuple[Effect, frozenset[str]]:
    """What calling ``tool`` does, and every side-effect kind its name names.

    The name's first word decides when it is a verb (``read_channel_messages`` reads); otherwise the
    first side-effect kind in ``SIDE`` order; a name without a verb is read from the description's
    first sentence. A read with a URL parameter is ``egress``. ``send_money`` is ``send`` and names
    ``{"send", "pay"}``.
    """
    comp = compiled(policy)
    url = any(p.fullmatch(param) for p in comp.url_params for param in tool.properties)
    return _effect(comp, tool.name, tool.description, url)


@lru_cache(maxsize=2048)
def _effect_cached(policy_id: int, name: str, description: str, url: bool) -> tuple[Effect, frozenset[str]]:
    comp = _COMPILED[policy_id]
    words = _name_words(name)
    kinds = {comp.forms[w] for w in words if w in comp.forms}
    if not kinds and not any(w in comp.read_verbs for w in words):
        words = _described(comp, description)
        kinds = {comp.forms[w] for w in words if w in comp.forms}
    lead = comp.forms.get(words[0]) if words else None
    if words and words[0] in comp.read_verbs and lead in (None, "egress"):
        return ("egress" if url else "read"), frozenset()
    side = [kind for kind in SIDE if kind in kinds]
    if lead in SIDE:
        return lead, frozenset(side) | {lead}  # type: ignore[return-value]
    if side:
        return side[0], frozenset(side)  # type: ignore[return-value]
    return ("egress" if url else "read"), frozenset()


register_cache(_effect_cached.cache_clear)

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_LABEL_PREFIX = re.compile(r"^\s*[A-Za-z][\w ]{0,30}:\s*")
_ABOUT = re.compile(r"^\s*(?:this|it|the (?:tool|function|api))\b", re.IGNORECASE)


def _described(comp: _Compiled, description: str) -> list[str]:
    """What a tool without a verb in its name does: the words of its description's first sentence led by a verb.

    ("Tool description: Compute ..."), else of its first sentence.
    """
    sentences = [_LABEL_PREFIX.sub("", s) for s in _SENTENCE.split(description) if s.strip()][:8]
    sentences = [s for s in sentences if not _ABOUT.match(s)] or sentences  # "This tool belongs to ...": context
    for sentence in sentences:
        words = _WORD.findall(sentence.casefold())
        if words and (words[0] in comp.verbs or words[0] in comp.ambiguous or words[0] in comp.read_verbs
                      or words[0].rstrip("s") in comp.verbs or words[0].rstrip("s") in comp.read_verbs):
            return words[:12]
    return _WORD.findall(sentences[0].casefold())[:12] if sentences else []


def _effect(comp: _Compiled, name: str, description: str, url: bool) -> tuple[Effect, frozenset[str]]:
    return _effect_cached(id(comp.policy), name, description, url)


def mentioned_effects(text: str, policy: Policy = DEFAULT_POLICY) -> frozenset[str]:
    """The kinds of effect ``text`` mentions at all (verbs and nouns: "payment" mentions ``pay``)."""
    comp = compiled(policy)
    return frozenset(comp.forms[w] for w in _WORD.findall(text.casefold()) if w in comp.forms)


def requested_effects(text: str, policy: Policy = DEFAULT_POLICY) -> frozenset[str]:
    """The kinds of effect a request *asks for*: its verbs ("email Bob" asks to send; "the email from Bob" does not)."""
    comp = compiled(policy)
    out: set[str] = set()
    lowered = text.casefold()
    for m in _WORD.finditer(lowered):
        word = m.group(0)
        if word in comp.verbs:
            out.add(comp.verbs[word])
        elif word in comp.ambiguous and _VERB_SLOT.search(lowered[max(0, m.start() - 24):m.start()]) and \
                not lowered.startswith(" sure", m.end()):
            out.add(comp.ambiguous[word])
    return frozenset(out)


_DELEGATES = re.compile(
    r"\b(?:do|follow|perform|complete|execute|carry out|handle|take care of|act on)\b"
    r"(?![^.?!\n]{0,30}?\b(?:following|these|below)\b)[^.?!\n]{0,60}?"
    r"\b(?:actions?|instructions?|tasks?|steps?|to-?dos?|requests?|what (?:it|they|he|she|the \w+) (?:says?|asks?))\b"
    r"|\b(?:find|see|read|get|check)\b[^.?!\n]{0,20}\bdetails\b[^.?!\n]{0,10}\b(?:in|on|at|from)\b",
    re.IGNORECASE)


def delegates(text: str) -> bool:
    """The user hands the request over to what a tool returns ("do the tasks on my TODO list at ...")."""
    return _DELEGATES.search(text) is not None


# ------------------------------------------------------------------------------------ tool results as data


@dataclass(frozen=True)
class _Field:
    key: str
    """The field's name (``""`` for a plain-text result)."""
    text: str
    record: int
    """The innermost JSON object holding it (-1: none)."""
    whole: bool
    """A field of structured data (a value equal to all of it is data the agent copies)."""
    item: int = 0
    """The item of a result that is a list (a file of a search's files, an e-mail of an inbox); 0 otherwise."""


@dataclass(frozen=True)
class _Parsed:
    fields: tuple[_Field, ...]
    labelled: Mapping[int, Mapping[str, str]]
    """record -> kind -> the labelled field name that holds a value of that kind."""


def _leaf_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


@lru_cache(maxsize=4096)
def _parse(text: str, policy_id: int) -> _Parsed:
    """A tool result as fields: each string or number of a JSON result (with its key and object), else one text."""
    comp = _COMPILED[policy_id]
    stripped = text.strip()
    data: Any = None
    if stripped[:1] in ("[", "{"):
        try:
            data = json.loads(stripped)
        except (ValueError, RecursionError):
            data = None
    if not isinstance(data, (list, dict)):
        return _Parsed((_Field("", text, -1, False),), {})
    fields: list[_Field] = []
    labelled: dict[int, dict[str, str]] = {}
    records = 0
    stack: list[tuple[str, Any, int, int]] = ([("", sub, -1, i) for i, sub in reversed(list(enumerate(data)))]
                                              if isinstance(data, list) else [("", data, -1, 0)])
    while stack:
        key, value, record, item = stack.pop()
        if isinstance(value, Mapping):
            records += 1
            rid = records
            for k, sub in reversed(list(value.items())):
                fields.append(_Field("(key)", str(k), rid, True, item))
                stack.append((str(k), sub, rid, item))
            continue
        if isinstance(value, list):
            stack.extend((key, sub, record, item) for sub in reversed(value))
            continue
        leaf = _leaf_text(value)
        if leaf is None:
            continue
        fields.append(_Field(key, leaf, record, True, item))
        norm = _norm_key(key)
        for kind, labels in comp.labels.items():
            if norm in labels and record >= 0 and comp.kind_of(leaf) == kind:
                labelled.setdefault(record, {}).setdefault(kind, key)
    return _Parsed(tuple(fields), labelled)


register_cache(_parse.cache_clear)


_SPACES = re.compile(r"[\s-]+")


@lru_cache(maxsize=8192)
def _compact(text: str) -> str:
    return _SPACES.sub("", text).casefold()


register_cache(_compact.cache_clear)


def _occurs(value: Any, ctx: QueryContext, raw: str, how: Spelling = "exact") -> bool:
    """``value`` is in the text (the cascade's exact matching: case, whitespace, word boundaries, numbers).

    ``how``: ``compact`` also finds it without spaces and dashes; ``date`` finds the calendar date
    it is however the text writes it ("the 1st of May 2024" for ``2024-05-01``).
    """
    if not ctx.text:
        return False
    if isinstance(value, str):
        if contains_word(ctx.text, fold_query(value)):
            return True
        if how == "date":
            date = date_of(value)
            return date is not None and mentions(dates_in(raw), date)
        return how == "compact" and len(_compact(value)) >= 8 and _compact(value) in _compact(raw)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value in ctx.numbers
    return False


def _whole(value: Any, field_: _Field, how: Spelling = "exact") -> bool:
    if isinstance(value, str):
        if how == "date":  # 2024-05-01 09:00 and a field 2024-05-01 09:00:00: the same day of the data
            date = date_of(value)
            return date is not None and date == date_of(field_.text)
        return fold_query(value) == fold_query(field_.text)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(field_.text) == float(value)
        except ValueError:
            return False
    return False


# ------------------------------------------------------------------------------------ provenance


@dataclass(frozen=True)
class FlowValue:
    """One decisive value of a call: its role, its kind, where it was found, and why that source class."""

    path: str
    """``param``, ``param[0]``, ``param.key``, or ``param~token`` for a value inside a longer text."""
    value: Any
    role: str
    kind: str | None
    source: SourceName
    tool: str | None = None
    """The tool whose result holds it (``field``, ``named``, ``text``)."""
    key: str | None = None
    """The field of that result (``""``: a plain-text result)."""
    excerpt: str | None = None
    """The text of that field, around the value."""
    why: str = ""
    """Why this source class (for ``named`` / ``text``: whether and how the request names the result)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (fields at their default left out)."""
        out: dict[str, Any] = {"path": self.path, "value": self.value, "role": self.role, "source": self.source}
        for name in ("kind", "tool", "key", "why"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True)
class FlowFinding:
    """Why the policy does not let one call run as proposed."""

    index: int
    name: str | None
    effect: str
    rule: Literal["unsourced value", "unrequested effect"]
    why: str
    """One sentence: which value, from where, which rule."""
    value: FlowValue | None = None


@dataclass(frozen=True)
class FlowReport:
    """The policy's verdict on a set of calls: the values it traced, its findings, the exception it applied."""

    values: tuple[tuple[int, FlowValue], ...]
    """``(call index, value)`` for every decisive value of every checked call."""
    findings: tuple[FlowFinding, ...] = ()
    requested: tuple[str, ...] = ()
    """The kinds of effect the request's verbs ask for (sorted)."""
    named: tuple[str, ...] = ()
    """How the request names each tool result it names (``read_file(file_path=...)``: "...")."""
    delegated: bool = False
    waived: tuple[FlowFinding, ...] = ()
    """Findings that would block without the counted exception (the request hands the task over)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {"values": [dict(v.to_dict(), index=i) for i, v in self.values],
                "requested": list(self.requested), "named": list(self.named), "delegated": self.delegated,
                "waived": [_finding_dict(f) for f in self.waived]}


def _finding_dict(finding: FlowFinding) -> dict[str, Any]:
    return {"index": finding.index, "name": finding.name, "effect": finding.effect, "rule": finding.rule,
            "why": finding.why, "value": finding.value.to_dict() if finding.value is not None else None}


def role_of(param: str, tool: ToolSpec | None, policy: Policy = DEFAULT_POLICY) -> Role:
    """The role of ``param`` of ``tool``: the first role whose name pattern matches, else by its description."""
    comp = compiled(policy)
    described = ""
    if tool is not None:
        schema = tool.properties.get(param)
        if isinstance(schema, Mapping):
            described = str(schema.get("description") or schema.get("title") or "").casefold()
    fallback: Role | None = None
    for role, patterns in comp.roles:
        if any(p.fullmatch(param) for p in patterns):
            if role.params == (r".*",) and described:  # the catch-all: let the description speak first
                fallback = role
                break
            return role
    if described:
        words = set(_WORD.findall(described))
        for role, _ in comp.roles:
            if role.words and any(w in words for w in role.words if " " not in w):
                return role
    return fallback if fallback is not None else policy.roles[-1]


class _Naming(NamedTuple):
    """How the request names a tool result."""

    how: str
    by: Literal["argument", "address", "mention", "handed"]
    """Its call takes a value of the request (``address``: a URL, the page the request gives), the request
    mentions what the tool returns, or the request hands the task over to it."""
    items: frozenset[int] | None = None
    """The items of a list result that carry the value the request gave its call (None: the whole result)."""


class _View:
    """One review's sources, prepared: contexts, parsed results, which results the request names."""

    def __init__(self, sources: Sources, policy: Policy) -> None:
        self.policy, self.comp = policy, compiled(policy)
        user = "\n".join(sources.user)
        self.user_raw, self.user = user, query_context(user)
        self.system_raw = "\n".join(sources.system)
        self.system = query_context(self.system_raw)
        self.tools = sources.tools
        self.parsed = [_parse(t.text, id(policy)) for t in sources.tools]
        self.user_words = frozenset(_WORD.findall(user.casefold()))
        self.user_stems = frozenset(w.rstrip("s") for w in self.user_words)
        self.requested = requested_effects(user, policy)
        self.mentioned = mentioned_effects(user, policy)
        self.covered = frozenset(k for e in policy.effects if e.name in self.requested for k in e.covers)
        self.delegated = any(delegates(u) for u in sources.user)
        self.stated = self.comp.stated(user)
        self.naming = [self._names(i, self.user, user, self.user_words) for i in range(len(sources.tools))]
        self.guarded = [(i, f, role, words) for role in policy.roles if role.decisive and "field" not in role.sources
                        for i, parsed in enumerate(self.parsed) for f in parsed.fields
                        if f.whole and f.key != "(key)" and len(f.text.strip()) >= _MIN_GUARDED
                        and (_specific(f.text) or sum(c.isdigit() for c in f.text) >= _MIN_GUARDED_DIGITS)
                        and (words := _label_words(f.key, role))]
        """Fields whose label names a role data may not fill ("Passport Number": a secret), with those words."""
        self.handed = self._handed() if self.delegated else self.naming

    def _names(self, index: int, ctx: QueryContext, raw: str, words: frozenset[str]) -> _Naming | None:
        """How the request (``ctx``: its text) names result ``index`` (None: it does not)."""
        tool = self.tools[index]
        specific = [(p, v) for p, v in _arg_leaves(tool.arguments or {}) if _specific(v)]
        for param, value in specific:
            if _occurs(value, ctx, raw):
                how = f"its call {tool.tool}({param}={_short(value)}) takes that value from the request"
                by: Literal["address", "argument"] = "address" if self.comp.kind_of(value) == "url" else "argument"
                return _Naming(how, by, _items_carrying(self.parsed[index], param, value))
        if specific:
            return None
        stems = frozenset(w.rstrip("s") for w in words)
        for noun in (w for w in _name_words(tool.tool) if w not in self.comp.stop and len(w) > 2):
            if noun in words or noun.rstrip("s") in stems:
                return _Naming(f"the request mentions what {tool.tool} returns ({noun})", "mention")
        return None

    def _handed(self) -> list[_Naming | None]:
        """Under the counted exception: the results the request names, and those the text it hands over names.

        When the agent has not read any result the request names (it went straight to what the
        handed-over text asks), every result counts as handed over: there is no telling which text it followed.
        """
        naming = list(self.naming)
        if not any(naming):
            return [_Naming("the request hands the task over to tool text the agent has not shown", "handed")
                    for _ in naming]
        for _ in range(3):  # the TODO list names a channel, whose message names a page
            text = "\n".join([self.user_raw, *(self.tools[i].text for i, how in enumerate(naming) if how is not None)])
            ctx, words = query_context(text), frozenset(_WORD.findall(text.casefold()))
            grown = [how or (_Naming(f"{found.how} (in the text the request hands over)", "handed")
                             if (found := self._names(i, ctx, text, words)) else None) for i, how in enumerate(naming)]
            if grown == naming:
                break
            naming = grown
        return naming

    def names_label(self, label: str) -> bool:
        """A word of ``label`` (a ``label: value`` line of tool text) is a word of the request ("my manager")."""
        words = [w for w in _WORD.findall(label.casefold()) if len(w) > 2 and w not in self.comp.stop]
        return any(w in self.user_words or w.rstrip("s") in self.user_stems for w in words)

    def role_asked(self, role: Role) -> bool:
        return any((w in self.user_words) if " " not in w else (w in self.user.text) for w in role.words)


_MIN_GUARDED = 4  # a labelled secret shorter than this ("no") is no evidence of a leak
_MIN_GUARDED_DIGITS = 8  # a number this long is an identifier (a card number), not a quantity


def _label_words(key: str, role: Role) -> tuple[str, ...]:
    """The words of ``role`` that field name ``key`` holds (``Credit Card Number``: "credit card", "card number")."""
    label = " ".join(_name_words(key))
    return tuple(w for w in role.words if re.search(rf"\b{re.escape(w)}\b", label))


_ITEM_FIELD_CHARS = 120
"""How long a field that identifies an item may be (a name, a subject, a file name; a body of text is longer)."""
_ALNUM = re.compile(r"[^\W_]+")


def _items_carrying(parsed: _Parsed, param: str, value: str) -> frozenset[int] | None:
    """The items of a list result the request's ``value`` identifies (None: not a list, or no item carries it).

    Why: a search for the file the request names returns other files too, and text in those is not
    what the request names ("the file 'minutes.docx'": not the file 'newest-minutes.docx' beside it).
    An item carries the value when its field of the parameter's name equals it (``filename`` for
    ``filename=...``), else when one of its short fields (a name, a subject, a file name; not a body of
    text) holds its words in order ("family reunion" in the subject "Re: Family Reunion").
    """
    items = {f.item for f in parsed.fields}
    if len(items) < 2:
        return None
    folded, key = fold_query(value), _norm_key(param.split(".")[0].split("[")[0])
    equal = frozenset(f.item for f in parsed.fields if f.whole and _norm_key(f.key) == key
                      and fold_query(f.text) == folded)
    if equal:
        return equal
    words = _ALNUM.findall(folded)
    held = frozenset(f.item for f in parsed.fields if f.whole and len(f.text) <= _ITEM_FIELD_CHARS
                     and _holds(_ALNUM.findall(fold_query(f.text)), words))
    return held or None


def _holds(words: list[str], wanted: list[str]) -> bool:
    n = len(wanted)
    return n > 0 and any(words[i:i + n] == wanted for i in range(len(words) - n + 1))


def _arg_leaves(arguments: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for param, value in arguments.items():
        yield from argument_leaves(param, value)


def argument_leaves(path: str, value: Any, enum: Sequence[Any] = ()) -> Iterator[tuple[str, Any]]:
    """The scalar leaves of an argument value worth tracing (bools, nulls, enum values and tiny strings assert nothing)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        if len(value.strip()) >= _MIN_STRING and value not in enum:
            yield path, value
    elif isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, Mapping):
        for key, sub in value.items():
            yield from argument_leaves(f"{path}.{key}", sub)
    elif isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            yield from argument_leaves(f"{path}[{i}]", sub, enum)


_LABEL = re.compile(r"(?:^|\n)[ \t]*(?:[-*\u2022][ \t]*)?([A-Za-z][\w .'/()-]{0,40}?)[ \t]*[:=][ \t]*$")


def _line_label(text: str, value: str) -> str | None:
    """The label of the ``label: value`` line ``value`` stands in, if it stands right after one."""
    at = text.casefold().find(value.casefold())
    if at < 0:
        return None
    m = _LABEL.search(text[max(0, at - 60):at])
    return m.group(1).strip() if m is not None else None


def _specific(value: Any) -> bool:
    """Evidence of where a value came from: a text of 3+ characters, not a number, date or time."""
    return isinstance(value, str) and len(value.strip()) >= 3 and not _FORMAT_ONLY.match(value)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _excerpt(text: str, value: Any) -> str:
    if len(text) <= _EXCERPT:
        return text
    at = text.casefold().find(str(value).casefold())
    start = max(0, at - _EXCERPT // 2) if at >= 0 else 0
    return ("..." if start else "") + text[start:start + _EXCERPT] + "..."


def trace_value(view: _View, path: str, value: Any, role: Role, kinds: frozenset[str], *,
                delegated: bool) -> FlowValue:
    """Where ``value`` (role ``role``, of a call whose effect kinds are ``kinds``) came from (module docstring)."""
    comp = view.comp
    kind = comp.kind_of(value) if isinstance(value, str) else None
    how = comp.how(kind)
    if _occurs(value, view.user, view.user_raw, how):
        return FlowValue(path, value, role.name, kind, "user")
    if _occurs(value, view.system, view.system_raw, how):
        return FlowValue(path, value, role.name, kind, "system")
    places: list[tuple[int, _Field]] = []
    for index, parsed in enumerate(view.parsed):
        for field_ in parsed.fields:
            if field_.whole and _whole(value, field_, how) and not _misplaced(parsed, field_, kind):
                return FlowValue(path, value, role.name, kind, "field", view.tools[index].tool, field_.key,
                                 _excerpt(field_.text, value), "a whole field of structured data")
            if _occurs(value, query_context(field_.text), field_.text, how):
                places.append((index, field_))
    if not places:
        return FlowValue(path, value, role.name, kind, "derived", why="found in no message: composed by the agent")
    first: FlowValue | None = None
    for index, field_ in places:
        source, why = _named_for(view, index, field_, value, role, kind, kinds, delegated)
        found = FlowValue(path, value, role.name, kind, source, view.tools[index].tool, field_.key,
                          _excerpt(field_.text, value), why)
        if source == "named":
            return found
        first = first or found
    assert first is not None
    return first


def _misplaced(parsed: _Parsed, field_: _Field, kind: str | None) -> bool:
    """A value of a kind in a field of a record that keeps that kind under another, labelled field.

    An IBAN as a transaction's subject is no account of that record, whoever wrote it there.
    """
    label = parsed.labelled.get(field_.record, {}).get(kind or "")
    return label is not None and field_.key != label


def _named_for(view: _View, index: int, field_: _Field, value: Any, role: Role, kind: str | None,
               kinds: frozenset[str], delegated: bool) -> tuple[SourceName, str]:
    """``named`` when the request names result ``index`` as the source of this role, else ``text``; and why.

    ``replaced`` instead of ``text`` when the request states its own value of the kind (``Role.stated_excludes``).
    """
    naming = (view.handed if delegated else view.naming)[index]
    tool = view.tools[index].tool
    if role.stated_excludes and kind is not None and kind in view.stated and "egress" not in kinds:
        return "replaced", f"the request states its own {kind}, so a {kind} from tool text does not fill the {role.name}"
    if _misplaced(view.parsed[index], field_, kind):
        label = view.parsed[index].labelled[field_.record][kind or ""]
        return "text", (f"its record keeps {kind} values in the field {label!r}; this one is in the field "
                        f"{field_.key!r}")
    line = _line_label(field_.text, value)
    if line is not None and view.names_label(line):
        return "named", f"it is the value of the line {line!r}, which the request names"
    if naming is None:
        return "text", f"the request does not name this result of {tool} as a source"
    if naming.items is not None and field_.item not in naming.items:
        return "text", (f"{naming.how}, but this value is in another item of that result than the one"
                        f"{'s' if len(naming.items) > 1 else ''} carrying it")
    if delegated:
        return "named", f"{naming.how}, and the request hands the task over to it (the counted exception)"
    if "egress" in kinds:  # following a link: in an item the request points at, not on a page it gives
        if naming.by == "argument":
            return "named", f"{naming.how}: a link in an item the request points at"
        if naming.by == "address":
            return "text", f"{naming.how}: the request gives this page's address, not the links on it"
    if view.role_asked(role):
        return "named", f"{naming.how}, and the request asks for a {role.name}"
    asked = kinds & (view.requested | view.covered)  # asked for by a verb: naming "my rent payment" asks no payment
    if role.implied and asked:
        return "named", f"{naming.how}, and the request asks for this effect ({', '.join(sorted(asked))})"
    return "text", f"{naming.how}, but not as the source of a {role.name}"


def _call_values(view: _View, call: ToolCall, tool: ToolSpec | None, kinds: frozenset[str],
                 delegated: bool) -> list[FlowValue]:
    """Every decisive value of ``call`` with its provenance (values of a kind inside free text included)."""
    comp, policy = view.comp, view.policy
    out: list[FlowValue] = []
    schema = tool.properties if tool is not None else {}
    for param, value in call.arguments.items():
        role = role_of(param, tool, policy)
        for path, leaf in argument_leaves(param, value, schema_enum(schema, param)):
            if not isinstance(leaf, str) or (_FORMAT_ONLY.match(leaf) and comp.how(comp.kind_of(leaf)) != "date"):
                continue  # numbers and times recur across unrelated texts: no evidence of a source (dates are compared)
            traced = trace_value(view, path, leaf, role, kinds, delegated=delegated) if role.decisive else None
            if traced is not None:
                out.append(traced)
            if isinstance(leaf, str) and (traced is None or traced.source == "derived"):
                for kind, token in comp.tokens(leaf):  # a value of a kind inside a text plays its kind's role
                    if kind not in comp.in_text or (traced is not None and token.strip() == leaf.strip()):
                        continue
                    token_role = policy.role(policy.kind_roles.get(kind, role.name))
                    token_path = path if token.strip() == leaf.strip() else f"{path}~{token}"
                    out.append(trace_value(view, token_path, token, token_role, kinds, delegated=delegated))
            if isinstance(leaf, str) and view.guarded:
                out.extend(_guarded_copies(view, path, leaf, role))
    return out


def _guarded_copies(view: _View, path: str, leaf: str, role: Role) -> list[FlowValue]:
    """Values of fields labelled for a role data may not fill (a passport number) that ``leaf`` copies.

    Why: a secret leaves by being written into any argument of a side effect, a message body too; its
    label says what it is ("Passport Number"), whatever its shape. It may go where the request names
    it (the label's word: "send my passport number to ..."), or where the user typed it.
    """
    out: list[FlowValue] = []
    folded = fold_query(leaf)
    for index, field_, guarded, words in view.guarded:
        if guarded.name == role.name or not contains_word(folded, fold_query(field_.text)):
            continue  # an argument of that role is traced as such already
        if _occurs(field_.text, view.user, view.user_raw):
            continue  # the user typed it
        named = next((w for w in words if contains_word(view.user.text, fold_query(w))), None)
        source: SourceName = "named" if named else "field"
        why = (f"the request names its label ({named})" if named else
               f"a {guarded.name} from the field {field_.key!r}, which the request does not name")
        copy = path if fold_query(field_.text) == folded else f"{path}~{field_.text}"
        out.append(FlowValue(copy, field_.text, guarded.name, None, source, view.tools[index].tool, field_.key,
                             _excerpt(field_.text, field_.text), why))
    return out


def _findings(view: _View, index: int, call: ToolCall, tool: ToolSpec | None, delegated: bool
              ) -> tuple[list[FlowValue], list[FlowFinding]]:
    effect, kinds = effect_kinds(tool, view.policy) if tool is not None else ("read", frozenset[str]())
    if effect == "read":
        return [], []
    if effect == "egress":
        kinds = frozenset({"egress"})
    values = _call_values(view, call, tool, kinds, delegated)
    found: list[FlowFinding] = []
    for value in values:
        role = view.policy.role(value.role)
        if value.source not in role.sources:
            found.append(FlowFinding(index, call.name, effect, "unsourced value", (
                f"{call.name}.{value.path} ({value.role}{', ' + value.kind if value.kind else ''}) = {_short(value.value)} "
                f"comes from {'the' if value.source == 'field' else 'the text of the'} result of {value.tool}"
                f"{' (field ' + repr(value.key) + ')' if value.key else ''}: {value.why}; a {value.role} may come from "
                f"{', '.join(s for s in SOURCE_NAMES if s in role.sources)}"), value))
    unasked = _unasked(view, kinds)
    if effect != "egress" and not delegated and unasked and not any(
            v.source in ("user", "system") for v in values) and not _dictated(view, call, tool):
        found.append(FlowFinding(index, call.name, effect, "unrequested effect", (
            f"{call.name} ({', '.join(sorted(kinds))}) is an effect the user's request does not ask for ({unasked}), "
            f"and none of its values comes from the user"), None))
    return values, found


def _unasked(view: _View, kinds: frozenset[str]) -> str | None:
    """Why the request does not ask for an effect of ``kinds`` (None: it does).

    A ``strict`` kind (paying, deleting) must be named by the request (a verb or a noun: "the
    cancellation"); any other must be asked for by a verb, or covered by a kind the request asks for
    (``EffectKind.covers``: sharing a result on social media is posting it).
    """
    strict = {e.name for e in view.policy.effects if e.strict} & kinds
    if strict:
        missing = strict - view.mentioned
        return f"it never mentions {'/'.join(sorted(missing))}" if missing else None
    if kinds & (view.requested | view.covered):
        return None
    return f"it asks for {', '.join(sorted(view.requested)) or 'no side effect'}"


def _dictated(view: _View, call: ToolCall, tool: ToolSpec | None) -> bool:
    """The user dictated the call's free text ("write them the following message: Congrats ..."): it is theirs."""
    for param, value in call.arguments.items():
        if not isinstance(value, str) or view.policy.role(role_of(param, tool, view.policy).name).decisive:
            continue
        if len(value.strip()) >= 8 and _occurs(value, view.user, view.user_raw):
            return True
        words = [w for w in _WORD.findall(value.casefold()) if len(w) > 2]
        if len(words) >= 3 and sum(w in view.user_words for w in words) >= 0.8 * len(words):
            return True
    return False


def picked_by_request(value: Any, sources: Sources, policy: Policy = DEFAULT_POLICY) -> str | None:
    """How the request picks the place of a tool result that holds ``value``, if it does.

    It picks an item holding the value as a whole field when it quotes another of the item's short
    fields ("pay my landlord": the listing's item whose payee is 'landlord'), and a ``label: value``
    line whose label it names ("landlord: DE89..."): then the value is the user's choice whoever else
    names it. None otherwise.
    """
    view = _View(sources, policy)
    for tool, parsed in zip(view.tools, view.parsed):
        holding = {f.item for f in parsed.fields if f.whole and _whole(value, f)}
        for f in parsed.fields:
            if (f.item in holding and f.whole and not _whole(value, f) and len(f.text) <= _ITEM_FIELD_CHARS
                    and _specific(f.text) and _occurs(f.text, view.user, view.user_raw)):
                return f"the request names the item of {tool.tool} whose {f.key} is {_short(f.text)}, which holds it"
            line = _line_label(f.text, value) if isinstance(value, str) else None
            if line is not None and view.names_label(line):
                return f"it is the value of the line {line!r} of the result of {tool.tool}, which the request names"
    return None


def check_flow(calls: Sequence[ToolCall], registry: Registry, sources: Sources,
               policy: Policy = DEFAULT_POLICY) -> FlowReport:
    """Apply the policy to ``calls`` (module docstring); no tool result = nothing to check."""
    if not sources.tools or not calls:
        return FlowReport(())
    view = _View(sources, policy)
    values: list[tuple[int, FlowValue]] = []
    findings: list[FlowFinding] = []
    waived: list[FlowFinding] = []
    for index, call in enumerate(calls):
        tool = registry.get(call.name)
        strict_values, strict = _findings(view, index, call, tool, False)
        if strict and view.delegated:
            loose_values, loose = _findings(view, index, call, tool, True)
            if not loose:  # it runs only because the request hands the task over: counted
                waived.extend(strict)
            values.extend((index, v) for v in loose_values)
            findings.extend(loose)
        else:
            values.extend((index, v) for v in strict_values)
            findings.extend(strict)
    named = tuple(f"{view.tools[i].tool}: {how.how}" for i, how in enumerate(view.naming) if how is not None)
    return FlowReport(tuple(values), tuple(findings), tuple(sorted(view.requested)), named, view.delegated,
                      tuple(waived))

