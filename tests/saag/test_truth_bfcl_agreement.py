"""check_truth agrees with BFCL's own ast_checker: the README's claim (every call, counted), and a floor of
99.5% per category (docs/design.md §4) that names the disagreements.

Every example of the claimed categories gets the gold call and every applicable perturbation
(saag_opt.data.perturb); both checkers score the same calls. BFCL sees the original (dotted) names,
resolved through the registry, and a prompt-style model name, so it compares names exactly as our
resolution does. Irrelevance uses BFCL's rule (eval_runner: success iff the output decodes to no
call, ``utils.is_empty_output``; an unparsable call makes the whole output undecodable).

Java and JavaScript are not claimed: BFCL checks them on string-encoded values ("60L", "true"),
check_truth on native JSON values (module docstring of saag_opt.saag.truth).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import random
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saag_opt.data.bfcl import BFCL_VERSION, load_bfcl
from saag_opt.data.perturb import gold_calls, perturbed_calls
from saag_opt.model import Example, ToolCall
from saag_opt.saag.truth import check_truth
from tests.bfcl_stub import MODEL_NAME, load_ast_checker  # noqa: E402
from tests.conftest import requires

_LOADED = load_ast_checker()
pytestmark = requires(None if _LOADED else f"bfcl-eval is not installed (pip install --no-deps bfcl-eval=={BFCL_VERSION})")
if _LOADED is not None:
    AST_CHECKER, LANGUAGE = _LOADED
    from bfcl_eval.utils import is_empty_output  # noqa: E402 - needs the stub installed first

NON_LIVE = ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"]
LIVE = ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance"]
MIN_AGREEMENT = 0.995
README = Path(__file__).resolve().parents[2] / "README.md"
CLAIM = re.compile(r"agrees with BFCL's own `ast_checker` on every one of ([\d,]+) gold and perturbed calls")
"""The README's headline sentence (whitespace folded); the test below measures it."""


@cache
def _raw_functions(category: str) -> dict[str, list[dict[str, Any]]]:
    """BFCL's own function docs (Gorilla types), which its checker reads."""
    spec = importlib.util.find_spec("bfcl_eval")
    assert spec is not None and spec.submodule_search_locations
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / f"BFCL_v4_{category}.json"
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {row["id"]: row["function"] for row in rows}


def bfcl_valid(calls: list[ToolCall], example: Example) -> bool:
    """BFCL's verdict for these calls, as its eval runner would reach it."""
    if example.expect == "no_call":
        if any(c.name is None for c in calls):  # the output does not decode
            return True
        return bool(is_empty_output([{c.name: dict(c.arguments)} for c in calls]))
    if not calls or any(c.name is None for c in calls):
        return False  # decoder failure / empty output: BFCL marks the entry invalid
    output = [{example.registry.resolve(c.name) or c.name: copy.deepcopy(dict(c.arguments))} for c in calls]
    result = AST_CHECKER(_raw_functions(example.category)[example.id], output,
                         [dict(g) for g in example.gold or ()], LANGUAGE.PYTHON, example.category, MODEL_NAME)
    return bool(result["valid"])


@cache
def _agreement(category: str) -> tuple[int, int, Counter[bool], list[str]]:
    n = agree = 0
    outcomes: Counter[bool] = Counter()
    disagreements: list[str] = []
    for example in load_bfcl(category):
        for kind, calls in perturbed_calls(example, random.Random(f"agreement:{example.id}")):
            ref = bfcl_valid(calls, example)
            ours = check_truth(calls, example)
            n += 1
            outcomes[ref] += 1
            if ours.correct == ref:
                agree += 1
            else:
                disagreements.append(f"{example.id} [{kind}] bfcl={ref} ours={ours.reason} "
                                     f"calls={json.dumps([c.to_dict() for c in calls])[:300]}")
    return n, agree, outcomes, disagreements


@pytest.mark.parametrize("category", NON_LIVE + LIVE)
def test_check_truth_agrees_with_bfcl_ast_checker(category: str) -> None:
    n, agree, outcomes, disagreements = _agreement(category)
    rate = agree / n
    print(f"{category}: agreement {rate:.4%} on n={n} calls ({outcomes[True]} valid per BFCL)")
    assert n >= 3 * len(load_bfcl(category)), "every example must yield several calls"
    assert min(outcomes[True], outcomes[False]) >= 0.1 * n, f"sample too one-sided to test anything: {outcomes}"
    assert rate >= MIN_AGREEMENT, (f"{category}: agreement {rate:.4%} < {MIN_AGREEMENT:.1%} on n={n}; "
                                   "disagreements:\n" + "\n".join(disagreements[:40]))


def test_the_readme_agreement_claim_is_what_is_measured() -> None:
    claim = CLAIM.search(" ".join(README.read_text(encoding="utf-8").split()))
    assert claim is not None, f"README.md no longer states the agreement claim this test checks ({CLAIM.pattern})"
    claimed = int(claim.group(1).replace(",", ""))
    results = [_agreement(category) for category in NON_LIVE + LIVE]
    n, agree = sum(r[0] for r in results), sum(r[1] for r in results)
    disagreements = [line for r in results for line in r[3]]
    assert n == claimed, f"README claims {claimed:,} calls; the {len(results)} categories it covers give {n:,}"
    assert agree == n, f"{n - agree} of {n:,} calls disagree with ast_checker:\n" + "\n".join(disagreements[:40])


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 12) | st.sampled_from([0.0, 1.5, 2.0, 5.0, 10.0])
    | st.sampled_from(["", " ", "x", "USD", "New York", "2024-01-01", "true", "10"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "unit", "name"]), inner,
                                                                  max_size=2),
    max_leaves=6,
)


def _variants(value: Any) -> st.SearchStrategy[Any]:
    """Values near a gold value: itself, re-typed, re-cased, truncated, or arbitrary JSON."""
    near: list[Any] = [value]
    if isinstance(value, str):
        near += [value.upper(), value + "!", [value], value.replace(" ", "_")]
    elif isinstance(value, bool):
        near += [not value, int(value), str(value).lower()]
    elif isinstance(value, (int, float)):
        near += [float(value), int(value), str(value), value + 1]
    elif isinstance(value, list):
        near += [value[:-1], list(reversed(value)), [str(x) for x in value], tuple(value)]
    elif isinstance(value, dict):
        near += [{k: v for k, v in list(value.items())[:-1]}, {**value, "extra": 1}]
    return st.sampled_from(near) | _JSON


@cache
def _fuzz_pool() -> list[Example]:
    pool = [ex for cat in ("simple_python", "multiple", "parallel_multiple", "live_simple", "live_multiple")
            for ex in load_bfcl(cat)]
    return [ex for ex in pool if any(next(iter(g.values())) for g in ex.gold or ())]


@st.composite
def _fuzzed(draw: st.DrawFn) -> tuple[Example, list[ToolCall]]:
    example = draw(st.sampled_from(_fuzz_pool()))
    calls = gold_calls(example)
    index = draw(st.integers(0, len(calls) - 1))
    params = next(iter(example.gold[index].values()))  # type: ignore[index]
    if not params:
        return example, calls
    param = draw(st.sampled_from(sorted(params)))
    acceptable = [v for v in params[param] if v != ""] or [""]
    value = draw(st.sampled_from(acceptable).flatmap(_variants))
    calls[index] = ToolCall(calls[index].name, {**calls[index].arguments, param: value})
    return example, calls


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(_fuzzed())
def test_fuzzed_values_get_the_same_verdict_as_bfcl(case: tuple[Example, list[ToolCall]]) -> None:
    example, calls = case
    assert check_truth(calls, example).correct == bfcl_valid(calls, example), (
        example.id, [c.to_dict() for c in calls], check_truth(calls, example).reason)
