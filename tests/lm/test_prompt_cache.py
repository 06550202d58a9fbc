"""The embedded server's prompt cache counts every byte it keeps, and prefix reuse stays batch-aligned."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import requires

_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
pytestmark = requires(None if _LLAMA_CPP else "llama-cpp-python is not installed (pip install 'saag-opt[local]')")
if _LLAMA_CPP:  # the module under test imports llama_cpp at its top
    from llama_cpp.llama import LlamaState

    from saag_opt.lm.embedded.prompt_cache import (
        BoundedPromptCache,
        ReproducibleLlama,
        decode_batches,
        entry_bytes,
        reach,
    )
    from saag_opt.lm.embedded.reuse_grid import ReuseGrid

N_CTX, N_VOCAB = 64, 1000


def _state(n_tokens: int, kv_bytes: int, score_rows: int = 0) -> LlamaState:
    return LlamaState(input_ids=np.zeros(N_CTX, dtype=np.intc), scores=np.zeros((score_rows, N_VOCAB), dtype=np.single),
                      n_tokens=n_tokens, llama_state=bytearray(kv_bytes), llama_state_size=kv_bytes, seed=0)


def test_entry_size_counts_scores_ids_and_key_not_only_the_llama_state() -> None:
    key = tuple(range(300, 340))
    state = _state(40, kv_bytes=1000, score_rows=8)
    assert entry_bytes(key, state) == 1000 + 8 * N_VOCAB * 4 + N_CTX * 4 + 36 * 40


def test_cache_evicts_least_recently_used_to_stay_under_its_capacity() -> None:
    one = entry_bytes((1,) * 10, _state(10, 10_000))
    cache = BoundedPromptCache(capacity_bytes=int(2.5 * one))
    for first in (1, 2, 3):
        cache[(first,) * 10] = _state(10, 10_000)
        assert cache.cache_size <= cache.capacity_bytes
    assert list(cache.cache_state) == [(2,) * 10, (3,) * 10]
    _ = cache[(2,) * 10 + (7,)]  # a hit by longest prefix refreshes (2,...)
    cache[(4,) * 10] = _state(10, 10_000)
    assert list(cache.cache_state) == [(2,) * 10, (4,) * 10]
    assert cache.cache_size == 2 * one


def test_a_conversations_next_state_supersedes_its_last_so_three_roles_keep_one_each() -> None:
    """Three roles taking turns keep one state each, so none decodes its whole prompt again."""
    one = entry_bytes((1,) * 30, _state(30, 10_000))
    cache = BoundedPromptCache(capacity_bytes=int(3.5 * one), supersede_within=4)
    agent, reviewer, user = (1,) * 10, (2,) * 10, (3,) * 10
    for turn in range(1, 4):  # each role's prompt grows by its last reply, turn after turn
        for role in (agent, reviewer, user):
            cache[role * turn] = _state(10 * turn, 10_000)
            assert cache.cache_size <= cache.capacity_bytes
    assert sorted(cache.cache_state) == [agent * 3, reviewer * 3, user * 3]
    assert cache[agent * 4].n_tokens == 30  # the agent's next turn finds its longest state
    cache[reviewer * 2 + (2,) * 7 + (8, 8, 8)] = _state(30, 10_000)  # a second round: the proposal at the end differs
    assert reviewer * 3 not in cache.cache_state and len(cache.cache_state) == 3
    cache[(1,) * 2 + (9,) * 8] = _state(10, 10_000)  # shares a short prefix only: both kept, LRU drops the user's
    assert agent * 3 in cache.cache_state and user * 3 not in cache.cache_state


@pytest.mark.parametrize(("old_key", "old_clean", "new_key", "new_clean", "superseded"), [
    ((1,) * 20, 16, (1,) * 30, 24, True),            # extends it
    ((1,) * 20, 16, (1,) * 14 + (2,) * 16, 28, True),  # diverges inside the old state's last batch
    ((1,) * 20, 16, (1,) * 11 + (2,) * 19, 28, False),  # diverges earlier: the old one still gives more
    ((1,) * 20, 16, (1,) * 30, 8, False),            # the new one was not decoded cleanly that far
])
def test_a_state_is_superseded_only_when_the_new_one_gives_back_all_but_one_batch(
        old_key: tuple[int, ...], old_clean: int, new_key: tuple[int, ...], new_clean: int, superseded: bool) -> None:
    old, new = _state(len(old_key), 100), _state(len(new_key), 100)
    old.clean_tokens, new.clean_tokens = old_clean, new_clean  # type: ignore[attr-defined]
    cache = BoundedPromptCache(capacity_bytes=10**6, supersede_within=4)
    assert cache.supersedes(new_key, reach(new_key, new), old_key, old) is superseded
    upstream = BoundedPromptCache(capacity_bytes=10**6)
    assert upstream.supersedes(new_key, reach(new_key, new), old_key, old) is False  # upstream's rule


def test_without_superseding_a_growing_conversation_evicts_the_other_roles() -> None:
    """Upstream's rule keeps every turn's state: with the agent's long prompt, LRU drops it first."""
    big, small = 20_000, 2_000
    caches = [BoundedPromptCache(capacity_bytes=big * 2 + small * 4, supersede_within=within) for within in (None, 4)]
    agent, user = (1,) * 10, (3,) * 10
    for cache in caches:
        for turn in range(1, 4):  # agent and user simulator take turns; their states pile up
            cache[agent * turn] = _state(10 * turn, big)
            cache[user * turn] = _state(10 * turn, small)
        cache[(2,) * 10] = _state(10, big)  # the reviewer's first round
        cache[(2,) * 8 + (5, 5)] = _state(10, big)  # its second: the revised proposal at the end
    upstream, superseding = caches
    assert not [k for k in upstream.cache_state if k[0] == 1]  # no agent state left: its next turn starts cold
    assert agent * 3 in superseding.cache_state


def test_over_capacity_a_state_another_mostly_holds_goes_before_the_least_recently_used() -> None:
    """tau2 with r2: the agent's main line and revision branch share most tokens; the reviewer's state is unique."""
    size = 10_000
    cache = BoundedPromptCache(capacity_bytes=3 * entry_bytes((1,) * 40, _state(40, size)) + 2_000,
                               supersede_within=2)
    reviewer = (2,) * 40
    main_line, branch = (1,) * 36 + (3,) * 4, (1,) * 36 + (4,) * 4  # the revision ends differently
    cache[reviewer] = _state(40, size)
    cache[branch] = _state(40, size)
    cache[main_line] = _state(40, size)
    assert cache.lost_tokens(reviewer) == 40 and cache.lost_tokens(branch) == 4
    cache[(5,) * 10] = _state(10, size)  # the user simulator's turn: over capacity
    assert reviewer in cache.cache_state and branch not in cache.cache_state  # LRU would have dropped the reviewer's
    upstream = BoundedPromptCache(capacity_bytes=cache.capacity_bytes)
    for key in (reviewer, branch, main_line, (5,) * 10):
        upstream[key] = _state(len(key), size)
    assert reviewer not in upstream.cache_state


def test_room_is_made_before_a_state_is_copied_superseded_entries_first() -> None:
    """The copy exists before the cache can evict, so the cap must leave room for it beforehand."""
    one = entry_bytes((1,) * 20, _state(20, 10_000))
    cache = BoundedPromptCache(capacity_bytes=int(2.5 * one), supersede_within=4)
    first, other = (1,) * 20, (2,) * 20
    cache[first] = _state(20, 10_000)
    cache[other] = _state(20, 10_000)
    cache.make_room(first + (1,) * 10, clean_tokens=28, size=one)  # the next turn of `first`
    assert list(cache.cache_state) == [other] and cache.cache_size + one <= cache.capacity_bytes
    cache[(3,) * 20] = _state(20, 10_000)
    cache.make_room((4,) * 20, clean_tokens=16, size=one)  # nothing superseded: LRU makes the room
    assert list(cache.cache_state) == [(3,) * 20]
    cache.make_room((4,) * 20, clean_tokens=16, size=10 * one)  # a state too big to store evicts nothing
    assert list(cache.cache_state) == [(3,) * 20]
    legacy = BoundedPromptCache(capacity_bytes=int(1.5 * one))
    legacy[first] = _state(20, 10_000)
    legacy.make_room(first + (1,) * 10, clean_tokens=28, size=one)  # upstream's rule: untouched
    assert list(legacy.cache_state) == [first]


def test_an_entry_larger_than_the_cap_is_not_stored_and_the_upstream_scores_copy_counts() -> None:
    cache = BoundedPromptCache(capacity_bytes=100_000)
    cache[(1, 2, 3)] = _state(3, 1000, score_rows=512)  # upstream's 2 MB scores copy here
    assert not cache.cache_state and cache.cache_size == 0
    cache[(1, 2, 3)] = _state(3, 1000)
    cache[(1, 2, 3)] = _state(3, 2000)  # replacing an entry does not double-count it
    assert cache.cache_size == entry_bytes((1, 2, 3), _state(3, 2000))


@pytest.mark.parametrize(("clean", "n_tokens", "prompt", "expected"), [
    (1024, 1100, list(range(1200)), 1024),        # the whole clean prefix matches
    (1024, 1100, list(range(700)) + [-1] * 500, 512),  # diverges at 700: back to the batch boundary
    (512, 1100, list(range(1200)), 512),          # tokens past the clean prefix came from single-token steps
    (1024, 1024, list(range(1024)), 768),         # the last prompt token is always decoded
    (200, 1100, list(range(1200)), 0),            # nothing decoded in a whole batch: start cold
])
def test_reuse_is_the_matching_clean_prefix_rounded_down_to_a_batch(clean: int, n_tokens: int, prompt: list[int],
                                                                   expected: int) -> None:
    live = SimpleNamespace(_clean_tokens=clean, n_tokens=n_tokens, n_batch=256,
                           input_ids=np.arange(2048, dtype=np.intc))
    assert ReproducibleLlama._reusable_prefix(live, prompt) == expected  # type: ignore[arg-type]


def _unloaded(monkeypatch: pytest.MonkeyPatch, n_batch: int,
              grid: ReuseGrid | None = None) -> tuple[ReproducibleLlama, list[int]]:
    """A ``ReproducibleLlama`` without a model whose upstream decode records each batch's size."""
    from llama_cpp.llama import Llama  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)

    decoded: list[int] = []

    def fake_decode(self: ReproducibleLlama, tokens: list[int]) -> None:  # upstream eval without llama.cpp
        decoded.append(len(tokens))
        self.n_tokens += len(tokens)

    class Unloaded(ReproducibleLlama):
        def __del__(self) -> None:  # no model, nothing to free
            pass

    monkeypatch.setattr(Llama, "eval", fake_decode)
    llm = Unloaded.__new__(Unloaded)
    llm.n_tokens, llm.n_batch, llm.reuse_grid = 0, n_batch, grid
    return llm, decoded


def test_clean_prefix_grows_only_by_whole_batches_decoded_from_a_clean_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    llm, _ = _unloaded(monkeypatch, 256)
    steps = [(0, 1100, 1024),     # a cold prompt: four whole batches
             (None, 1, 1024),     # generated tokens, one at a time
             (1024, 300, 1280),   # a warm prompt decoded from the clean boundary
             (1000, 600, 1000)]   # decoding from a cut that is not a batch boundary: nothing new is clean
    for start, n, clean in steps:
        if start is not None:
            llm.n_tokens = start
        ReproducibleLlama.eval(llm, [7] * n)
        assert llm._clean_tokens == clean


def test_batches_are_cut_at_the_multiples_of_n_batch_wherever_a_decode_starts() -> None:
    assert decode_batches(0, 300, 128) == [(0, 128), (128, 256), (256, 300)]
    assert decode_batches(100, 300, 128) == [(100, 128), (128, 256), (256, 384), (384, 400)]
    assert decode_batches(128, 5, 128) == [(128, 133)]
    assert decode_batches(1000, 1, 128) == [(1000, 1001)]
    assert decode_batches(7, 0, 128) == []


def test_on_a_fine_grid_a_warm_decode_cuts_where_a_cold_one_does_and_keeps_tokens_of_long_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    llm, decoded = _unloaded(monkeypatch, 128, ReuseGrid(4, 8))
    steps = [(0, 301, [128, 128, 45], 300),     # cold: the last batch's leftover token is not kept
             (None, 1, [1], 300),               # a generated token never is
             (248, 70, [8, 62], 316),           # warm from 248: first batch to 256, as cold cuts there
             (252, 70, [4, 66], 252),           # a first batch of 4 (< min_batch): nothing past it is kept
             (140, 6, [6], 140)]                # a short batch at the end of a prompt: not kept
    for start, n, batches, clean in steps:
        if start is not None:
            llm.n_tokens = start
        decoded.clear()
        ReproducibleLlama.eval(llm, [7] * n)
        assert (decoded, llm._clean_tokens) == (batches, clean), (start, n)


@pytest.mark.parametrize(("common", "length", "expected"), [
    (250, 400, 248),   # back to the granule; the warm batch [248, 256) has min_batch tokens
    (253, 400, 248),   # 252 would start with a 4-token batch [252, 256): one granule further back
    (130, 400, 128),   # a batch boundary: the warm decode cuts exactly as a cold one
    (300, 252, 244),   # the prompt ends at 252: [248, 252) is too short, [244, 252) is not
])
def test_on_a_fine_grid_the_kept_prefix_ends_on_the_granule_before_a_long_enough_batch(
        common: int, length: int, expected: int) -> None:
    prompt = list(range(common)) + [-1] * max(0, length - common)
    live = SimpleNamespace(_clean_tokens=400, n_tokens=400, n_batch=128, reuse_grid=ReuseGrid(4, 8),
                           input_ids=np.arange(2048, dtype=np.intc))
    assert ReproducibleLlama._reusable_prefix(live, prompt[:length]) == expected  # type: ignore[arg-type]
