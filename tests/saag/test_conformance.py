"""Stage 1: FNEM and NCS, with hand-computed values."""

from __future__ import annotations

import pytest

from saag_opt.model import Registry, ToolSpec
from saag_opt.saag.conformance import fnem, name_trigrams, ncs, resolve_tool, token_jaccard


@pytest.fixture()
def registry() -> Registry:
    return Registry([ToolSpec("get_weather"), ToolSpec("get_stock_price"), ToolSpec("math.factorial")])


@pytest.mark.parametrize("name", [None, "", "   ", 5, 3.5, ["get_weather"], {"name": "x"}, True])
def test_fnem_is_minus_one_for_unparsable_names(registry: Registry, name: object) -> None:
    assert fnem(name, registry) == -1


def test_fnem_zero_for_unregistered_and_one_for_registered(registry: Registry) -> None:
    assert fnem("get_forecast", registry) == 0
    assert fnem("Get_Weather", registry) == 0  # exact match is case-sensitive
    assert fnem("get_weather", registry) == 1


def test_openai_safe_spelling_counts_as_registered(registry: Registry) -> None:
    assert fnem("math_factorial", registry) == 1
    tool = resolve_tool("math_factorial", registry)
    assert tool is not None and tool.name == "math.factorial"


def test_trigrams_are_lowercase_and_short_names_are_one_gram() -> None:
    assert name_trigrams("AbCd") == {"abc", "bcd"}
    assert name_trigrams("Ab") == {"ab"}
    assert name_trigrams("abc") == {"abc"}


def test_token_jaccard_lowercases_whitespace_tokens() -> None:
    assert token_jaccard("Get Weather now", "get weather") == pytest.approx(2 / 3)
    assert token_jaccard("a b", "B c") == pytest.approx(1 / 3)
    assert token_jaccard("get_weather", "get weather") == 0.0
    assert token_jaccard("", "") == 0.0


def test_ncs_hand_computed(registry: Registry) -> None:
    # "get_forecast" vs "get_weather": LCS = "get_" + "eat" = 7, lengths 12 + 11, length ratio < 1.5
    # so WRatio = Indel ratio = 1 - (23 - 14) / 23. vs "get_stock_price": LCS 7 of 27 -> 1 - 13/27.
    # Jaccard of single different tokens = 0. "math.factorial" shares no trigram.
    score, nearest = ncs("get_forecast", registry)
    assert nearest == "get_weather"
    assert score == pytest.approx(0.6 * (1 - 9 / 23))


def test_ncs_jaccard_term_and_raw_case_wratio() -> None:
    # "ab" and "AB" share the single gram "ab"; WRatio on raw strings is 0 (no common character);
    # lowercased tokens are equal, so Jaccard = 1 and NCS = 0.4.
    assert ncs("ab", Registry([ToolSpec("AB")])) == (pytest.approx(0.4), "AB")


def test_ncs_without_candidates_is_zero(registry: Registry) -> None:
    assert ncs("xyz", registry) == (0.0, None)
    assert ncs("zz", registry) == (0.0, None)  # a short name is one gram: "zz" matches nothing
    assert ncs(None, registry) == (0.0, None)
    assert ncs("anything", Registry()) == (0.0, None)


def test_ncs_ties_keep_the_earlier_registry_entry() -> None:
    tied = Registry([ToolSpec("get_a"), ToolSpec("get_b")])
    assert ncs("get_c", tied)[1] == "get_a"
