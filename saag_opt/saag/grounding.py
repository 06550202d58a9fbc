"""SAAG stage 3, argument value grounding: AVEM, QSLO, VHR (SAAG paper §2.3; docs/design.md §3).

Values are grounded against the user query Q only. Exact match is type-aware:

* **strings**: case-insensitive (``str.casefold``) with whitespace runs collapsed, at word
  boundaries: an occurrence counts only if it does not extend an alphanumeric run of Q, i.e. the
  character before it is not alphanumeric when the value starts with an alphanumeric character,
  and likewise at the end ("York" is not in "New Yorker"; ".txt" is in "file.txt"; regex special
  characters are plain text). Characters of scripts written without spaces (Chinese, kana,
  Thai/Lao) never count as word characters, so "東京" matches inside "明日の東京の天気". A string
  that is itself a number ("1000") also matches a numeric token of Q ("1,000"). Empty or blank
  strings assert nothing and are assumptions.
* **numbers** (bools are not numbers): equal to a numeric token of Q. Tokens: digit runs with
  optional ``,ddd`` thousands groups, a decimal part and an exponent (``1,000``, ``2.5``, ``.5``,
  ``1e3``); ``5`` equals ``5.0``. A leading ``-`` makes a token negative only when it does not
  follow an alphanumeric character (``-3`` and ``(-3)`` are negative, ``2020-05`` is 2020 and 5);
  the absolute value of a negative token is accepted too. Digits inside words count (``10am``).
* **lists** (nested lists are flattened): exact iff non-empty and every element matches. For h, a
  list counts in G iff one of its elements would (a string, or a number when Q has digits); its h
  is the worst (largest) element h and its PartialRatio the worst (smallest) over failed strings.
* **bools, nulls, objects**, empty lists and empty strings are *assumptions*: excluded from VHR
  and from the pass decision, counted as non-matching in AVEM's denominator |P| (paper).
* **schema enum values** (a departure from the paper; docs/design.md §3): a string that is one of the
  parameter's ``enum`` values (of its ``items`` for an array; compared exactly) is grounded in the
  registry, not the query. Found in Q it is an exact match as usual; not found, it is an
  *assumption* like a bool, not a miss (a list element likewise drops out of the list's h and
  pass decision). Why: BFCL enum parameters such as ``unit="celsius"`` are chosen from the schema,
  and calling that choice a hallucination conflates it with invention, just like the paper's own
  "ticker inferred from company name" case. A string outside the enum is grounded as usual.

``h`` (Eq. 8): 0 if exact; ``1 - PartialRatio/100`` for strings (casefolded, on the collapsed
query); 1 for numbers when Q has digits; numbers are assumptions when Q has none. ``QSLO`` is the
mean PartialRatio/100 over strings that failed exact match (None if none); ``VHR_ctx`` the sum of
h over G and the reported ``VHR`` its mean (None if G is empty).

Pass rule: every member of G matched exactly. This equals the paper's ``VHR_ctx == 0`` except for
one case the formula lets through: a string that occurs only inside a longer word ("art" in
"start") has PartialRatio 100 and so h = 0, yet it is not verbatim in Q. The paper's stated
intent is that only verbatim values pass, so we fail it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz

from saag_opt.saag.caches import register_cache

__all__ = [
    "Grounded", "GroundingResult", "QueryContext", "check_grounding", "contains_word", "exact_match",
    "fold_query", "ground_arguments", "ground_value", "number_tokens", "query_context", "schema_enum",
]

_NUM_TOKEN = re.compile(r"(?<![\d.])(-?)((?:\d+(?:,\d{3}(?!\d))*(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?)")
_NUM_STRING = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?")
_MAX_LIST_NODES = 100_000  # a guard against pathological (e.g. self-referencing) lists
_MAX_MEMO = 512  # string groundings remembered per query
_END = object()

Number = int | float


class QueryContext:
    """A query prepared once for grounding: casefolded, whitespace-collapsed, numbers tokenised.

    Read-only by convention. A plain slotted class rather than a frozen dataclass: one is built
    per new query, and the frozen ``__init__`` cost as much as folding the query itself. The
    numeric tokens are found on first use: a third of BFCL predictions ground no number at all.
    """

    __slots__ = ("text", "_numbers", "memo", "calibration")

    def __init__(self, text: str, numbers: frozenset[Number] | None = None) -> None:
        self.text = text
        self._numbers = numbers
        self.calibration: Any = None
        """What calibrated grounding needs from this query (``saag.calibration``), built on first use."""
        self.memo: dict[str, Grounded] = {}
        """Grounding of string values already seen with this query (self-repair rounds, reviewers
        and perturbed variants of one example repeat most values); bounded by ``_MAX_MEMO``."""

    @property
    def numbers(self) -> frozenset[Number]:
        """The numeric tokens of the query (``number_tokens``), negatives included."""
        numbers = self._numbers
        if numbers is None:
            numbers = self._numbers = number_tokens(self.text)
        return numbers

    @property
    def has_numbers(self) -> bool:
        """HasNumbers(Q) of Eq. 8: Q holds at least one numeric token."""
        return bool(self.numbers)

    def __repr__(self) -> str:
        return f"QueryContext(text={self.text!r})"


def _parse_number(body: str) -> Number | None:
    """A numeric token (commas already allowed) as int or float; None if Python refuses it."""
    body = body.replace(",", "")
    try:
        return float(body) if ("." in body or "e" in body or "E" in body) else int(body)
    except ValueError:  # e.g. more digits than int() converts
        return None


def fold_query(query: str) -> str:
    """Q casefolded with whitespace runs collapsed to one space and the ends stripped.

    Equal to ``" ".join(query.split()).casefold()``. Most queries need no collapsing: printable
    ASCII holds no whitespace but the space, so two C-level scans tell, several times cheaper than
    splitting and joining every word.
    """
    text = query.casefold()
    if text.isascii() and text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


_NUMBER_MASK = bytes(ord("d") if 48 <= i <= 57 else ord("s") if chr(i) in "-+.,e" else 32 for i in range(256))
"""Byte table for ASCII text: digits -> ``d``, the other characters a numeric token can hold -> ``s``,
everything else -> space. Number tokens live inside runs of non-space mask bytes that hold a ``d``."""


def number_tokens(text: str) -> frozenset[Number]:
    """The numeric tokens of a folded query, negatives included (see the module docstring).

    The result equals running ``_NUM_TOKEN`` over the whole text, but Python's regex engine tries
    every position of a 200-character query (tens of microseconds). For ASCII text we find the
    runs of number characters with C-level ``bytes.translate``/``find`` and run the regex only
    inside a run; the lookarounds cannot see past a run, whose neighbours are never digits or dots,
    so every run gives the same tokens as the whole text would. A run that is one plain integer or
    decimal, possibly followed by dots and commas, is that one token and needs no regex.
    """
    numbers: set[Number] = set()
    if not text.isascii():
        _scan(text, 0, len(text), numbers)
        return frozenset(numbers)
    mask = text.encode("ascii").translate(_NUMBER_MASK)
    size = len(text)
    pos = mask.find(b"d")
    while pos != -1:
        start = mask.rfind(b" ", 0, pos) + 1
        end = mask.find(b" ", pos)
        if end == -1:
            end = size
        core = text[start:end].rstrip(".,")  # sentence punctuation after a number ends no token
        if core.isdigit() or (core[0].isdigit() and core.count(".") == 1 and core.replace(".", "").isdigit()):
            value = _parse_number(core)  # the common cases: "25", "2022.", "9.8", "5,"
            if value is not None:
                numbers.add(value)
        else:
            _scan(text, start, end, numbers)
        pos = mask.find(b"d", end)
    return frozenset(numbers)


def _scan(text: str, start: int, end: int, numbers: set[Number]) -> None:
    """Add the numeric tokens of ``text[start:end]`` (a negative one also as its negation)."""
    for match in _NUM_TOKEN.finditer(text, start, end):
        value = _parse_number(match.group(2))
        if value is None:
            continue
        numbers.add(value)
        begin = match.start()
        if match.group(1) and (begin == 0 or not text[begin - 1].isalnum()):
            numbers.add(-value)


@lru_cache(maxsize=4096)
def query_context(query: str) -> QueryContext:
    """Prepare Q (cached: the same query is grounded against many calls and rounds)."""
    return QueryContext(fold_query(query))


register_cache(query_context.cache_clear)


def _word_char(char: str) -> bool:
    """Alphanumeric and from a script that separates words with spaces.

    Chinese, Japanese kana and Thai/Lao write words without spaces, so their characters never
    form a word boundary; without this, "東京" would never match inside "明日の東京の天気".
    """
    return char.isalnum() and (char < "\u0e00" or not (
        char <= "\u0eff" or "\u3040" <= char <= "\u30ff" or "\u3400" <= char <= "\u9fff"
        or "\uf900" <= char <= "\ufaff" or "\U00020000" <= char <= "\U0003ffff"))


def contains_word(haystack: str, needle: str) -> bool:
    """True if ``needle`` occurs in ``haystack`` without extending a word (see ``_word_char``)."""
    if not needle:
        return False
    start = haystack.find(needle)
    if start == -1:
        return False
    size, end_of_hay = len(needle), len(haystack)
    check_before, check_after = _word_char(needle[0]), _word_char(needle[-1])
    while start != -1:
        end = start + size
        if (not check_before or start == 0 or not haystack[start - 1].isalnum()
                or not _word_char(haystack[start - 1])) and \
                (not check_after or end == end_of_hay or not haystack[end].isalnum()
                 or not _word_char(haystack[end])):
            return True
        start = haystack.find(needle, start + 1)
    return False


def _number_in(value: Any, ctx: QueryContext) -> bool:
    try:
        return value in ctx.numbers
    except TypeError:  # an int/float subclass with a broken __hash__
        return False


Grounded = tuple[bool, float | None, float | None, bool]
"""``(exact, h, partial, miss)``: exact match (AVEM); h (None = assumption); PartialRatio/100 of a
failed string (QSLO); miss = an element that belongs to G failed exact match (stage-3 fail)."""

_ASSUMED: Grounded = (False, None, None, False)
_EXACT: Grounded = (True, 0.0, None, False)


def _ground_string(value: str, ctx: QueryContext) -> Grounded:
    memo = ctx.memo
    found = memo.get(value)
    if found is None:
        found = _ground_string_uncached(value, ctx)
        if len(memo) < _MAX_MEMO:
            memo[value] = found
    return found


def _ground_string_uncached(value: str, ctx: QueryContext) -> Grounded:
    needle = value.casefold()
    if not needle or needle.isspace():
        return _ASSUMED
    if contains_word(ctx.text, needle):  # fast path: most values need no whitespace clean-up
        return _EXACT
    collapsed = " ".join(needle.split())
    if collapsed != needle:
        needle = collapsed
        if contains_word(ctx.text, needle):
            return _EXACT
    if _NUM_STRING.fullmatch(needle):
        number = _parse_number(needle)
        if number is not None and _number_in(number, ctx):
            return _EXACT
    pr = fuzz.partial_ratio(needle, ctx.text) / 100.0
    return False, 1.0 - pr, pr, True


def _ground_scalar(value: Any, ctx: QueryContext) -> Grounded:
    if isinstance(value, str):
        return _ground_string(value, ctx)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if _number_in(value, ctx):
            return _EXACT
        return (False, 1.0, None, True) if ctx.has_numbers else _ASSUMED
    return _ASSUMED  # bool, None, object, anything else


def _leaves(value: list[Any] | tuple[Any, ...]) -> Iterator[Any]:
    """Non-list elements of a (nested) list, depth-first, without recursion."""
    stack: list[Iterator[Any]] = [iter(value)]
    budget = _MAX_LIST_NODES
    while stack and budget > 0:
        budget -= 1
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, (list, tuple)):
            stack.append(iter(item))
        else:
            yield item


def _ground_list(value: list[Any] | tuple[Any, ...], ctx: QueryContext, enum: Sequence[Any] = ()) -> Grounded:
    exact, seen, miss = True, False, False
    worst_h: float | None = None
    worst_pr: float | None = None
    flat = not any(type(item) in (list, tuple) for item in value)
    for leaf in (value if flat else _leaves(value)):
        seen = True
        leaf_exact, leaf_h, leaf_pr, leaf_miss = _ground_scalar(leaf, ctx)
        if leaf_miss and enum and type(leaf) is str and leaf in enum:
            leaf_exact, leaf_h, leaf_pr, leaf_miss = _ASSUMED
        exact = exact and leaf_exact
        miss = miss or leaf_miss
        if leaf_h is not None and (worst_h is None or leaf_h > worst_h):
            worst_h = leaf_h
        if leaf_pr is not None and (worst_pr is None or leaf_pr < worst_pr):
            worst_pr = leaf_pr
    return exact and seen, worst_h, worst_pr, miss


def ground_value(value: Any, ctx: QueryContext, enum: Sequence[Any] = ()) -> Grounded:
    """Ground one value against a prepared query; see ``Grounded``.

    ``enum`` holds the schema's allowed values of the parameter (of its items, for a list): a string
    among them that the query does not contain is an assumption (module docstring).
    """
    if isinstance(value, (list, tuple)):
        return _ground_list(value, ctx, enum)
    grounded = _ground_scalar(value, ctx)
    if grounded[3] and enum and type(value) is str and value in enum:
        return _ASSUMED
    return grounded


def schema_enum(schema: Mapping[str, Any] | None, param: str) -> Sequence[Any]:
    """The ``enum`` of a parameter's schema (of its ``items`` for an array); empty when there is none."""
    sub = schema.get(param) if schema is not None else None
    if not isinstance(sub, Mapping):
        return ()
    enum = sub.get("enum")
    if enum is None:
        items = sub.get("items")
        enum = items.get("enum") if isinstance(items, Mapping) else None
    return enum if isinstance(enum, (list, tuple)) else ()


def exact_match(value: Any, query: str) -> bool:
    """Type-aware ExactMatch(v, Q) of Eq. 6."""
    return ground_value(value, query_context(query))[0]


@dataclass(frozen=True, slots=True)
class GroundingResult:
    """Stage-3 metrics for one call."""

    avem: float | None
    qslo: float | None
    vhr: float | None
    vhr_ctx: float | None
    h: Mapping[str, float] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Every parameter in G matched exactly (implies VHR_ctx = 0)."""
        return not self.unmatched


GroundingTuple = tuple[int, dict[str, float], list[float], list[str], list[tuple[str, Any, float | None]]]


def ground_arguments(arguments: Mapping[str, Any], ctx: QueryContext,
                     schema: Mapping[str, Any] | None = None) -> GroundingTuple:
    """Stage 3 as plain values ``(exact_count, h, partials, assumptions, misses)`` (the hot path).

    ``misses`` holds ``(param, value, partial)`` for each member of G that failed exact match.
    ``schema`` maps parameter names to their JSON Schemas (the tool's ``properties``); it is read
    only for a value that failed, to tell an unstated ``enum`` choice (an assumption) from a miss.
    """
    exact_count = 0
    h: dict[str, float] = {}
    partials: list[float] = []
    assumptions: list[str] = []
    misses: list[tuple[str, Any, float | None]] = []
    memo = ctx.memo
    for param, value in arguments.items():
        kind = type(value)  # dispatch the common JSON types without the isinstance chain
        if kind is str:
            grounded = memo.get(value)
            exact, h_value, partial, miss = grounded if grounded is not None else _ground_string(value, ctx)
            if miss and value in schema_enum(schema, param):
                assumptions.append(param)
                continue
        elif kind is int or kind is float:
            numbers = ctx.numbers
            if value in numbers:
                exact_count += 1
                h[param] = 0.0
            elif numbers:
                h[param] = 1.0
                misses.append((param, value, None))
            else:
                assumptions.append(param)
            continue
        elif kind is bool or value is None or kind is dict:
            assumptions.append(param)
            continue
        else:
            exact, h_value, partial, miss = ground_value(value, ctx)
            if miss and schema is not None:
                enum = schema_enum(schema, param)
                if enum:
                    exact, h_value, partial, miss = ground_value(value, ctx, enum)
        if exact:
            exact_count += 1
        if h_value is None:
            assumptions.append(param)
            continue
        h[param] = h_value
        if miss:
            misses.append((param, value, partial))
        if partial is not None:
            partials.append(partial)
    return exact_count, h, partials, assumptions, misses


def check_grounding(arguments: Mapping[str, Any], query: str,
                    schema: Mapping[str, Any] | None = None) -> GroundingResult:
    """Run stage 3 on a call's arguments (keys already strings) against the query.

    ``schema``: the tool's ``properties`` (parameter -> JSON Schema), for the ``enum`` rule.
    """
    exact_count, h, partials, assumptions, misses = ground_arguments(arguments, query_context(query), schema)
    total = sum(h.values()) if h else None
    return GroundingResult(
        avem=exact_count / len(arguments) if arguments else None,
        qslo=sum(partials) / len(partials) if partials else None,
        vhr=total / len(h) if total is not None else None,
        vhr_ctx=total,
        h=h, assumptions=tuple(assumptions), unmatched=tuple(m[0] for m in misses),
    )
