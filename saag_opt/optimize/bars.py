"""gepa's and dspy's own tqdm bars: off while our progress is shown, and off in logs.

Why a patch and not an option: neither library lets a dspy.GEPA caller turn them off (checked on
dspy 3.4.1 / gepa 0.1.4). gepa's engine has a public ``display_progress_bar``, but ``dspy.GEPA``
passes ``display_progress_bar=True`` itself (``gepa_kwargs`` cannot override it: a duplicate
keyword); dspy's ``bootstrap_trace_data``, which GEPA runs on every reflection minibatch, builds
``Evaluate(display_progress=True)`` and its ``ParallelExecutor`` calls ``tqdm.tqdm(disable=False,
file=sys.stdout)``, an explicit argument that tqdm's own ``TQDM_DISABLE`` environment default
cannot override. So, for the duration of a run only, the two names those libraries look their
bar up by are pointed at tqdm with ``disable=True``, and restored afterwards:

* ``gepa.core.engine.tqdm``: gepa's "GEPA Optimization" bar on stderr. Always off while
  ``OptimizeProgress`` draws the same rollout count (one bar, not two).
* ``dspy.utils.parallelizer.tqdm``: dspy's per-minibatch "Average Metric" bars on stdout. Off
  when stdout or stderr is not a terminal: in a redirected log each redraw is a new line (dozens
  per GEPA iteration); our one-line ``optimize:`` messages are unaffected.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TextIO

import tqdm as tqdm_module
from dspy.utils import parallelizer
from gepa.core import engine


def interactive(*streams: TextIO) -> bool:
    """True when every stream is a terminal (default: stdout and stderr), where a redrawn bar is one line."""
    return all(getattr(s, "isatty", lambda: False)() for s in (streams or (sys.stdout, sys.stderr)))


@contextmanager
def _swapped(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


@contextmanager
def library_bars_off(*, gepa: bool = True, dspy: bool = True) -> Iterator[None]:
    """Silence gepa's and/or dspy's tqdm bars inside the block (see the module docstring)."""
    with ExitStack() as stack:
        if gepa:
            if engine.tqdm is not None:
                stack.enter_context(_swapped(engine, "tqdm", functools.partial(engine.tqdm, disable=True)))
        if dspy:
            class QuietTqdm(tqdm_module.tqdm):  # type: ignore[misc,type-arg]
                """tqdm that never draws (keeps the class API dspy also uses: ``_instances``)."""

                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    kwargs["disable"] = True
                    super().__init__(*args, **kwargs)

            stack.enter_context(_swapped(parallelizer, "tqdm", types.SimpleNamespace(tqdm=QuietTqdm)))
        yield


__all__ = ["interactive", "library_bars_off"]
