"""The calibrated cascade's shortcuts decide exactly what its general rules decide.

Calibrated stage 3 runs on every gated decision of the runtime guard, so it takes shortcuts: the
prepared query builds each part on first read (ASCII words without the regex, month patterns only
for a query naming a month, number words only when it has one), ``type_conflicts`` looks common
(type, value) pairs up in a table, ``_accepting_rule`` skips the rules that cannot read a value's
type, and the duplicate check skips serialising arguments when no two calls share a name. Each
shortcut is compared here with the general path it replaces: on hand-picked edge cases, and over
a sample of gold calls and perturbations of BFCL's python categories (reports and guard decisions
with the shortcuts on vs off).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from saag_opt.data.bfcl import BFCL_VERSION, bfcl_available, load_bfcl
from saag_opt.data.perturb import gold_calls, perturbed_calls
from saag_opt.model import Registry, ToolCall, ToolSpec
from saag_opt.runtime import Guard
from saag_opt.saag import calibration, cascade, check_calls, clear_caches, flags
from saag_opt.saag.calibration import _PARTS, _RULES, _Prepared, _Run, _stem
from saag_opt.saag.flags import _JSON_TYPES
from saag_opt.saag.grounding import query_context
from saag_opt.saag.modes import ACCEPT_RULES
from tests.conftest import requires

QUERIES = [
    "",
    "Book 2 tickets for Paris, France on April 11th, 2023 at 7 PM; budget 10% of $1.2 million.",
    "today is 2023-10-01, what about next monday? twenty five services, the cities of texas",
    "Convert 50mH and 100µF, 5 x 10^-12 meters, 3/7/2023 noon or midnight, a dozen eggs",
    "明日の東京の天気 and 5k steps in 20cm increments, British Pounds to USD",
    "x**2 + 3x_y, mc-donald's: 10%/5^2 @ #tag_line __init__ a.b.c (e.g.) [1,000] tab\there",
]

VALUES: list[Any] = ["2", "Paris, France", "2023-04-11", "19:00", "gbp", "tx", "meters", "x", "10%", 2, 25, 0.1,
                     1200000, 5e-12, 0.05, 12, True, False, None, {"a": 1}, 3, 1, 0, -1.5, "1", "ca"]


@pytest.mark.parametrize("query", QUERIES)
def test_every_part_of_the_prepared_query_reads_as_if_built_eagerly(query: str) -> None:
    text = query_context(query).text
    lazy = _Prepared(text)
    words = calibration._WORD.findall(text)
    stems = _Run([_stem(w) for w in words])  # the general stemmer on every word
    assert (lazy.stems.joined, lazy.stems.bounds, lazy.stems.set) == (stems.joined, stems.bounds, stems.set)
    assert lazy.plain.joined == "".join(words) and lazy.plain.set == set(words)
    starts, ends, pos = set(), set(), 0  # word boundaries counted one word at a time
    for word in words:
        starts.add(pos)
        pos += len(word)
        ends.add(pos)
    assert starts | ends == lazy.plain.bounds - ({0} if not words else set())
    assert (lazy.dates, lazy.month_years) == calibration._dates(text)
    assert lazy.times == calibration._times(text)
    assert lazy.units == calibration._units(text, words)
    assert lazy.word_numbers == calibration._word_numbers(words)
    assert lazy.scaled == calibration._scaled_numbers(text)
    assert lazy.years == {int(y) for y in calibration._YEAR.findall(text)}
    assert lazy.words == words
    assert set(_PARTS) <= set(vars(lazy))  # every part is stored after its first read
    with pytest.raises(AttributeError):
        lazy.no_such_part  # noqa: B018


def test_ascii_words_split_like_the_word_pattern() -> None:
    rng = random.Random(0)
    alphabet = "".join(map(chr, range(128)))
    texts = [alphabet, *("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(500))]
    for text in texts:
        assert calibration._words(text) == calibration._WORD.findall(text), text
    assert calibration._words("naïve café 東京 x_y") == calibration._WORD.findall("naïve café 東京 x_y")


def test_month_and_number_word_shortcuts_agree_with_the_full_scan() -> None:
    for query in QUERIES + ["no month here, 3/7 or 2023-04-11", "the 10th of march", "sept. 5, 2020 and twenty one",
                          "two hundred and a dozen, the third of five thousand"]:
        text = query_context(query).text
        words = calibration._WORD.findall(text)
        assert calibration._dates(text, words) == calibration._dates(text)
        assert calibration._word_numbers(words) == calibration._scan_word_numbers(words)


def test_the_type_table_agrees_with_the_general_type_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = [*_JSON_TYPES, "String", "any", ["integer", "null"], None]
    values: list[Any] = ["5", "", 5, 5.0, True, None, ["x"], ("x",), {"k": 1}]
    schema = {f"p{i}": {"type": t} for i, t in enumerate(declared)}
    for value in values:
        arguments = {name: value for name in schema}
        fast = flags.type_conflicts(arguments, schema)
        with monkeypatch.context() as patch:
            patch.setattr(flags, "_TYPE_AGREES", frozenset())
            assert flags.type_conflicts(arguments, schema) == fast, value


@pytest.mark.parametrize("kind", [int, float, bool])
def test_rules_skipped_for_a_type_never_accept_it(kind: type) -> None:
    skipped = [name for name in ACCEPT_RULES[1:] if name not in calibration._RULES_FOR[kind]]
    schemas: list[dict[str, Any]] = [{}, {"description": "1 for Bangkok, 2 for Chiang Mai, 0.1 for ten, true for yes"}]
    for value in (v for v in VALUES if type(v) is kind):
        for query in QUERIES:
            for schema in schemas:
                ctx = query_context(query)
                assert not [r for r in skipped if _RULES[r](value, schema, ctx)], (value, query)


def test_duplicate_check_without_shared_names_skips_nothing() -> None:
    registry = Registry([ToolSpec("f", parameters={"type": "object", "properties": {"a": {"type": "integer"}}}),
                         ToolSpec("g", parameters={"type": "object", "properties": {"a": {"type": "integer"}}})])
    distinct = check_calls([ToolCall("f", {"a": 1}), ToolCall("g", {"a": 1})], registry, "a 1", grounding="calibrated")
    repeated = check_calls([ToolCall("f", {"a": 1}), ToolCall("f", {"a": 1})], registry, "a 1", grounding="calibrated")
    assert distinct.passed and not repeated.passed
    assert repeated.calls[1].stage_reached == 3 and "repeats call 1" in " ".join(repeated.corrections)


def _slow_paths(patch: pytest.MonkeyPatch) -> None:
    """Turn every shortcut off: eager prepared query, no type table, every rule for every type."""
    patch.setattr(flags, "_TYPE_AGREES", frozenset())
    patch.setattr(calibration, "_RULES_FOR", {})
    eager_init = _Prepared.__init__

    def eager(self: _Prepared, text: str) -> None:
        eager_init(self, text)
        for part in _PARTS:
            getattr(self, part)
    patch.setattr(_Prepared, "__init__", eager)
    patch.setattr(cascade, "_flag_duplicates", _full_duplicate_check)


def _full_duplicate_check(items: Any, reports: Any) -> Any:
    """``_flag_duplicates`` without its shortcut: every call's arguments serialised."""
    return cascade._mark_repeats([cascade.split_call(call) for call in items], reports)


def _bfcl_predictions() -> Iterator[tuple[Any, tuple[ToolCall, ...]]]:
    for category in ("simple_python", "multiple", "parallel", "parallel_multiple"):
        for example in load_bfcl(category):
            yield example, tuple(gold_calls(example))
            for _, calls in perturbed_calls(example, random.Random(f"0:{example.id}")):
                yield example, tuple(calls)


def _openai(example: Any, calls: tuple[ToolCall, ...]) -> tuple[list[Any], list[Any], list[Any]]:
    tools = [tool.to_openai_tool() for tool in example.registry]
    tool_calls = [{"id": f"call_{i}", "type": "function",
                   "function": {"name": getattr(example.registry.get(c.name), "safe_name", c.name),
                                "arguments": json.dumps(dict(c.arguments))}} for i, c in enumerate(calls)]
    return [dict(m) for m in example.messages], tools, tool_calls


def _everything(predictions: list[Any]) -> list[Any]:
    """Every calibrated report (with corrections) and every cascade-only guard decision."""
    clear_caches()
    reports = [check_calls(calls, ex.registry, ex.query, grounding="calibrated").to_dict() for ex, calls in predictions]
    guard = Guard.load(reviewer=None, mechanism="none", cache=False)
    decisions = []
    for ex, calls in predictions:
        decision = guard.review(*_openai(ex, calls)).to_dict()
        decision.pop("latency_s")
        decisions.append(decision)
    clear_caches()
    return [reports, decisions]


@requires(None if bfcl_available() else f"BFCL data is not available (pip install --no-deps bfcl-eval=={BFCL_VERSION})")
def test_shortcuts_change_no_report_and_no_guard_decision_on_bfcl(monkeypatch: pytest.MonkeyPatch) -> None:
    predictions = random.Random(0).sample(list(_bfcl_predictions()), 1500)  # as many as the guard bench
    fast = _everything(predictions)
    with monkeypatch.context() as patch:
        _slow_paths(patch)
        slow = _everything(predictions)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert {d["action"] for d in fast[1]} == {"allow", "block"}  # both kinds of decision were compared
