"""clear_caches empties every cache of the SAAG core, and results never depend on them."""

from __future__ import annotations

import random

from saag_opt.data.bfcl import load_bfcl
from saag_opt.data.perturb import perturbed_calls
from saag_opt.saag import clear_caches, conformance, diagnose_with_gold, grounding, structure, truth
from saag_opt.saag.truth import check_truth


def _sample() -> list[tuple[object, list[object]]]:
    examples = load_bfcl("parallel_multiple")[:15] + load_bfcl("multiple")[:15]
    return [(ex, calls) for ex in examples for _, calls in perturbed_calls(ex, random.Random(ex.id))]


def test_clear_caches_empties_every_cache() -> None:
    items = _sample()
    for example, calls in items:
        diagnose_with_gold(calls, example)  # type: ignore[arg-type]
        check_truth(calls, example)  # type: ignore[arg-type]
    conformance.ncs("get_wether", items[0][0].registry)  # type: ignore[attr-defined]
    assert grounding.query_context.cache_info().currsize > 0 and truth._PLANS
    assert conformance.name_trigrams.cache_info().currsize > 0 and structure._shapes
    clear_caches()
    assert grounding.query_context.cache_info().currsize == 0
    assert conformance.name_trigrams.cache_info().currsize == 0
    assert not truth._PLANS and not structure._shapes


def test_results_are_the_same_cold_and_warm() -> None:
    items = _sample()
    clear_caches()
    cold = [(diagnose_with_gold(c, ex).to_dict(), check_truth(c, ex)) for ex, c in items]  # type: ignore[arg-type]
    warm = [(diagnose_with_gold(c, ex).to_dict(), check_truth(c, ex)) for ex, c in items]  # type: ignore[arg-type]
    assert cold == warm and any(not t.correct for _, t in cold) and any(t.correct for _, t in cold)
