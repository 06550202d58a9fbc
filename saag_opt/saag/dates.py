"""Calendar dates however they are written: a call's ``2024-05-01`` is the text's "the 1st of May 2024".

The data-flow policy (``saag.flow``) and the marker rules (``saag.injection``) ask where a value came
from by finding it in the user's words and in tool results. A date argument is written as an ISO date
(``2024-05-01``, ``2024-05-01 09:00``) while people and documents write "May 1st", "1 May 2024", "from
the 1st to the 5th of May": compared as text it is found nowhere and looks composed by the agent. Here
both sides become ``(year, month, day)``, the year ``None`` where the text gives none (it then matches
any year). English month names only; no relative dates ("tomorrow" is no date here). No I/O.
"""

from __future__ import annotations

import re
from functools import lru_cache

from saag_opt.saag.caches import register_cache

__all__ = ["Date", "date_of", "dates_in", "mentions"]

Date = tuple[int | None, int, int]
"""``(year, month, day)``; ``year`` None where the text does not say."""

_MONTHS = {name: i for i, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), start=1) for name in names}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>(?:19|20)\d\d))?"
_TO = r"\s*(?:to|until|till|through|thru|and|-|\u2013)\s*(?:the\s+)?"
_ISO = re.compile(r"(?<![\d-])(?P<year>(?:19|20)\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)(?![\d-])")
_DAY_MONTH = re.compile(r"\b(?:(?P<first>[0-3]?\d)(?:st|nd|rd|th)?" + _TO + r")?" + _DAY + r"\s+(?:of\s+)?"
                        + _MONTH + r"\b" + _YEAR, re.IGNORECASE)
_MONTH_DAY = re.compile(r"\b" + _MONTH + r"\s+(?:the\s+)?" + _DAY + r"\b"
                        r"(?:" + _TO + r"(?P<last>[0-3]?\d)(?:st|nd|rd|th)?\b(?!\s+(?:of\s+)?[a-z]))?" + _YEAR,
                        re.IGNORECASE)
_VALUE = re.compile(r"\s*(?P<year>(?:19|20)\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)(?:[T ][\d:.]+(?:Z|[+-]\d\d:?\d\d)?)?\s*")


def _valid(year: int | None, month: int, day: int) -> Date | None:
    return (year, month, day) if 1 <= month <= 12 and 1 <= day <= 31 else None


def date_of(value: str) -> Date | None:
    """The date an argument value is, when all of it is an ISO date or date-time (``2024-05-01 09:00``)."""
    m = _VALUE.fullmatch(value)
    return _valid(int(m["year"]), int(m["month"]), int(m["day"])) if m is not None else None


@lru_cache(maxsize=8192)
def dates_in(text: str) -> frozenset[Date]:
    """Every date ``text`` mentions: ISO dates, "May 1st", "1 May 2024", ranges ("the 1st to the 5th of May")."""
    found: set[Date | None] = set()
    for m in _ISO.finditer(text):
        found.add(_valid(int(m["year"]), int(m["month"]), int(m["day"])))
    for pattern, extra in ((_DAY_MONTH, "first"), (_MONTH_DAY, "last")):
        for m in pattern.finditer(text):
            if m["month"] == "may":
                continue  # the verb ("you may 2 ..."); the month is written May
            month = _MONTHS[m["month"].casefold()]
            year = int(m["year"]) if m["year"] else None
            found.add(_valid(year, month, int(m["day"])))
            if m[extra]:
                found.add(_valid(year, month, int(m[extra])))
    found.discard(None)
    return frozenset(d for d in found if d is not None)


register_cache(dates_in.cache_clear)


def mentions(dates: frozenset[Date], date: Date) -> bool:
    """``date`` is one of ``dates`` (a mention without a year matches any year)."""
    year, month, day = date
    return (year, month, day) in dates or (None, month, day) in dates
