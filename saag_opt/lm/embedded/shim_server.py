"""Entry point of the embedded server subprocess: ``python -m saag_opt.lm.embedded.shim_server --model ...``.

Builds llama-cpp-python's OpenAI-compatible app (``logits_all=False``: half the RSS, faster cold
prompts), upgrades its model with a bounded prompt cache and reproducible prefix reuse
(``prompt_cache.install``), wraps it in the json_schema shim and, with ``--compute-lock``, in
``compute_lock.take_turns`` (the embedded servers sharing that file compute one at a time), and serves
it with uvicorn on 127.0.0.1. A watchdog thread exits when the parent process dies, so a killed
saag-opt never leaves a 1-2 GB orphan; SIGTERM and SIGINT exit at once (``serve``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from types import FrameType

from saag_opt.lm.embedded.compute_lock import ComputeLock, take_turns
from saag_opt.lm.embedded.shim import ASGIApp, json_schema_shim

DEFAULT_N_BATCH = 128
"""Decode batch size (upstream: 512). Prefix reuse rounds down to a multiple of it (reproducibility,
see ``prompt_cache``), so a warm call re-decodes at most 127 reusable tokens instead of 511. Measured
on the 0.5B, 2 threads, 2,048 tokens: 108 tok/s at 512, 103 at 256, 101 at 128, 40 at 64."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m saag_opt.lm.embedded.shim_server")
    parser.add_argument("--model", required=True, help="path to the GGUF file")
    parser.add_argument("--alias", required=True, help="model id clients send")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-batch", type=int, default=DEFAULT_N_BATCH,
                        help="decode batch; every decode is cut at its multiples (reproducible replies)")
    parser.add_argument("--prompt-cache-mb", type=int, default=512,
                        help="RAM for cached prompt states, every byte counted; 0 disables the cache")
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--grammar-first", action="store_true",
                        help="greedy grammar decoding checks the plain argmax before scanning the vocabulary")
    parser.add_argument("--supersede", action="store_true",
                        help="a cached prompt state replaces the cached states it can stand in for (within one batch)")
    parser.add_argument("--fine-reuse", action="store_true",
                        help="reuse prefixes on the finest grid measured to leave every logit as a cold decode's")
    parser.add_argument("--reuse-grid-record", default=None,
                        help="JSON file keeping the measured grid per llama.cpp build and model (else measured at start)")
    parser.add_argument("--trace", default=None, help="append one JSON line of timings per completion to this file")
    parser.add_argument("--compute-lock", default=None,
                        help="a lock file: the servers given the same one run their completions one at a time")
    return parser.parse_args(argv)


def _watch_parent(pid: int) -> None:
    """Exit hard when the parent is gone (re-parented), since nobody will stop us otherwise."""
    while True:
        if os.getppid() != pid:
            os._exit(0)
        time.sleep(1.0)


def serve(app: ASGIApp, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn until SIGTERM or SIGINT, which end the process at once.

    Why at once: uvicorn's graceful stop waits for in-flight requests, and a completion waiting for
    the compute lock (or running) may take minutes; nothing here outlives the process anyway (the
    prompt cache is RAM, the trace is flushed per line, the kernel drops the ``flock``).
    """
    import uvicorn  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            os._exit(0)

    server = Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    server.run()
    if not server.started:  # e.g. the port was taken (uvicorn.run's exit code)
        raise SystemExit(3)


def main(argv: list[str] | None = None) -> None:
    """Serve the model until killed."""
    args = _parse(argv)
    from llama_cpp.server import app as server_app  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)
    from llama_cpp.server.app import create_app  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)
    from llama_cpp.server.settings import ModelSettings, ServerSettings  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)

    from saag_opt.lm.embedded.prompt_cache import install  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)
    from saag_opt.lm.embedded.server_trace import install_trace  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)

    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    settings = ModelSettings(
        model=args.model, model_alias=args.alias, n_ctx=args.n_ctx, n_threads=args.n_threads,
        n_threads_batch=args.n_threads, n_batch=args.n_batch, n_ubatch=args.n_batch, logits_all=False,
        verbose=False, cache=False,  # install() sets our bounded cache instead of upstream's
    )
    app = create_app(server_settings=ServerSettings(host=args.host, port=args.port), model_settings=[settings])
    # Base agent, reviewer and reflection alternate on one server; llama.cpp keeps only the last
    # prompt's KV state, so without a cache every call re-reads its whole system prompt. The prompt
    # cache restores the longest cached prefix (experiments/bench/server_memory.py measures both).
    proxy = server_app._llama_proxy  # set by create_app
    if proxy is None:
        raise RuntimeError("llama_cpp.server.app.create_app did not load the model")
    lock = ComputeLock(args.compute_lock) if args.compute_lock else None
    llama = proxy()
    grid = None
    if args.fine_reuse:
        from saag_opt.lm.embedded.reuse_grid import load_or_measure  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)

        if lock is not None:
            lock.acquire()  # a first start measures the grid by decoding: take turns like a completion
        try:
            grid = load_or_measure(llama, args.model, Path(args.reuse_grid_record) if args.reuse_grid_record else None)
        finally:
            if lock is not None:
                lock.release()
    llama = install(llama, args.prompt_cache_mb << 20, grammar_first=args.grammar_first,
                    supersede=args.supersede, reuse_grid=grid)
    if args.trace:
        install_trace(llama, args.trace)
    served = take_turns(app, lock) if lock is not None else app
    serve(json_schema_shim(served), args.host, args.port)


if __name__ == "__main__":
    main()
