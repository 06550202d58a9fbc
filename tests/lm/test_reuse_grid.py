"""The reuse grid is measured, not assumed: the finest candidate whose warm decodes match a cold one bit for bit."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.conftest import requires

_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
pytestmark = requires(None if _LLAMA_CPP else "llama-cpp-python is not installed (pip install 'saag-opt[local]')")
if _LLAMA_CPP:  # the module under test imports llama_cpp at its top
    from saag_opt.lm.embedded import reuse_grid
    from saag_opt.lm.embedded.reuse_grid import (
        CANDIDATES,
        ReuseGrid,
        load_or_measure,
        measure,
        warm_schedules,
        whole_batches,
    )


class KernelLlama:
    """A stand-in for llama.cpp's CPU decode: a token's numbers depend on its batch, as the real kernels' do.

    A token is computed by the "group" kernel when its batch has at least ``min_batch`` tokens and it
    falls in a whole group of ``granule`` counted from the batch's start; else by another kernel.
    The last logits digest every kept position's kernel, so any difference shows.
    """

    def __init__(self, granule: int, min_batch: int, n_batch: int = 128) -> None:
        self.granule, self.min_batch, self.n_batch = granule, min_batch, n_batch
        self.n_tokens, self.paths = 0, []  # type: list[str]
        self._logits = np.zeros(32, dtype=np.single)
        self._ctx = SimpleNamespace(get_logits=lambda: self._logits.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))

    def tokenize(self, text: bytes, add_bos: bool = True) -> list[int]:
        return list(text[:40])

    def n_vocab(self) -> int:
        return len(self._logits)

    def eval(self, tokens: list[int]) -> None:  # upstream's: drop what follows n_tokens, decode in n_batch chunks
        del self.paths[self.n_tokens:]
        for i in range(0, len(tokens), self.n_batch):
            size = min(self.n_batch, len(tokens) - i)
            grouped = size - size % self.granule if size >= self.min_batch else 0
            self.paths += ["group" if j < grouped else "other" for j in range(size)]
            self.n_tokens += size
        digest = hashlib.sha256(" ".join(self.paths).encode()).digest()
        self._logits[:] = np.frombuffer(digest, dtype=np.uint8).astype(np.single)


@pytest.mark.parametrize(("kernel", "expected"), [
    ((4, 8), ReuseGrid(4, 8)),       # this project's builds
    ((2, 2), ReuseGrid(4, 8)),       # finer kernels: the finest candidate is exact too
    ((4, 16), ReuseGrid(16, 16)),    # batches of 8 and 12 differ: the next candidate that holds
    ((8, 8), ReuseGrid(8, 8)),
    ((64, 64), ReuseGrid(128, 128)),  # no candidate holds: whole batches, the rule without a measurement
])
def test_measure_picks_the_finest_candidate_that_reproduces_the_cold_decode(kernel: tuple[int, int],
                                                                           expected: ReuseGrid) -> None:
    llama = KernelLlama(*kernel)
    assert measure(llama) == expected  # type: ignore[arg-type]
    assert llama.n_tokens == 0  # the probe is not kept


def test_the_warm_schedules_cover_short_kept_tails_short_warm_batches_and_odd_granules() -> None:
    for grid in CANDIDATES:
        for schedule in warm_schedules(grid, 128):
            assert schedule[0][0] == 128 and schedule[-1][1] == 256
            (_, tail_end), (warm_start, _) = schedule
            assert warm_start % grid.granule == 0 and warm_start <= tail_end
        sizes = {(a, b): b - a for a, b in (s[1] for s in warm_schedules(grid, 128))}
        assert grid.min_batch in sizes.values()  # a warm batch of exactly min_batch
        assert any(start % (2 * grid.granule) for start, _ in sizes)  # a start on an odd multiple of the granule


def _llama(tmp_path: Path) -> Any:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"gguf")
    llama = KernelLlama(4, 8)
    llama.n_threads, llama.context_params, llama.n_ctx = 2, SimpleNamespace(n_ubatch=128), lambda: 4096  # type: ignore[attr-defined]
    return llama, str(model)


def test_a_measured_grid_is_recorded_per_build_and_model_and_read_back_without_measuring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    llama, model = _llama(tmp_path)
    record = tmp_path / "reuse-grids.json"
    record.write_text(json.dumps({"another build": [8, 8]}))
    assert load_or_measure(llama, model, record) == ReuseGrid(4, 8)
    kept = json.loads(record.read_text())
    assert kept["another build"] == [8, 8] and list(kept.values()).count([4, 8]) == 1

    def no_measuring(_: Any) -> ReuseGrid:
        raise AssertionError("measured again")

    monkeypatch.setattr(reuse_grid, "measure", no_measuring)
    assert load_or_measure(llama, model, record) == ReuseGrid(4, 8)


def test_an_unreadable_or_unwritable_record_is_measured_around_and_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    llama, model = _llama(tmp_path)
    record = tmp_path / "reuse-grids.json"
    record.write_text("{not json")
    assert load_or_measure(llama, model, record) == ReuseGrid(4, 8)
    assert "ignoring the unreadable reuse-grid record" in capsys.readouterr().err
    assert list(json.loads(record.read_text()).values()) == [[4, 8]]  # rewritten whole
    blocked = tmp_path / "file" / "reuse-grids.json"
    (tmp_path / "file").write_text("a file where a folder should be")
    assert load_or_measure(llama, model, blocked) == ReuseGrid(4, 8)
    assert "could not record the reuse grid" in capsys.readouterr().err


def test_without_a_measurement_reuse_is_whole_batches() -> None:
    assert whole_batches(128) == ReuseGrid(128, 128)
