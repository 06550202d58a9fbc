"""Per-request timing of the embedded llama.cpp server, as JSON lines (imported only in its subprocess).

Why: on 2 cores a wall time says little (other jobs share the cores); the token counts do not
depend on load, and the split into prompt processing, generation, prompt-cache copies and the rest
(tokenising, chat template, grammar compilation, HTTP) says which lever can pay. One line per chat
or text completion::

    {"kind": "chat", "head": "<first 60 characters of the first message>", "grammar": true,
     "prompt_tokens": 812, "reused_tokens": 128, "cache_loaded": false, "generated_tokens": 30,
     "sampled_tokens": 31, "seconds": 9.1, "prompt_seconds": 7.2, "generate_seconds": 1.6,
     "sample_seconds": 0.2, "cache_seconds": 0.05, "start": 1733120000.123, "end": 1733120009.223}

``reused_tokens`` is the KV prefix kept (from the live context or a restored cache state);
``prompt_seconds`` is the decode of the rest of the prompt, ``generate_seconds`` that of the
generated tokens (the last sampled one is never decoded), ``sample_seconds`` the sampling (with a
grammar), ``cache_seconds`` the prompt-cache copies; the rest of ``seconds`` is tokenising, the chat
template, grammar compilation and detokenising. ``start`` and ``end`` are wall-clock (Unix) seconds,
comparable between servers (two sharing a compute lock never overlap).
``experiments/bench/offline_speed.py`` reads these.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from saag_opt.lm.embedded.prompt_cache import ReproducibleLlama


class _Request:
    """Counters of the request being served (the server answers one at a time)."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.reused_tokens = 0
        self.generated_tokens = 0
        self.prompt_seconds = 0.0
        self.generate_seconds = 0.0
        self.cache_seconds = 0.0
        self.cache_loaded = False
        self.decoded = False
        self.sample_seconds = 0.0
        self.sampled_tokens = 0


class TracedLlama(ReproducibleLlama):
    """``ReproducibleLlama`` that writes one JSON line per completion to ``trace_file``."""

    trace_file: IO[str] | None = None
    _trace_lock = threading.Lock()
    _request: _Request | None = None

    def _traced(self, kind: str, head: str, grammar: bool, call: Any) -> Any:
        self._request = request = _Request()
        started, start = time.perf_counter(), time.time()
        try:
            return call()
        finally:
            self._request = None
            line = {"kind": kind, "head": head[:60], "grammar": grammar, "prompt_tokens": request.prompt_tokens,
                    "reused_tokens": request.reused_tokens, "cache_loaded": request.cache_loaded,
                    "generated_tokens": request.generated_tokens,
                    "seconds": round(time.perf_counter() - started, 4),
                    "prompt_seconds": round(request.prompt_seconds, 4),
                    "generate_seconds": round(request.generate_seconds, 4),
                    "sample_seconds": round(request.sample_seconds, 4), "sampled_tokens": request.sampled_tokens,
                    "cache_seconds": round(request.cache_seconds, 4), "start": round(start, 4),
                    "end": round(time.time(), 4)}
            if self.trace_file is not None:
                with self._trace_lock:
                    self.trace_file.write(json.dumps(line) + "\n")
                    self.trace_file.flush()

    def create_chat_completion(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Upstream's, traced (non-streaming callers only: the stream is consumed outside this frame)."""
        messages = kwargs.get("messages") or (args[0] if args else [])
        head = str((messages[0] or {}).get("content") or "") if messages else ""
        grammar = kwargs.get("response_format") is not None or kwargs.get("grammar") is not None
        return self._traced("chat", head, grammar, lambda: super(TracedLlama, self).create_chat_completion(
            *args, **kwargs))

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Upstream's, traced when called directly (a chat completion is traced once, as ``chat``)."""
        if self._request is not None:
            return super().create_completion(*args, **kwargs)
        prompt = kwargs.get("prompt", args[0] if args else "")
        return self._traced("text", str(prompt) if isinstance(prompt, str) else "", kwargs.get("grammar") is not None,
                            lambda: super(TracedLlama, self).create_completion(*args, **kwargs))

    def eval(self, tokens: Sequence[int]) -> None:
        """Time the decode: the request's first one is its prompt, the later ones generated tokens."""
        request = self._request
        if request is None:
            super().eval(tokens)
            return
        first = not request.decoded
        if first:
            request.reused_tokens, request.decoded = self.n_tokens, True
            request.prompt_tokens = self.n_tokens + len(tokens)
        started = time.perf_counter()
        super().eval(tokens)
        elapsed = time.perf_counter() - started
        if first:
            request.prompt_seconds += elapsed
        else:
            request.generate_seconds += elapsed
            request.generated_tokens += len(tokens)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """Time sampling (a grammar is applied here, over the whole vocabulary)."""
        started = time.perf_counter()
        try:
            return super().sample(*args, **kwargs)
        finally:
            if self._request is not None:
                self._request.sample_seconds += time.perf_counter() - started
                self._request.sampled_tokens += 1

    def save_state(self) -> Any:
        """Count the copy into the prompt cache."""
        started = time.perf_counter()
        try:
            return super().save_state()
        finally:
            if self._request is not None:
                self._request.cache_seconds += time.perf_counter() - started

    def load_state(self, state: Any) -> None:
        """Count the copy out of the prompt cache."""
        started = time.perf_counter()
        try:
            super().load_state(state)
        finally:
            if self._request is not None:
                self._request.cache_seconds += time.perf_counter() - started
                self._request.cache_loaded = True


def install_trace(llama: Any, path: str) -> None:
    """Swap ``TracedLlama`` onto the server's model and append its lines to ``path``."""
    llama.__class__ = TracedLlama
    llama.trace_file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the server


__all__ = ["TracedLlama", "install_trace"]
