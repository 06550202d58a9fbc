"""Registry-size benchmark: the same single-call questions with registries of 5, 10, 15 tools.

The SAAG paper measures how name-resolution errors grow with the registry (Glaive 5/10/15). We
rebuild that design over any examples:

* Only single-call examples qualify (exactly one gold call, ``expect == "calls"``).
* Each registry keeps the gold tool, then the example's own other tools (datasets such as BFCL
  ``multiple`` chose them to be confusable; a seeded sample if there are more than fit), then
  distractors from ``pool``. Pool tools are ranked by similarity to the gold tool (rapidfuzz
  WRatio of the names with ``._-`` as spaces, averaged with token-set ratio of the descriptions),
  and drawn with a seeded RNG from the top ``k``, so distractors are confusable but not always the
  same few. Candidates scoring ``>= max_similarity`` are skipped as paraphrases of the gold tool
  (a model calling one would arguably be right).
* No two tools share a name or an OpenAI-safe name (``math.factorial`` vs ``math_factorial``).
* The distractor order is drawn once per example, so the 5-tool registry is a subset of the 10,
  which is a subset of the 15: differences between sizes come only from the added tools.
* Each registry is shuffled with its own seeded RNG, so the gold tool sits anywhere.
* Ids become ``<id>@r<N>``; category, messages and gold are unchanged (nothing reveals the gold tool).

Determinism: every RNG is seeded from ``(seed, example id, purpose)`` as a string, which Python
hashes with SHA-512, so results do not depend on ``PYTHONHASHSEED`` or on the order of ``examples``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz, process

from saag_opt.model import Example, Registry, ToolSpec

DEFAULT_SIZES = (5, 10, 15)


@dataclass(frozen=True, slots=True)
class _Candidate:
    tool: ToolSpec
    score: float


def function_pool(examples: Iterable[Example]) -> list[ToolSpec]:
    """All distinct functions of ``examples`` in first-seen order; a repeated name keeps its first schema."""
    seen: dict[str, ToolSpec] = {}
    for example in examples:
        for tool in example.registry:
            seen.setdefault(tool.name, tool)
    return list(seen.values())


def is_single_call(example: Example) -> bool:
    """Exactly one gold call, and calls are what is expected."""
    return example.expect == "calls" and example.gold is not None and len(example.gold) == 1


def gold_name(example: Example) -> str:
    """The function name of a single-call example's gold call."""
    assert example.gold is not None
    return next(iter(example.gold[0]))


def _name_text(name: str) -> str:
    return name.replace(".", " ").replace("_", " ").replace("-", " ").lower()


def _scores(target: ToolSpec, names: Sequence[str], descs: Sequence[str]) -> list[float]:
    name_scores = process.cdist([_name_text(target.name)], names, scorer=fuzz.WRatio)[0]
    desc_scores = process.cdist([target.description.lower()], descs, scorer=fuzz.token_set_ratio)[0]
    return (0.5 * name_scores.astype(float) + 0.5 * desc_scores.astype(float)).tolist()


def similarity_scores(target: ToolSpec, pool: Sequence[ToolSpec]) -> list[float]:
    """0-100 confusability of each pool tool with ``target`` (names and descriptions, equal weight)."""
    if not pool:
        return []
    return _scores(target, [_name_text(t.name) for t in pool], [t.description.lower() for t in pool])


class _PoolIndex:
    """The pool's texts prepared once, so each example costs two ``cdist`` calls."""

    def __init__(self, pool: Sequence[ToolSpec]) -> None:
        self.tools = list(pool)
        self.names = [_name_text(t.name) for t in self.tools]
        self.descs = [t.description.lower() for t in self.tools]

    def ranked(self, target: ToolSpec, exclude: set[str], max_similarity: float) -> list[_Candidate]:
        """Pool tools by decreasing similarity to ``target`` (ties by name), minus excluded names."""
        if not self.tools:
            return []
        scores = _scores(target, self.names, self.descs)
        ranked = [_Candidate(t, sc) for t, sc in zip(self.tools, scores)
                  if sc < max_similarity and t.name not in exclude]
        ranked.sort(key=lambda c: (-c.score, c.tool.name))
        return ranked


def _distractor_order(example: Example, pool: _PoolIndex, n: int, *, seed: int, top_k: int,
                      max_similarity: float) -> list[ToolSpec]:
    """Up to ``n`` distractors in the order sizes take them: own tools first, then seeded pool draws."""
    target = example.registry.get(gold_name(example))
    assert target is not None
    taken_names = {target.name}
    taken_safe = {target.safe_name}
    order: list[ToolSpec] = []

    def take(tool: ToolSpec) -> None:
        if len(order) < n and tool.name not in taken_names and tool.safe_name not in taken_safe:
            order.append(tool)
            taken_names.add(tool.name)
            taken_safe.add(tool.safe_name)

    own = [t for t in example.registry if t.name != target.name]
    rng = random.Random(f"{seed}:{example.id}:own")
    for tool in rng.sample(own, len(own)):
        take(tool)
    ranked = pool.ranked(target, taken_names, max_similarity)
    k = max(top_k, 2 * n)
    head, tail = ranked[:k], ranked[k:]
    rng = random.Random(f"{seed}:{example.id}:pool")
    for cand in rng.sample(head, len(head)) + tail:
        take(cand.tool)
    return order


def build_registry_benchmark(examples: Iterable[Example], pool: Sequence[ToolSpec],
                             sizes: Sequence[int] = DEFAULT_SIZES, seed: int = 0, *, top_k: int = 30,
                             max_similarity: float = 95.0) -> dict[int, list[Example]]:
    """For each size N, every single-call example with a registry of exactly N tools.

    Args:
        examples: source examples; those that are not single-call are skipped.
        pool: functions to draw distractors from (see ``function_pool``).
        sizes: registry sizes, each >= 1.
        seed: fixes every draw and shuffle.
        top_k: distractors are drawn from the ``max(top_k, 2 * needed)`` most similar pool tools.
        max_similarity: pool tools at or above this similarity (0-100) to the gold tool are skipped.

    Raises:
        ValueError: a size < 1, a gold call naming a tool missing from its registry, or too few
            usable tools to fill the largest registry (the message names the example).
    """
    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"registry sizes must be >= 1, got {list(sizes)}")
    out: dict[int, list[Example]] = {n: [] for n in sizes}
    index = _PoolIndex(pool)
    for example in examples:
        if not is_single_call(example):
            continue
        name = gold_name(example)
        target = example.registry.get(name)
        if target is None:
            raise ValueError(f"example {example.id!r}: gold call {name!r} is not in its registry")
        distractors = _distractor_order(example, index, sizes[-1] - 1, seed=seed, top_k=top_k,
                                        max_similarity=max_similarity)
        if len(distractors) < sizes[-1] - 1:
            raise ValueError(f"example {example.id!r}: only {len(distractors)} usable distractors for a "
                             f"registry of {sizes[-1]}; give a larger pool")
        for n in sizes:
            tools = [target, *distractors[: n - 1]]
            random.Random(f"{seed}:{example.id}:shuffle:{n}").shuffle(tools)
            out[n].append(example.with_registry(Registry(tools), id=f"{example.id}@r{n}"))
    return out


def mean_similarity(examples: Iterable[Example]) -> float:
    """Mean similarity of each registry's non-gold tools to its gold tool (0-100); 0 if none."""
    total, count = 0.0, 0
    for example in examples:
        if not is_single_call(example):
            continue
        target = example.registry.get(gold_name(example))
        others = [t for t in example.registry if target is None or t.name != target.name]
        if target is None or not others:
            continue
        scores = similarity_scores(target, others)
        total += sum(scores)
        count += len(scores)
    return total / count if count else 0.0
