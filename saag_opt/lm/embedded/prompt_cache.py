"""Bounded, reproducible prompt reuse for the embedded llama.cpp server (imported only in its subprocess).

Two defects of llama-cpp-python 0.3.36, found by reading ``llama.py``/``llama_cache.py`` and measured
on the 0.5B model (see README, Models):

* **Memory.** ``LlamaRAMCache`` sizes an entry by ``llama_state_size`` only (the KV bytes, ~12 KiB a
  token on the 0.5B), but ``Llama.save_state`` also stores ``scores.copy()``: ``n_batch x n_vocab``
  float32, 297 MiB with Qwen's 152k vocabulary, for every prompt over 512 tokens. With
  ``logits_all=False`` nothing ever reads it. So each distinct prompt cost ~340 MiB while the cache
  counted ~40, and a "2 GiB" cache grew to ~17 GiB before it evicted anything. ``load_state`` also
  writes that copy back into ``Llama.scores``, making another 297 MiB resident for good.
* **Determinism.** llama.cpp's floating-point results depend on how a prompt is cut into decode
  batches: a token's KV values differ in the last bits when it was decoded in another batch. Upstream
  reuses any matching prefix (the live context, or a cached state), so the same prompt is cut at
  ``prefix, prefix + n_batch, ...`` on a warm server but at ``0, n_batch, ...`` on a cold one, and a
  greedy reply can flip. Reusing only prefixes that end on an ``n_batch`` boundary *and* were decoded
  in whole batches from position 0 makes every prompt decode in the same batches, cold or warm.
  Finer reuse is exact too where it is measured to be (``reuse_grid``: on this project's builds, a
  prefix ending on a multiple of 4 tokens decoded in batches of at least 8): a warm decode then
  starts there and cuts its batches where a cold one does (``n_batch`` multiples), so no logit moves.

``install`` upgrades the server's ``Llama`` in place with both fixes and a cache whose byte count is
honest, so resident memory stays under model + KV + compute buffers + ``capacity_bytes``.
"""

from __future__ import annotations

import collections
import ctypes
import math
from collections.abc import Generator, Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp.llama import Llama, LlamaState
from llama_cpp.llama_cache import LlamaRAMCache

from saag_opt.lm.embedded.reuse_grid import ReuseGrid, whole_batches

_KEY_BYTES_PER_TOKEN = 36
"""A cache key is a tuple of Python ints: 8 bytes a slot + a 28-byte int object (above 256)."""


def entry_bytes(key: Sequence[int], state: LlamaState) -> int:
    """Every byte a cache entry keeps alive: llama.cpp state, numpy copies and the key tuple."""
    return (int(state.llama_state_size) + int(state.scores.nbytes) + int(state.input_ids.nbytes)
            + _KEY_BYTES_PER_TOKEN * len(key))


REDUNDANT = 0.25
"""A cached state whose prefix other entries hold all but this share of is evicted before LRU's pick."""


def reach(key: Sequence[int], state: LlamaState) -> int:
    """The most tokens a state can give a prompt: its clean prefix (``ReproducibleLlama``), else its key."""
    return min(len(key), int(getattr(state, "clean_tokens", len(key))))


class BoundedPromptCache(LlamaRAMCache):
    """``LlamaRAMCache`` (longest-prefix lookup, LRU order) whose capacity covers the whole entry.

    ``supersede_within``: a new entry also replaces every entry it supersedes, i.e. one whose prompt
    it shares and can give back in full but for at most that many tokens (``None``: only an entry
    with the same key, upstream's rule). A conversation's next prompt extends its last one, and a
    review's second round differs from its first only in the proposal at the end, so a superseded
    state only takes room. Without this, a conversation's states pile up turn after turn and LRU
    evicts another role's (the agent's, the reviewer's, the user simulator's), which then decodes its
    whole prompt again: on a tau2 airline task (1.5B) a 5.8k-token agent prompt took 100 s instead of 5.
    Reuse is on the grid anyway, so ``n_batch`` costs at most one batch of decoding, and never a
    different reply (``ReproducibleLlama``).

    With ``supersede_within`` set, eviction also looks at what a state adds: over capacity, the least
    recently used state that another state *mostly holds* goes first (``REDUNDANT``: all but a quarter
    of its prefix can be given back from another entry), and plain LRU only when none is. A review
    loop leaves the agent a main line and a revision branch sharing all but their last messages; LRU
    dropped the reviewer's only state instead (tau2 airline: each next review decoded 7.2k tokens
    cold, ~150 s).
    """

    def __init__(self, capacity_bytes: int, *, supersede_within: int | None = None) -> None:
        super().__init__(capacity_bytes)
        self._bytes = 0
        self.supersede_within = supersede_within

    @property
    def cache_size(self) -> int:
        """Bytes held, as ``entry_bytes`` counts them."""
        return self._bytes

    def supersedes(self, key: tuple[int, ...], key_reach: int, old_key: tuple[int, ...], old: LlamaState) -> bool:
        """Whether an entry for ``key`` that can give back ``key_reach`` tokens makes (``old_key``, ``old``) redundant."""
        if key == old_key:
            return True
        if self.supersede_within is None:
            return False
        floor = reach(old_key, old) - self.supersede_within
        return key_reach >= floor and Llama.longest_token_prefix(old_key, key) >= floor

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(key)
        size = entry_bytes(key, value)
        if size > self.capacity_bytes:
            return  # one entry over the cap is never stored
        self._drop_superseded(key, reach(key, value))
        self.cache_state[key] = value
        self._bytes += size
        self._evict_until(room=0)

    def make_room(self, key: tuple[int, ...], clean_tokens: int, size: int) -> None:
        """Before a ``size``-byte state for ``key`` is copied: drop what it supersedes, then evict until it fits.

        Why: the copy exists before ``__setitem__`` can evict, so the server would briefly hold the
        whole cap plus one more state (~200 MB for 7k tokens on the 1.5B; exp7's airline run peaked at
        2.98x the model file). Only with superseding on (the tuned server); never for a state that
        will not be stored.
        """
        if self.supersede_within is None or size > self.capacity_bytes:
            return
        self._drop_superseded(key, min(len(key), clean_tokens))
        self._evict_until(room=size)

    def _drop_superseded(self, key: tuple[int, ...], key_reach: int) -> None:
        for old_key in [k for k, old in self.cache_state.items() if self.supersedes(key, key_reach, k, old)]:
            self._pop(old_key)

    def _evict_until(self, room: int) -> None:
        """Evict (``_victim``) until ``room`` more bytes fit under the cap."""
        while self.cache_state and self._bytes + room > self.capacity_bytes:
            self._pop(self._victim())

    def _pop(self, key: tuple[int, ...]) -> None:
        self._bytes -= entry_bytes(key, self.cache_state.pop(key))

    def lost_tokens(self, key: tuple[int, ...]) -> int:
        """Tokens of ``key``'s prefix no other entry could give back if it were evicted."""
        state = self.cache_state[key]
        held = max((min(Llama.longest_token_prefix(key, other), reach(other, value))
                    for other, value in self.cache_state.items() if other != key), default=0)
        return max(0, reach(key, state) - held)

    def _victim(self) -> tuple[int, ...]:
        """The entry to evict: the least recently used one (first, with superseding, one mostly held elsewhere)."""
        if self.supersede_within is not None:
            for key, state in self.cache_state.items():  # least recently used first
                if self.lost_tokens(key) <= REDUNDANT * reach(key, state):
                    return key
        return next(iter(self.cache_state))


class ReproducibleLlama(Llama):
    """``Llama`` that saves lean states and reuses only reproducible prefixes (see the module docstring).

    Never constructed directly: ``install`` re-classes the instance llama-cpp-python's server built.
    """

    _clean_tokens = 0
    """Leading tokens of ``input_ids`` whose KV a cold decode of the same tokens would compute bit for bit."""

    reuse_grid: ReuseGrid | None = None
    """Where a kept prefix may end (``reuse_grid.measure``); None: whole batches from 0, the rule without a measurement."""

    grammar_first = False
    """Greedy + grammar: try the unconstrained argmax first (``install(..., grammar_first=True)``)."""

    def _reusable_prefix(self, tokens: Sequence[int]) -> int:
        """Tokens of the live context the next decode may keep.

        Matching, clean, on the grid, and short of the whole prompt (the last prompt token is always
        decoded, as in a cold run); and the warm decode's first batch (to the next ``n_batch``
        multiple, where a cold decode cuts) is not shorter than the grid's ``min_batch``.
        """
        limit = min(self._clean_tokens, self.n_tokens, len(tokens) - 1)
        common = 0
        while common < limit and self.input_ids[common] == tokens[common]:
            common += 1
        granule, min_batch = grid_of(self)
        keep = common - common % granule
        while keep % self.n_batch and _first_batch(keep, len(tokens), self.n_batch) < min_batch:
            keep -= granule
        return keep

    def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Generator[int, Any, None]:
        """Upstream's generator, after cutting the live context back to the reusable prefix."""
        tokens = list(tokens)
        if kwargs.get("reset", True) and self.n_tokens > 0:
            # Upstream then matches against input_ids[:n_tokens] and drops the KV past it.
            self.n_tokens = self._reusable_prefix(tokens)
        return (yield from super().generate(tokens, *args, **kwargs))

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """Upstream's sampling; with ``grammar_first``, greedy grammar decoding skips the vocabulary scan.

        Upstream runs the grammar over all 152k candidates for every token (a third of the base
        agent's generation time on 2 cores). The greedy reply is the argmax over the tokens the
        grammar allows, so when the plain argmax is allowed it is that reply: check that one token
        and fall back to the full scan otherwise (llama.cpp's own sampler does the same).
        """
        if self.grammar_first and not args and self._plain_greedy_grammar(kwargs):
            token = self._argmax_if_allowed(kwargs.get("idx"))
            if token is None:
                token = super().sample(**kwargs)
                self._recent_tokens.append(token)
            return token
        return super().sample(*args, **kwargs)

    def _plain_greedy_grammar(self, kwargs: dict[str, Any]) -> bool:
        """Greedy with a grammar and no logits processor: the chain is penalties, grammar, greedy."""
        return (kwargs.get("grammar") is not None and kwargs.get("temp") == 0.0 and self._sampler is not None
                and kwargs.get("logits_processor") is None
                and llama_cpp.llama_sampler_chain_n(self._sampler.sampler) == 3)

    def _argmax_if_allowed(self, idx: int | None) -> int | None:
        """The greedy token, accepted into the sampler chain, if the grammar allows it; else None.

        The repeat penalties change at most ``last_n_tokens_size`` tokens, so the penalised argmax
        is among the top ``last_n + 1`` logits or the penalised tokens: the chain's own penalty
        sampler runs over those few, in token order (llama.cpp's greedy keeps the first maximum).
        """
        chain = self._sampler.sampler  # type: ignore[union-attr,attr-defined]
        penalties, grammar = (llama_cpp.llama_sampler_chain_get(chain, i) for i in (0, 1))
        if (llama_cpp.llama_sampler_name(penalties), llama_cpp.llama_sampler_name(grammar)) != (b"penalties", b"grammar"):
            return None
        ridx = idx - self.n_tokens if idx is not None else -1
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx.ctx, ridx), shape=(self._n_vocab,))
        recent = self._recent_tokens
        kth = logits[np.argpartition(logits, -(len(recent) + 1))[-(len(recent) + 1):]].min()
        top = np.flatnonzero(logits >= kth)  # every token tied at the cut too
        ids = np.unique(np.concatenate([top, np.fromiter(recent, dtype=np.int64, count=len(recent))]))
        data = (llama_cpp.llama_token_data * len(ids))(*(llama_cpp.llama_token_data(int(t), float(logits[t]), 0.0)
                                                         for t in ids))
        candidates = llama_cpp.llama_token_data_array(data, len(ids), -1, False)
        llama_cpp.llama_sampler_apply(penalties, ctypes.byref(candidates))
        best = max(range(candidates.size), key=lambda i: (float(data[i].logit), -int(data[i].id)))
        token, logit = int(data[best].id), float(data[best].logit)
        one = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, logit, 0.0))
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(llama_cpp.llama_token_data_array(one, 1, -1, False)))
        if math.isinf(one[0].logit):
            return None
        llama_cpp.llama_sampler_accept(chain, token)
        recent.append(token)
        return token

    @property
    def _recent_tokens(self) -> Any:
        """The tokens the chain's penalty sampler remembers (the last ``last_n_tokens_size`` accepted)."""
        window: tuple[Any, collections.deque[int]] | None = getattr(self, "_penalty_window", None)
        if window is None or window[0] is not self._sampler:
            window = (self._sampler, collections.deque(maxlen=self.last_n_tokens_size))
            self._penalty_window = window
        return window[1]

    def eval(self, tokens: Sequence[int]) -> None:
        """Upstream's decode in batches cut where a cold decode cuts them; then track how far the context is clean.

        A warm decode may start off an ``n_batch`` multiple (``reuse_grid``): its first batch runs to the
        next multiple, so every later batch is the cold decode's. A batch keeps its tokens clean when it
        starts clean and on the grid and is at least ``min_batch`` long: all of them but the leftover
        after the last whole granule (single generated tokens never are).
        """
        start = self.n_tokens
        clean = min(self._clean_tokens, start)
        granule, min_batch = grid_of(self)
        if not len(tokens):
            super().eval(tokens)  # upstream still drops the KV past n_tokens
        for begin, end in decode_batches(start, len(tokens), self.n_batch):
            super().eval(tokens[begin - start:end - start])
            if clean == begin and begin % granule == 0 and end - begin >= min_batch:
                clean = end - (end - begin) % granule
        self._clean_tokens = clean

    def reset(self) -> None:
        """Upstream's reset; nothing is clean any more."""
        super().reset()
        self._clean_tokens = 0

    def save_state(self) -> LlamaState:
        """One copy of the llama.cpp state and no ``scores`` copy (unused without ``logits_all``)."""
        if self._logits_all:
            state = super().save_state()
        else:
            size = int(llama_cpp.llama_state_get_size(self._ctx.ctx))
            if isinstance(self.cache, BoundedPromptCache):
                key = tuple(self.input_ids[:self.n_tokens].tolist())
                self.cache.make_room(key, min(self._clean_tokens, self.n_tokens),
                                     size + self.input_ids.nbytes + _KEY_BYTES_PER_TOKEN * (len(key) + 1))
            buf = bytearray(size)
            n_bytes = int(llama_cpp.llama_state_get_data(self._ctx.ctx, (ctypes.c_uint8 * size).from_buffer(buf), size))
            if n_bytes > size:
                raise RuntimeError("Failed to copy llama state data")
            del buf[n_bytes:]
            # A bytearray, not bytes: load_state maps it without a copy (LlamaState only stores it).
            state = LlamaState(input_ids=self.input_ids.copy(), scores=np.empty((0, self._n_vocab), dtype=np.single),
                               n_tokens=self.n_tokens, llama_state=buf,  # type: ignore[arg-type]
                               llama_state_size=n_bytes, seed=self._seed)
        state.clean_tokens = min(self._clean_tokens, self.n_tokens)  # type: ignore[attr-defined]
        return state

    def load_state(self, state: LlamaState) -> None:
        """Restore without touching ``scores`` (upstream makes 297 MiB resident doing so)."""
        if self._logits_all or state.scores.shape[0]:
            super().load_state(state)
        else:
            self.input_ids = state.input_ids.copy()
            self.n_tokens = state.n_tokens
            self._requires_eval = True
            self._seed = state.seed
            size = int(state.llama_state_size)
            data = state.llama_state
            buf = ((ctypes.c_uint8 * size).from_buffer(data) if isinstance(data, bytearray)
                   else (ctypes.c_uint8 * size).from_buffer_copy(data))
            if llama_cpp.llama_state_set_data(self._ctx.ctx, buf, size) != size:
                raise RuntimeError("Failed to set llama state data")
        self._clean_tokens = getattr(state, "clean_tokens", 0)


def decode_batches(start: int, count: int, n_batch: int) -> list[tuple[int, int]]:
    """``count`` tokens from position ``start`` cut into batches at the multiples of ``n_batch`` (a cold decode's cuts)."""
    cuts = [start, *range(start - start % n_batch + n_batch, start + count, n_batch), start + count]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _first_batch(start: int, end: int, n_batch: int) -> int:
    """Tokens in the first batch of a decode of positions ``start:end`` (``decode_batches``' cuts)."""
    begin, stop = decode_batches(start, end - start, n_batch)[0]
    return stop - begin


def grid_of(llama: Any) -> ReuseGrid:
    """The model's reuse grid: the measured one, else whole batches."""
    return getattr(llama, "reuse_grid", None) or whole_batches(llama.n_batch)


def install(llama: Llama, capacity_bytes: int, *, grammar_first: bool = False, supersede: bool = False,
            reuse_grid: ReuseGrid | None = None) -> Llama:
    """Upgrade the server's model in place; ``capacity_bytes`` 0 means no prompt cache at all.

    ``grammar_first``: greedy grammar decoding checks the plain argmax first (same tokens, see ``sample``).
    ``supersede``: a cached state replaces the states it supersedes within one batch (``BoundedPromptCache``).
    ``reuse_grid``: keep prefixes that end on it (``reuse_grid.load_or_measure``); None: whole batches.

    The server builds its ``Llama`` itself (``LlamaProxy``), so the subclass, which adds methods only,
    is swapped onto the instance rather than constructed.
    """
    llama.__class__ = ReproducibleLlama
    llama.grammar_first = grammar_first  # type: ignore[attr-defined]
    llama.reuse_grid = reuse_grid  # type: ignore[attr-defined]
    within = llama.n_batch if supersede else None
    llama.set_cache(BoundedPromptCache(capacity_bytes, supersede_within=within) if capacity_bytes > 0 else None)
    return llama


__all__ = ["BoundedPromptCache", "ReproducibleLlama", "decode_batches", "entry_bytes", "grid_of", "install", "reach"]
