"""Properties of check_truth over generated examples and calls (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from saag_opt.data.perturb import gold_calls
from saag_opt.model import Example, Registry, ToolCall
from saag_opt.saag.truth import TruthResult, check_truth

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)

# BFCL type -> strategy for a gold value of that type.
TYPED_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(alphabet="abcXYZ 1-_.", min_size=1, max_size=10).filter(lambda s: s.strip(" -_.") != ""),
    "integer": st.integers(-50, 50),
    "float": st.floats(-100, 100, allow_nan=False),
    "boolean": st.booleans(),
    "array": st.lists(st.text(alphabet="abc", min_size=1, max_size=3), max_size=3),
    "any": st.text(alphabet="xyz", min_size=1, max_size=4),
}


@st.composite
def examples(draw: st.DrawFn, category: str | None = None) -> Example:
    """A registry of 1-3 functions (dotted names sometimes) and gold calls typed like their schema."""
    n_funcs = draw(st.integers(1, 3))
    names = [f"ns.fn{i}" if draw(st.booleans()) else f"fn{i}" for i in range(n_funcs)]
    functions, golds = [], []
    for name in names:
        types = draw(st.lists(st.sampled_from(sorted(TYPED_VALUES)), min_size=0, max_size=4))
        props = {f"p{j}": ({"type": t, "items": {"type": "string"}} if t == "array" else {"type": t})
                 for j, t in enumerate(types)}
        required = [p for p in props if draw(st.booleans())]
        functions.append({"name": name, "parameters": {"type": "dict", "properties": props, "required": required}})
        gold = {}
        for p, schema in props.items():
            values = draw(st.lists(TYPED_VALUES[schema["type"]], min_size=1, max_size=2))
            gold[p] = values + ([""] if p not in required and draw(st.booleans()) else [])
        golds.append({name: gold})
    cat = category or draw(st.sampled_from(["simple_python", "multiple", "parallel", "parallel_multiple"]))
    if cat == "simple_python":
        functions, golds = functions[:1], golds[:1]
    elif cat == "multiple":
        golds = [draw(st.sampled_from(golds))]
    return Example(id="gen", category=cat, messages=({"role": "user", "content": "q"},),
                   registry=Registry.from_dicts(functions), gold=tuple(golds))


def _calls(example: Example) -> st.SearchStrategy[list[ToolCall]]:
    names = st.sampled_from([*example.registry.names, *(t.safe_name for t in example.registry), "nope"]) | st.none()
    arguments = st.dictionaries(st.sampled_from(["p0", "p1", "p2", "x"]) | st.text(max_size=3), JSON, max_size=4)
    call = st.builds(ToolCall, names, arguments | JSON)  # arguments need not even be an object
    return st.lists(call, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_never_raises_on_arbitrary_json_like_calls(data: st.DataObject) -> None:
    example = data.draw(examples())
    calls = data.draw(_calls(example))
    result = check_truth(calls, example)
    assert isinstance(result, TruthResult) and isinstance(result.reason, str)
    assert result.correct == (result.reason == "ok")
    assert check_truth(calls, example) == result  # deterministic, cache or not


@settings(max_examples=80, deadline=None)
@given(examples())
def test_gold_calls_are_correct(example: Example) -> None:
    assert check_truth(gold_calls(example), example) == TruthResult(True, "ok")


@settings(max_examples=80, deadline=None)
@given(examples(), st.randoms(use_true_random=False))
def test_parallel_order_does_not_matter_for_gold(example: Example, rng: Any) -> None:
    calls = gold_calls(example)
    rng.shuffle(calls)
    expected = "parallel" in example.category or len(calls) == 1
    assert check_truth(calls, example).correct is expected


@settings(max_examples=80, deadline=None)
@given(examples(), st.sampled_from(["upper", "lower", "title"]))
def test_string_case_does_not_matter(example: Example, how: str) -> None:
    calls = [ToolCall(c.name, {p: getattr(v, how)() if isinstance(v, str) else v for p, v in c.arguments.items()})
             for c in gold_calls(example)]
    assert check_truth(calls, example).correct


@settings(max_examples=80, deadline=None)
@given(examples())
def test_safe_names_score_like_original_names(example: Example) -> None:
    calls = gold_calls(example)
    safe = [ToolCall((example.registry.get(c.name) or c).name.replace(".", "_"), c.arguments)  # type: ignore[union-attr]
            for c in calls]
    assert check_truth(safe, example) == check_truth(calls, example)


@settings(max_examples=80, deadline=None)
@given(examples())
def test_an_extra_call_is_always_wrong(example: Example) -> None:
    calls = gold_calls(example)
    assert check_truth([*calls, calls[0]], example) == TruthResult(False, "wrong_count")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(ToolCall, st.text(min_size=1, max_size=5), st.dictionaries(st.text(max_size=3), JSON)),
                max_size=3))
def test_irrelevance_verdict_is_exactly_whether_a_call_was_made(calls: list[ToolCall]) -> None:
    ex = Example(id="irr", category="irrelevance", messages=(), registry=Registry(), expect="no_call")
    assert check_truth(calls, ex).correct is (not calls)
