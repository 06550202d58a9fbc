"""Calibrated stage 3: general rules that accept correct values the paper's verbatim test misses.

The paper's stage 3 asks every value to appear verbatim in the query. Correct calls often do not:
a schema default, a reformatted date or time, "two adults" for ``2``, "10%" for ``0.1``,
"San Francisco" written as "San Francisco, CA". Measured on BFCL's own gold calls the verbatim
test flags a third of them (experiments/bench/grounding_calibration.py), so a mechanism that acts
on it (self-repair, a gate, the runtime guard) tells correct calls they are wrong.

``grounding="calibrated"`` (``check_calls``/``run_cascade``/``diagnose_with_gold``) runs the paper's stage 3
unchanged, then gives each value that failed exact match (a *miss*) to the rules below, in order;
the first rule that accepts it removes it from the misses and names itself in the report's
``calibrated`` mapping (param -> rule; ``default`` marks an assumption, every other rule a
match). Only the pass decision and the psi3 text change: the paper's metrics (AVEM, QSLO, VHR,
h, ...) are computed by the paper's definitions in both modes.
A list is accepted when every element is exact or accepted by an enabled rule.

Rules, in the order they are tried (each general: none names a function, a parameter or a value of
any dataset; each has its own positive and negative tests in tests/saag/test_calibration.py):

* ``default`` (an *assumption*): the value equals the parameter's schema ``default``, or is what
  the parameter's description states after the word "default" ("Default is 'km'", "defaults to
  0"). The registry, not the query, grounds it, like the paper-mode ``enum`` rule.
* ``format``: equal to a run of whole query words once case, punctuation and whitespace are
  ignored: ``3x + 9`` ~ "3x+9", ``x**2`` ~ "x^2", ``McDonald's`` ~ "mc donalds". The run must
  start and end at word boundaries, so "art" still does not match "start".
* ``inflection``: ``format`` with plurals reduced to singulars: ``teaspoon`` ~ "2 teaspoons".
* ``qualifier``: ``Head, Q`` where ``Head`` is grounded (verbatim or by ``format``) and each
  further comma part is a short qualifier of at most two words: "San Francisco, CA", "Paris,
  France"; or ``Region/Name`` with a grounded name ("Europe/London"). It cannot check that the
  qualifier is right.
* ``date``: a value that parses as a date (``YYYY-MM-DD``, ``MM/DD/YYYY``, ``DD-MM-YYYY``,
  ``YYYY.MM.DD``, optionally with a time, or a year-month) whose month and day the query states
  in some form ("April 11th, 2023", "the 10th of March", "3/7/2023"); the year must be stated too,
  unless the query states no year at all. A time part must pass ``time``.
* ``relative_date``: a date fixed by a full date the query states and a relative word: "today is
  2023-10-01 ... tomorrow" (anchor +1), "next Monday" (the next one or two Mondays).
* ``time``: ``HH:MM[:SS]`` whose hour and minute the query states, in 24-hour form or 12-hour
  form with am/pm or a part of the day ("7 PM", "4pm", "5 in the afternoon", "noon").
* ``number_word``: a number the query writes as a word: cardinals ("two", "twenty five", "a
  dozen"), ordinals ("third"), "twice"/"half".
* ``scaled_number``: a query number scaled by its written unit: a percentage as a fraction
  ("10%" -> 0.1), a magnitude word ("1.2 million", "$1M", "5k"), an SI prefix ("50mH" -> 0.05,
  "100µF" -> 0.0001) or a power of ten ("5 x 10^-12").
* ``unit``: a unit the query names in another form: ``m`` ~ "meters", ``cm`` ~ "centimeters".
* ``code``: a standard code whose name the query states: ISO 4217 currencies ("British Pounds"
  -> ``GBP``) and US state postal codes ("California" -> ``CA``). A table of world knowledge,
  the only one here.
* ``described_code``: an id the parameter's description maps to a label the query states ("1 for
  Bangkok, 2 for Chiang Mai" grounds ``1`` in a request about Bangkok).
* ``template``: the description's vocabulary filled with the request's words (``track:Shape of
  You artist:Ed Sheeran`` for a description "'track:Song Name artist:Artist Name'"): every word
  from the query or the description, at least half from the query, one from the description only.

These rules only *accept*. On BFCL they remove most false alarms but also much of the paper's
apparent recall, so calibrated mode also runs the two flag checks of ``saag.flags`` (``types``,
``duplicates``). The mode names and rule lists are in ``saag.modes``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date as _date
from itertools import accumulate
from typing import Any, Union

from saag_opt.saag.grounding import QueryContext, contains_word, ground_value, number_tokens
from saag_opt.saag.modes import ACCEPT_RULES, RuleSet

__all__ = ["Miss", "Rule", "as_number", "calibrate", "same_value"]


# -- the query, prepared once for the rules ----------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_ORDINALS = {w: i + 1 for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split())}
_OTHER_WORDS = {"dozen": 12, "twice": 2, "half": 0.5, "hundred": 100, "thousand": 1000, "million": 1_000_000,
                "billion": 1_000_000_000, "single": 1, "pair": 2, "couple": 2}

_NUMBER_WORDS = frozenset((*_UNITS, *_TENS, *_ORDINALS, *_OTHER_WORDS))
"""Every word ``_word_numbers`` reads a number from."""

_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS.update({m[:3]: n for m, n in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR_AFTER = r"(?:,?\s*(?:of\s+)?(\d{4}))?"
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+(?:the\s+)?{_DAY}\b{_YEAR_AFTER}")
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH})\b\.?{_YEAR_AFTER}")
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?(\d{{4}})\b")
_YMD = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
_DMY_OR_MDY = re.compile(r"\b(\d{1,2})([-/.])(\d{1,2})(?:\2(\d{4}|\d{2}))?\b")
_YEAR = re.compile(r"(?<!\d)(1\d{3}|2\d{3})(?!\d)")

_CLOCK = re.compile(r"\b(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*(a\.?\s?m\b\.?|p\.?\s?m\b\.?|o'?clock\b"
                    r"|(?:in\s+the\s+|at\s+)?(?:morning|afternoon|evening|night|tonight)\b)?")

_SCALES = (("percent", 0.01), ("%", 0.01), ("k", 1e3), ("thousand", 1e3), ("m", 1e6), ("mn", 1e6),
           ("million", 1e6), ("b", 1e9), ("bn", 1e9), ("billion", 1e9), ("trillion", 1e12))
_SCALED = re.compile(r"(\d+(?:,\d{3})*(?:\.\d+)?)\s?(percent|%|k|thousand|mn|m|million|bn|b|billion|trillion)\b|"
                     r"(\d+(?:,\d{3})*(?:\.\d+)?)(%)")


class _Prepared:
    """What the rules need from one query, each part built the first time a rule reads it.

    Why lazy: a miss is usually settled by one or two rules (a string by ``format``, a number by
    ``number_word`` or ``scaled_number``), and building every part for every query (dates, clock
    times, units, stems, ...) cost more than the rules themselves. Each attribute is computed by
    its builder in ``_PARTS`` on first read and then stored on the instance, so it reads like a
    plain attribute; the values are exactly what an eager build gives.
    """

    words: list[str]
    plain: _Run  # the words, for ``format``
    stems: _Run  # the words with plurals singular, for ``inflection`` and the rules reading labels
    units: set[str]
    word_numbers: set[float]
    scaled: set[float]
    dates: set[tuple[int, int, int | None]]
    month_years: set[tuple[int, int]]
    years: set[int]
    times: set[tuple[int, int, int]]

    def __init__(self, text: str) -> None:
        self.text = text

    def __getattr__(self, name: str) -> Any:
        """Build a missing part (only reached on its first read)."""
        build = _PARTS.get(name)
        if build is None:
            raise AttributeError(name)
        value = build(self)
        setattr(self, name, value)
        return value


class _Run:
    """Words joined without separators, with the offsets between words (word boundaries).

    One set serves as both word starts and word ends: a non-empty needle found in ``joined``
    starts before its end and ends after offset 0, so a boundary offset is a word start at the
    needle's start and a word end at its end.
    """

    __slots__ = ("joined", "bounds", "set")

    def __init__(self, words: Sequence[str]) -> None:
        self.joined, self.set = "".join(words), set(words)
        self.bounds = {0, *accumulate(map(len, words))}  # where each word ends (C-level, no Python loop)

    def holds(self, words: Sequence[str]) -> bool:
        """``words`` occur as a run of whole words (case and separators ignored)."""
        return self.holds_joined("".join(words))

    def holds_joined(self, needle: str) -> bool:
        """``needle`` (words joined without separators) starts and ends at word boundaries of the run."""
        if not needle:
            return False
        at = self.joined.find(needle)
        while at != -1:
            if at in self.bounds and at + len(needle) in self.bounds:
                return True
            at = self.joined.find(needle, at + 1)
        return False


def _stem(word: str) -> str:
    """A plural's singular ("services" -> "service", "cities" -> "city"); other words unchanged."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


_UNIT_NAMES: dict[str, tuple[str, ...]] = {
    "meter": ("m", "meter", "metre"), "centimeter": ("cm", "centimeter", "centimetre"),
    "millimeter": ("mm", "millimeter", "millimetre"), "kilometer": ("km", "kilometer", "kilometre", "kms"),
    "gram": ("g", "gram", "gramme"), "kilogram": ("kg", "kilogram", "kilo", "kgs"), "milligram": ("mg", "milligram"),
    "pound": ("lb", "lbs", "pound"), "ounce": ("oz", "ounce"), "second": ("s", "sec", "second"),
    "minute": ("min", "minute"), "hour": ("h", "hr", "hour"), "foot": ("ft", "foot", "feet"),
    "inch": ("in", "inch", "inche"), "mile": ("mi", "mile"), "liter": ("l", "liter", "litre"),
    "milliliter": ("ml", "milliliter", "millilitre"), "celsius": ("c", "celsius", "centigrade"),
    "fahrenheit": ("f", "fahrenheit"), "kelvin": ("k", "kelvin"), "yard": ("yd", "yard"),
    "gallon": ("gal", "gallon"),
}
_UNIT_OF = {alias: unit for unit, aliases in _UNIT_NAMES.items() for alias in aliases}
_SYMBOL_AFTER_NUMBER = re.compile(r"\d\s?(°?[a-z]{1,3})\b")


def _unit_of(text: str) -> str | None:
    """The unit a short text names: a symbol ("cm", "°C") or a name, singular or plural ("meters")."""
    word = text.strip().casefold().lstrip("°").rstrip(".")
    return _UNIT_OF.get(word) or (None if len(word) <= 3 else _UNIT_OF.get(_stem(word)))


def _units(text: str, words: Sequence[str]) -> set[str]:
    """Units the query names: long names anywhere, symbols only right after a number ("10m", "5 kg")."""
    found = {unit for word in words if len(word) > 3 and (unit := _unit_of(word)) is not None}
    found.update(unit for m in _SYMBOL_AFTER_NUMBER.finditer(text) if (unit := _unit_of(m.group(1))) is not None)
    return found


def _prepared(ctx: QueryContext) -> _Prepared:
    prepared: _Prepared | None = ctx.calibration
    if prepared is None:
        prepared = ctx.calibration = _Prepared(ctx.text)
    return prepared


_ASCII_SEPARATORS = bytes(c if chr(c).isalnum() else 32 for c in range(128)) + b" " * 128
"""Byte table: ASCII letters and digits kept, every other byte a space."""


def _words(text: str) -> list[str]:
    """``_WORD.findall(text)``, faster for ASCII text.

    There ``_WORD`` matches runs of letters and digits, which C-level ``bytes.translate`` and
    ``split`` find several times faster than the regex scan.
    """
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_SEPARATORS).decode("ascii").split()
    return _WORD.findall(text)


def _month_data(prepared: _Prepared) -> tuple[set[tuple[int, int, int | None]], set[tuple[int, int]]]:
    """``dates`` and ``month_years`` come from one scan; the first read of either stores both."""
    dates, month_years = _dates(prepared.text, prepared.words)
    prepared.dates, prepared.month_years = dates, month_years
    return dates, month_years


_PARTS: dict[str, Callable[[_Prepared], Any]] = {
    "words": lambda p: _words(p.text),
    "plain": lambda p: _Run(p.words),
    "stems": lambda p: _Run([_stem(w) if w[-1] == "s" else w for w in p.words]),  # _stem only changes a final s
    "units": lambda p: _units(p.text, p.words),
    "word_numbers": lambda p: _word_numbers(p.words),
    "scaled": lambda p: _scaled_numbers(p.text),
    "dates": lambda p: _month_data(p)[0],
    "month_years": lambda p: _month_data(p)[1],
    "years": lambda p: {int(y) for y in _YEAR.findall(p.text)},
    "times": lambda p: _times(p.text),
}
"""How each part of ``_Prepared`` is built from the query (and from other parts)."""


def _word_numbers(words: Sequence[str]) -> set[float]:
    """The numbers the words write out ("twenty five", "third", "a dozen")."""
    if _NUMBER_WORDS.isdisjoint(words):
        return set()  # most queries write no number as a word: one set check instead of the scan
    return _scan_word_numbers(words)


def _scan_word_numbers(words: Sequence[str]) -> set[float]:
    """What ``_word_numbers`` finds, by looking at every word (its oracle in the tests)."""
    out: set[float] = set()
    for i, word in enumerate(words):
        if word not in _NUMBER_WORDS:
            continue
        if word in _UNITS:
            out.add(_UNITS[word])
        elif word in _ORDINALS:
            out.add(_ORDINALS[word])
        elif word in _OTHER_WORDS:
            out.add(_OTHER_WORDS[word])
        elif word in _TENS:
            value = _TENS[word]
            out.add(value)
            following = words[i + 1] if i + 1 < len(words) else ""
            if following in _UNITS and 0 < _UNITS[following] < 10:
                out.add(value + _UNITS[following])
        if word in ("hundred", "thousand", "million", "billion") and i > 0:
            before = words[i - 1]
            base = _UNITS.get(before) or _TENS.get(before)
            if base:
                out.add(base * _OTHER_WORDS[word])
    return out


_SI_PREFIXED = re.compile(r"(\d+(?:\.\d+)?)\s?([µμunpmkg])([a-zω]{1,2})\b")
_SI_FACTORS = {"µ": 1e-6, "μ": 1e-6, "u": 1e-6, "n": 1e-9, "p": 1e-12, "m": 1e-3, "k": 1e3, "g": 1e9}
_TIMES_TEN = re.compile(r"(\d+(?:\.\d+)?)\s*(?:x|\*|×)\s*10\s*\^\s*\(?([-+−]?\d+)")


def _scaled_numbers(text: str) -> set[float]:
    """Numbers with a written scale: percent, magnitude words, SI prefixes ("50mH"), "5 x 10^-12"."""
    factors = dict(_SCALES)
    out: set[float] = set()
    for match in _SCALED.finditer(text):
        body, unit = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        try:
            out.add(float(body.replace(",", "")) * factors[unit])
        except ValueError:
            continue
    for match in _SI_PREFIXED.finditer(text):
        out.add(float(match.group(1)) * _SI_FACTORS[match.group(2)])
    for match in _TIMES_TEN.finditer(text) if "^" in text else ():  # the pattern needs a caret
        try:
            out.add(float(match.group(1)) * 10.0 ** int(match.group(2).replace("−", "-")))
        except (ValueError, OverflowError):
            continue
    return out


def _dates(text: str, words: Sequence[str] | None = None) -> tuple[set[tuple[int, int, int | None]],
                                                                  set[tuple[int, int]]]:
    """(month, day, year or None) stated in the query, and (month, year) pairs.

    ``words`` (the query's ``_WORD`` tokens), when given, lets a query without a month name skip
    the three month patterns: each matches a month name between word boundaries, i.e. a whole token.
    """
    dates: set[tuple[int, int, int | None]] = set()
    named = words is None or not _MONTHS.keys().isdisjoint(words)
    for match in _MONTH_DAY.finditer(text) if named else ():
        dates.add((_MONTHS[match.group(1)], int(match.group(2)), _int(match.group(3))))
    for match in _DAY_MONTH.finditer(text) if named else ():
        dates.add((_MONTHS[match.group(2)], int(match.group(1)), _int(match.group(3))))
    for match in _YMD.finditer(text):
        dates.add((int(match.group(2)), int(match.group(3)), int(match.group(1))))
    for match in _DMY_OR_MDY.finditer(text):
        a, b, year = int(match.group(1)), int(match.group(3)), _year(match.group(4))
        if year is None and match.group(2) != "/":
            continue  # "9.8" or "3-4" is not a date; "3/7" is
        dates.update({(a, b, year), (b, a, year)})  # month/day or day/month: both readings
    month_years = {(_MONTHS[m.group(1)], int(m.group(2))) for m in (_MONTH_YEAR.finditer(text) if named else ())}
    month_years.update((m, y) for m, _, y in dates if y is not None)
    return {d for d in dates if 1 <= d[0] <= 12 and 1 <= d[1] <= 31}, month_years


def _int(text: str | None) -> int | None:
    return int(text) if text else None


def _year(text: str | None) -> int | None:
    if not text:
        return None
    return int(text) + 2000 if len(text) == 2 else int(text)


def _times(text: str) -> set[tuple[int, int, int]]:
    """(hour, minute, second) in 24-hour form for every clock time the query states."""
    out: set[tuple[int, int, int]] = set()
    for match in _CLOCK.finditer(text):
        hour, minute, second = int(match.group(1)), int(match.group(2) or 0), int(match.group(3) or 0)
        suffix = (match.group(4) or "").replace(" ", "").replace(".", "")
        if match.group(2) is None and not suffix:
            continue  # a bare number is not a time
        if hour > 23 or minute > 59 or second > 59:
            continue
        if suffix.startswith("p") or (hour < 12 and suffix.endswith(("afternoon", "evening", "night"))):
            hour = hour % 12 + 12
        elif suffix.startswith("a") and hour == 12:
            hour = 0
        out.add((hour, minute, second))
    if re.search(r"\bnoon\b|\bmidday\b", text):
        out.add((12, 0, 0))
    if re.search(r"\bmidnight\b", text):
        out.add((0, 0, 0))
    return out


# -- the rules ---------------------------------------------------------------------------------------------

Rule = Callable[[Any, Mapping[str, Any], QueryContext], bool]


def _numbers_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def as_number(value: Any) -> float | None:
    """A finite number read from a number or a numeric string (``"1,000"``); None otherwise (bools too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value.replace(",", ""))
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def default_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """The parameter's schema ``default``, or the value its description states after "default"."""
    if "default" in schema and same_value(value, schema["default"]):
        return True
    description = schema.get("description")
    if not isinstance(description, str):
        return False
    folded = description.casefold()
    start = folded.find("default")
    if start == -1:
        return False
    clause = folded[start:start + 80]
    end = clause.find(". ")
    clause = clause[:end] if end > 0 else clause
    if isinstance(value, str):
        needle = " ".join(value.casefold().split())
        return bool(needle) and contains_word(clause, needle)
    number = as_number(value)
    if number is None:
        return False
    stated = number_tokens(clause) | _word_numbers(_WORD.findall(clause))
    return any(_numbers_equal(number, float(n)) for n in stated)


def same_value(value: Any, default: Any) -> bool:
    """``value`` is ``default``: strings up to case and outer space, numbers by value (never a numeric string)."""
    if isinstance(value, str) and isinstance(default, str):
        return value.casefold().strip() == default.casefold().strip()
    a, b = as_number(value), as_number(default)
    if a is not None and b is not None and not isinstance(value, str) and not isinstance(default, str):
        return _numbers_equal(a, b)
    return type(value) is type(default) and value == default


def format_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """The value's words, joined, equal a run of whole query words, joined (case/punctuation/space ignored)."""
    if not isinstance(value, str):
        return False
    return _prepared(ctx).plain.holds_joined("".join(_WORD.findall(value.casefold())))


_CODES: dict[str, tuple[str, ...]] = {
    # ISO 4217 currencies: the code and how a request names the currency
    "usd": ("us dollar", "u.s. dollar", "american dollar", "dollar"), "eur": ("euro",),
    "gbp": ("british pound", "pound sterling", "pound", "sterling"), "jpy": ("japanese yen", "yen"),
    "cad": ("canadian dollar",), "aud": ("australian dollar",), "chf": ("swiss franc",),
    "cny": ("chinese yuan", "yuan", "renminbi"), "inr": ("indian rupee", "rupee"), "mxn": ("mexican peso",),
    "krw": ("korean won", "won"), "brl": ("brazilian real",), "rub": ("russian ruble", "ruble"),
    "sek": ("swedish krona",), "nzd": ("new zealand dollar",), "sgd": ("singapore dollar",),
    "hkd": ("hong kong dollar",), "zar": ("south african rand", "rand"),
    # US state postal codes
    "al": ("alabama",), "ak": ("alaska",), "az": ("arizona",), "ar": ("arkansas",), "ca": ("california",),
    "co": ("colorado",), "ct": ("connecticut",), "de": ("delaware",), "fl": ("florida",), "ga": ("georgia",),
    "hi": ("hawaii",), "id": ("idaho",), "il": ("illinois",), "in": ("indiana",), "ia": ("iowa",),
    "ks": ("kansas",), "ky": ("kentucky",), "la": ("louisiana",), "me": ("maine",), "md": ("maryland",),
    "ma": ("massachusetts",), "mi": ("michigan",), "mn": ("minnesota",), "ms": ("mississippi",),
    "mo": ("missouri",), "mt": ("montana",), "ne": ("nebraska",), "nv": ("nevada",), "nh": ("new hampshire",),
    "nj": ("new jersey",), "nm": ("new mexico",), "ny": ("new york",), "nc": ("north carolina",),
    "nd": ("north dakota",), "oh": ("ohio",), "ok": ("oklahoma",), "or": ("oregon",), "pa": ("pennsylvania",),
    "ri": ("rhode island",), "sc": ("south carolina",), "sd": ("south dakota",), "tn": ("tennessee",),
    "tx": ("texas",), "ut": ("utah",), "vt": ("vermont",), "va": ("virginia",), "wa": ("washington",),
    "wv": ("west virginia",), "wi": ("wisconsin",), "wy": ("wyoming",), "dc": ("district of columbia",),
}


def code_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A standard code whose name the query states (ISO 4217 currencies, US state postal codes).

    "British Pounds" -> ``GBP``, "Sacramento, California" -> ``CA``: world knowledge, not a dataset's.
    """
    if not isinstance(value, str) or not 2 <= len(value.strip()) <= 3:
        return False
    names = _CODES.get(value.strip().casefold())
    if not names:
        return False
    stems = _prepared(ctx).stems
    return any(stems.holds([_stem(w) for w in _WORD.findall(name)]) for name in names)


def inflection_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """Like ``format``, with plurals reduced to their singular: ``teaspoon`` ~ "2 teaspoons"."""
    if not isinstance(value, str):
        return False
    return _prepared(ctx).stems.holds([_stem(w) for w in _WORD.findall(value.casefold())])


def unit_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A unit the query names in another form: ``m`` ~ "meters", ``centimeters`` ~ "20cm", ``°C`` ~ "celsius"."""
    if not isinstance(value, str) or len(value) > 20:
        return False
    unit = _unit_of(value)
    return unit is not None and unit in _prepared(ctx).units


_CONNECTOR = r"\s*(?:\bfor\b|=|:|->|\brepresents\b|\bmeans\b|\bcorresponds to\b|\bis\b|\bindicates\b)\s*"


def described_code_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A code the parameter's description explains with words the query states.

    "1 for Bangkok, 2 for Chiang Mai" (or "'2' represents ironing service") grounds ``2`` in a
    request about ironing: the description maps the code to a label, the query grounds the label.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)) or len(str(value)) > 12:
        return False
    description = schema.get("description")
    if not isinstance(description, str) or not str(value).strip():
        return False
    code, folded = str(value).casefold(), description.casefold()
    if code not in folded:  # the pattern below needs the code verbatim: skip compiling it
        return False
    pattern = re.compile(rf"(?<![\w.])['\"]?{re.escape(code)}['\"]?(?![\w.]){_CONNECTOR}"
                         r"['\"]?([^,.;:()'\"]+)")
    for match in pattern.finditer(folded):
        label = re.split(r"\s(?:and|or|to)\s", match.group(1))[0]
        words = [w for w in _WORD.findall(label) if w not in ("the", "a", "an")][:4]
        if words and _prepared(ctx).stems.holds([_stem(w) for w in words]):
            return True
    return False


def template_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """The description's vocabulary filled with the request's words: ``track:Shape of You artist:Ed Sheeran``.

    Every word is in the query or the parameter's description, at least one comes from the
    description only, and at least half come from the query (a value copied from the
    description's example alone is still flagged).
    """
    if not isinstance(value, str):
        return False
    description = schema.get("description")
    words = [_stem(w) for w in _WORD.findall(value.casefold())]
    if len(words) < 2 or not isinstance(description, str):
        return False
    described = {_stem(w) for w in _WORD.findall(description.casefold())}
    stated = _prepared(ctx).stems.set
    from_query = sum(w in stated for w in words)
    return (all(w in stated or w in described for w in words) and from_query * 2 >= len(words)
            and any(w in described and w not in stated for w in words))


def qualifier_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """``Head, Q[, Q]`` or ``Region/Name`` around a grounded head.

    ``Head, Q[, Q]``: at most two short (<= 2 words) qualifiers ("San Francisco, CA");
    ``Region/Name``: one alphabetic word, one slash, a grounded name ("Europe/London").
    """
    if isinstance(value, str) and value.count("/") == 1 and "," not in value:
        region, name = value.split("/")
        if region.isalpha() and name.strip():
            return ground_value(name.replace("_", " "), ctx)[0] or format_rule(name, schema, ctx)
    if not isinstance(value, str) or "," not in value:
        return False
    head, *rest = (part.strip() for part in value.split(","))
    if not head or not rest or len(rest) > 2 or any(not q or len(q.split()) > 2 for q in rest):
        return False
    return ground_value(head, ctx)[0] or format_rule(head, schema, ctx)


_VALUE_DATE = re.compile(r"^\s*(?:(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})|(\d{1,2})[-/.](\d{1,2})[-/.](\d{4}))"
                         r"(?:[t\s]+(.+?))?\s*$", re.IGNORECASE)
_VALUE_MONTH = re.compile(r"^\s*(?:(\d{4})[-/.](\d{1,2})|(\d{1,2})[-/.](\d{4}))\s*$")


def date_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A date (or year-month) whose month, day and year the query states in any common form."""
    if not isinstance(value, str):
        return False
    prepared = _prepared(ctx)
    match = _VALUE_DATE.match(value)
    if match is None:
        month_only = _VALUE_MONTH.match(value)
        if month_only is None:
            return False
        year = int(month_only.group(1) or month_only.group(4))
        month = int(month_only.group(2) or month_only.group(3))
        return (month, year) in prepared.month_years
    if match.group(1):
        readings = [(int(match.group(2)), int(match.group(3)), int(match.group(1)))]
    else:
        a, b, year = int(match.group(4)), int(match.group(5)), int(match.group(6))
        readings = [(a, b, year), (b, a, year)]
    clock = match.group(7)
    if clock is not None and not time_rule(clock.rstrip("z").strip(), schema, ctx):
        return False
    return any(_date_stated(m, d, y, prepared) for m, d, y in readings)


def _date_stated(month: int, day: int, year: int, prepared: _Prepared) -> bool:
    if (month, day, year) in prepared.dates:
        return True
    if (month, day, None) not in prepared.dates:
        return False
    return year in prepared.years or not prepared.years


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE_DAYS = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1}


def relative_date_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A date the query fixes relative to a full date it states.

    "today is 2023-10-01 ... tomorrow" (the anchor plus today/tomorrow/yesterday) or "next Monday"
    (the next one or two of a weekday the query names, after the anchor).
    """
    if not isinstance(value, str):
        return False
    match = _VALUE_DATE.match(value)
    if match is None or not match.group(1):
        return False
    prepared = _prepared(ctx)
    anchors = [d for d in prepared.dates if d[2] is not None]
    if not anchors or len(anchors) > 3:
        return False
    try:
        wanted = _date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return False
    words = set(prepared.words)
    offsets = {days for word, days in _RELATIVE_DAYS.items() if word in words}
    weekdays = [i for i, day in enumerate(_WEEKDAYS) if day in words]
    for month, day, year in anchors:
        try:
            anchor = _date(year, month, day)  # type: ignore[arg-type]
        except ValueError:
            continue
        delta = (wanted - anchor).days
        if delta in offsets:
            return True
        if any(0 < delta <= 14 and wanted.weekday() == weekday for weekday in weekdays):
            return True
    return False


_VALUE_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?\s*(am|pm|a\.m\.|p\.m\.)?\s*$", re.IGNORECASE)


def time_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """``HH:MM[:SS]`` (optionally am/pm) whose hour and minute the query states in any common form."""
    if not isinstance(value, str):
        return False
    match = _VALUE_TIME.match(value)
    if match is None:
        return False
    hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    suffix = (match.group(4) or "").casefold()
    if suffix.startswith("p") and hour < 12:
        hour += 12
    elif suffix.startswith("a") and hour == 12:
        hour = 0
    return (hour, minute, second) in _prepared(ctx).times


def number_word_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A number the query writes as a word ("two", "twenty five", "third", "a dozen")."""
    number = as_number(value)
    return number is not None and any(_numbers_equal(number, n) for n in _prepared(ctx).word_numbers)


def scaled_number_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext) -> bool:
    """A query number scaled by its written unit: "10%" -> 0.1, "1.2 million" -> 1200000."""
    number = as_number(value)
    return number is not None and any(_numbers_equal(number, n) for n in _prepared(ctx).scaled)


_RULES: dict[str, Rule] = {
    "default": default_rule, "format": format_rule, "inflection": inflection_rule, "qualifier": qualifier_rule,
    "date": date_rule, "time": time_rule, "number_word": number_word_rule, "scaled_number": scaled_number_rule,
    "unit": unit_rule, "code": code_rule, "described_code": described_code_rule, "template": template_rule,
    "relative_date": relative_date_rule,
}
assert set(_RULES) == set(ACCEPT_RULES)


# -- applying them -----------------------------------------------------------------------------------------

Miss = tuple[str, Any, Union[float, None]]


def calibrate(misses: Iterable[Miss], ctx: QueryContext, schema: Mapping[str, Any] | None,
              rules: RuleSet) -> tuple[dict[str, str], list[Miss]]:
    """Split the paper's misses into ``{param: accepting rule}`` and the misses no enabled rule accepts."""
    accepted: dict[str, str] = {}
    remaining: list[Miss] = []
    for miss in misses:
        param, value = miss[0], miss[1]
        sub = schema.get(param) if schema is not None else None
        rule = _accepting_rule(value, sub if isinstance(sub, Mapping) else {}, ctx, rules)
        if rule is None:
            remaining.append(miss)
        else:
            accepted[param] = rule
    return accepted, remaining


def _accepting_rule(value: Any, schema: Mapping[str, Any], ctx: QueryContext, rules: RuleSet) -> str | None:
    if "default" in rules and default_rule(value, schema, ctx):
        return "default"
    if isinstance(value, (list, tuple)):
        items = schema.get("items")
        item_schema = items if isinstance(items, Mapping) else {}
        enum = item_schema.get("enum")
        enum = enum if isinstance(enum, (list, tuple)) else ()
        names: list[str] = []
        for item in value:
            if not ground_value(item, ctx, enum)[3]:
                continue  # exact, or an assumption (bool, null, an unstated enum value, ...)
            name = _accepting_rule(item, item_schema, ctx, rules)
            if name is None:
                return None
            names.append(name)
        return names[0] if names else None
    for name in _RULES_FOR.get(type(value), ACCEPT_RULES[1:]):
        if name in rules and _RULES[name](value, schema, ctx):
            return name
    return None


_NUMBER_RULES = ("number_word", "scaled_number")
_RULES_FOR: dict[type, tuple[str, ...]] = {
    int: tuple(r for r in ACCEPT_RULES[1:] if r in _NUMBER_RULES or r == "described_code"),
    float: tuple(r for r in ACCEPT_RULES[1:] if r in _NUMBER_RULES),
    bool: (),
}
"""The rules after ``default`` that can accept a value of this exact type, in order (every other rule
returns False for it at once: most read only strings); a type not listed tries them all."""
