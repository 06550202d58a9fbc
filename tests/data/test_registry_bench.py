"""Registry-size benchmark builder: exact sizes, gold kept, no name clashes, seeded, confusable."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from saag_opt.data.jsonl import load_bfcl_jsonl
from saag_opt.data.registry_bench import (
    build_registry_benchmark,
    function_pool,
    gold_name,
    is_single_call,
    mean_similarity,
)
from saag_opt.model import Example, Registry, ToolSpec

SHIPPED_BFCL = Path(__file__).resolve().parents[2] / "datasets" / "bfcl.jsonl"


@pytest.fixture(scope="module")
def source() -> list[Example]:
    return load_bfcl_jsonl(SHIPPED_BFCL)


@pytest.fixture(scope="module")
def pool(source: list[Example]) -> list[ToolSpec]:
    return function_pool(source)


@pytest.fixture(scope="module")
def bench(source: list[Example], pool: list[ToolSpec]) -> dict[int, list[Example]]:
    return build_registry_benchmark(source, pool, (5, 10, 15), seed=0)


def test_only_single_call_examples_at_every_size(source: list[Example], bench: dict[int, list[Example]]) -> None:
    single = [e for e in source if is_single_call(e)]
    assert len(single) == 60  # simple_python + multiple; parallel and irrelevance are skipped
    for size, examples in bench.items():
        assert [e.id for e in examples] == [f"{e.id}@r{size}" for e in single]
        assert all(len(e.registry) == size for e in examples)


def test_gold_tool_and_question_are_kept_and_category_unchanged(source: list[Example],
                                                                 bench: dict[int, list[Example]]) -> None:
    by_id = {e.id: e for e in source}
    for examples in bench.values():
        for ex in examples:
            base = by_id[ex.id.split("@")[0]]
            name = gold_name(ex)
            assert ex.registry.get(name) == base.registry.get(name)
            assert (ex.category, ex.messages, ex.gold, ex.expect) == (base.category, base.messages, base.gold,
                                                                     base.expect)


def test_no_duplicate_names_or_safe_names(bench: dict[int, list[Example]]) -> None:
    for examples in bench.values():
        for ex in examples:
            assert len(set(ex.registry.names)) == len(ex.registry)
            assert len({t.safe_name for t in ex.registry}) == len(ex.registry)


def test_own_tools_come_first_and_smaller_registries_are_subsets(source: list[Example],
                                                                 bench: dict[int, list[Example]]) -> None:
    by_id = {e.id: e for e in source}
    for r5, r10, r15 in zip(bench[5], bench[10], bench[15]):
        assert set(r5.registry.names) <= set(r10.registry.names) <= set(r15.registry.names)
        own = set(by_id[r5.id.split("@")[0]].registry.names)
        assert own <= set(r5.registry.names)  # BFCL "multiple" has at most 4 tools


def test_gold_position_varies(bench: dict[int, list[Example]]) -> None:
    positions = {ex.registry.names.index(gold_name(ex)) for ex in bench[10]}
    assert len(positions) >= 6


def test_deterministic_for_a_seed_and_different_for_another(source: list[Example], pool: list[ToolSpec],
                                                            bench: dict[int, list[Example]]) -> None:
    again = build_registry_benchmark(list(reversed(source)), pool, (15, 5, 10), seed=0)
    assert {n: sorted((e.id, e.registry.names) for e in exs) for n, exs in again.items()} == \
        {n: sorted((e.id, e.registry.names) for e in exs) for n, exs in bench.items()}
    other = build_registry_benchmark(source, pool, (5, 10, 15), seed=1)
    assert [e.registry.names for e in other[15]] != [e.registry.names for e in bench[15]]


def test_distractors_are_more_similar_than_random(source: list[Example], pool: list[ToolSpec],
                                                  bench: dict[int, list[Example]]) -> None:
    rng = random.Random(7)
    randomised = []
    for ex in (e for e in source if is_single_call(e)):
        gold = ex.registry.get(gold_name(ex))
        others = [t for t in pool if t.name != gold.name and t.safe_name != gold.safe_name]
        randomised.append(ex.with_registry(Registry([gold, *rng.sample(others, 9)])))
    chosen, baseline = mean_similarity(bench[10]), mean_similarity(randomised)
    assert chosen > baseline + 10, (chosen, baseline)


def _tool(name: str, description: str = "") -> ToolSpec:
    return ToolSpec(name=name, description=description)


def _example(tools: list[ToolSpec], gold: str, id: str = "ex") -> Example:
    return Example(id, "simple", ({"role": "user", "content": "q"},), Registry(tools), ({gold: {}},))


def test_same_safe_name_and_paraphrases_are_never_distractors() -> None:
    gold = _tool("math.factorial", "Compute the factorial of a number.")
    pool = [_tool("math_factorial", "Factorial."),  # same OpenAI-safe name
            _tool("math.factorial", "another schema, same name"),
            _tool("math.factorials", "Compute the factorial of a number."),  # paraphrase (>= 95)
            *[_tool(f"tool_{i}", f"Does thing {i}.") for i in range(6)]]
    out = build_registry_benchmark([_example([gold], "math.factorial")], pool, sizes=(7,), seed=3)
    names = set(out[7][0].registry.names)
    assert names == {"math.factorial"} | {f"tool_{i}" for i in range(6)}


def test_pool_too_small_and_bad_sizes_raise() -> None:
    ex = _example([_tool("a")], "a", id="q1")
    with pytest.raises(ValueError, match=r"example 'q1': only 2 usable distractors for a registry of 5"):
        build_registry_benchmark([ex], [_tool("b"), _tool("c")], sizes=(3, 5))
    with pytest.raises(ValueError, match=r"registry sizes must be >= 1"):
        build_registry_benchmark([ex], [], sizes=(0, 5))
    stray = _example([_tool("a")], "zzz", id="q2")
    with pytest.raises(ValueError, match=r"example 'q2': gold call 'zzz' is not in its registry"):
        build_registry_benchmark([stray], [_tool("b")], sizes=(2,))


def test_function_pool_dedupes_by_name_keeping_the_first() -> None:
    a1, a2, b = _tool("a", "first"), _tool("a", "second"), _tool("b")
    pool = function_pool([_example([a1, b], "a", "x"), _example([a2], "a", "y")])
    assert pool == [a1, b]
