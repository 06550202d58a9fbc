"""How finely the embedded server may reuse a decoded prefix without changing one logit (measured, not assumed).

Imported only in the server subprocess (it needs llama_cpp). llama.cpp's CPU kernels compute a
token's numbers in groups of tokens of one decode batch (the repacked Q4_K matmul takes 4 at a time;
a token left over, or a batch below some size, goes through other kernels whose last bits differ).
So whether a warm server may keep a prefix that does not end on a whole ``n_batch`` depends on the
build, the CPU and the model. Measured on this project's machine (llama-cpp-python 0.3.36, Qwen2.5-
Coder Q4_K_M, both the portable AVX2 and the native AVX-512 build): a prefix ending on a multiple of
4 tokens, decoded in batches of at least 8, gives bitwise the logits of a cold decode; a batch of 4
to 7 tokens, or a cut off that multiple, does not.

``measure`` finds the finest such ``ReuseGrid`` by decoding a probe prompt cold and in the warm
schedules that grid allows, comparing the last logits bit for bit, and falls back to whole batches
(the rule before it) when no candidate reproduces. ``load_or_measure`` keeps the answer per build,
CPU features, model file and decode settings in a JSON file, so it is measured once (~10 s on the
1.5B on 2 cores), not at every server start.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import llama_cpp
import numpy as np

from saag_opt.atomic import atomic_write_json

if TYPE_CHECKING:
    from llama_cpp.llama import Llama


class ReuseGrid(NamedTuple):
    """Where a kept prefix may end and how short a decode batch may be (``prompt_cache.ReproducibleLlama``)."""

    granule: int
    """A kept prefix ends on a multiple of it (a divisor of ``n_batch``)."""
    min_batch: int
    """Tokens of a shorter decode batch are never kept, and a warm decode never starts with a shorter batch."""


def whole_batches(n_batch: int) -> ReuseGrid:
    """The rule that needs no measurement: keep only whole batches decoded from position 0."""
    return ReuseGrid(n_batch, n_batch)


CANDIDATES = (ReuseGrid(4, 8), ReuseGrid(8, 8), ReuseGrid(16, 16), ReuseGrid(32, 32))
"""Tried finest first; the first that reproduces the cold logits in every warm schedule wins."""

PROBE_TEXT = (
    'Available functions: [{"name": "get_weather", "description": "Current weather for a city", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": '
    '"string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}]\n'
    "User: What is the weather in Lisbon today, in celsius? Reviewer: the call names the right function "
    "and takes its arguments from the request; no value is invented and no required parameter is missing.\n"
)
"""A tool-calling prompt in miniature, repeated until the probe is long enough (its content barely matters)."""


def probe_tokens(llama: Llama, length: int) -> list[int]:
    """``length`` tokens of ``PROBE_TEXT`` repeated."""
    tokens: list[int] = []
    while len(tokens) < length:
        tokens += llama.tokenize(PROBE_TEXT.encode(), add_bos=False)
    return tokens[:length]


def _decode(llama: Llama, tokens: Sequence[int], segments: Sequence[tuple[int, int]]) -> np.ndarray:
    """The last token's logits after decoding ``tokens[a:b]`` for each segment in order.

    A segment starting below the context's end drops what follows its start (upstream's ``eval``).
    """
    for start, end in segments:
        llama.n_tokens = start
        llama.eval(tokens[start:end])  # upstream's decode: measured before ``prompt_cache.install``
    return np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),)).copy()


def warm_schedules(grid: ReuseGrid, n_batch: int) -> list[list[tuple[int, int]]]:
    """Decodes after the first batch that ``grid`` allows a warm server, each ending on ``2 * n_batch``.

    A kept tail of exactly ``min_batch`` tokens with a long warm batch after it; a long kept tail with
    a warm batch of exactly ``min_batch``; a tail with a leftover token, kept up to an odd multiple of
    the granule.
    """
    g, t, n = grid.granule, grid.min_batch, n_batch
    return [[(n, n + t), (n + t, 2 * n)],
            [(n, 2 * n - t), (2 * n - t, 2 * n)],
            [(n, n + t + g + 1), (n + t + g, 2 * n)]]


def measure(llama: Llama) -> ReuseGrid:
    """The finest candidate grid whose warm decodes give the cold decode's logits bit for bit, else whole batches."""
    n = llama.n_batch
    tokens = probe_tokens(llama, 2 * n + 8)
    end = len(tokens)
    try:
        cold = _decode(llama, tokens, [(0, n), (n, 2 * n), (2 * n, end)])
        for grid in CANDIDATES:
            if n % grid.granule or 2 * grid.min_batch + grid.granule + 1 > n:
                continue
            if all(np.array_equal(_decode(llama, tokens, [*schedule, (2 * n, end)]), cold)
                   for schedule in warm_schedules(grid, n)):
                return grid
        return whole_batches(n)
    finally:
        llama.n_tokens = 0  # nothing of the probe is kept: the next decode starts at 0 and drops it


def build_key(llama: Llama, model_path: str) -> str:
    """What the answer depends on: the llama.cpp build and CPU features, the model file, the decode settings."""
    path = Path(model_path)
    features = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    return (f"llama-cpp-python {llama_cpp.__version__} | {features} | {path.name} {path.stat().st_size} B | "
            f"threads {llama.n_threads} batch {llama.n_batch} ubatch {llama.context_params.n_ubatch} "
            f"ctx {llama.n_ctx()}")


def load_or_measure(llama: Llama, model_path: str, record: Path | None) -> ReuseGrid:
    """The grid recorded for this build and model in ``record`` (JSON), else measured now and added to it.

    A record that cannot be read or written is measured around (the server still starts), and said on stderr.
    """
    key = build_key(llama, model_path)
    known = _read(record) if record is not None else {}
    value = known.get(key)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value) \
            and llama.n_batch % value[0] == 0:
        return ReuseGrid(*value)
    grid = measure(llama)
    if record is not None:
        try:
            atomic_write_json(record, {**known, key: list(grid)})  # read under the same compute lock
        except OSError as exc:
            print(f"saag-opt server: could not record the reuse grid in {record}: {exc}", file=sys.stderr)
    return grid


def _read(record: Path) -> dict[str, object]:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        print(f"saag-opt server: ignoring the unreadable reuse-grid record {record}: {exc}", file=sys.stderr)
        return {}
    return data if isinstance(data, dict) else {}


__all__ = ["CANDIDATES", "ReuseGrid", "build_key", "load_or_measure", "measure", "probe_tokens", "warm_schedules",
           "whole_batches"]
