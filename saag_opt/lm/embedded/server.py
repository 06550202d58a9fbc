"""The embedded offline model's loopback llama.cpp server: start, share, stop.

The server runs as a subprocess (``python -m saag_opt.lm.embedded.shim_server``) on 127.0.0.1,
serving the GGUF file ``model_file.ensure_model_file`` assembled, one per model per process,
stopped at exit, on SIGTERM and on errors. The servers sharing a cache dir (both models of a
``--base``/``--reviewer`` pair, other saag-opt processes) take turns computing (``compute_lock``):
each uses every core. ``SAAG_OPT_LOCAL_URL`` points at an already running server instead.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.lm.embedded.model_file import INSTALL_HINT, LocalModel, announce, ensure_model_file, get_local_model
from saag_opt.paths import cache_dir as default_cache_dir

SPEED_ENV = "SAAG_OPT_LOCAL_SPEED"
"""``tuned`` (default) or ``legacy``: the embedded server's speed settings (``EmbeddedServer``); the bench compares them."""
SPEEDS = ("tuned", "legacy")
CONTEXT_ENV = "SAAG_OPT_LOCAL_CTX"
"""The embedded server's context in tokens (default 4096, which single-call prompts fit): multi-turn
and tau2 prompts carry tool docs plus the history and need 8192 or 16384 (docs/design.md §18)."""
DEFAULT_CONTEXT = 4096
SPIN_COUNT = "10000"
"""libgomp barrier spins before a thread sleeps (its default: 300,000), unless ``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` is set. llama.cpp's two threads meet at a barrier several times per layer; when
other processes share the 2 cores, the default spin keeps a core busy while its partner waits to be
scheduled: measured on the 0.5B with load average 7-8, a base call took 125-189 s with the default
and 43-54 s with 10,000 spins or ``OMP_WAIT_POLICY=PASSIVE`` (one thread: 51-54 s). Same tokens:
the wait policy does not touch the arithmetic."""
REUSE_GRID_RECORD = "reuse-grids.json"
"""In the cache dir: the finest exact prefix reuse measured per llama.cpp build and model (``reuse_grid``)."""
COMPUTE_LOCK_FILE = "compute.lock"
"""The lock file, in the cache dir, that the embedded servers hold while computing (``compute_lock``)."""
TRACE_ENV = "SAAG_OPT_SERVER_TRACE"
"""A file the embedded server appends per-request timings to (``saag_opt.lm.embedded.server_trace``); benchmarks set it."""


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_ready(base_url: str, timeout: float = 1.0) -> bool:
    """True when ``GET <base_url>/models`` answers 200."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def require_llama_cpp() -> None:
    """Fail early, in this process, with the install hint instead of a subprocess traceback."""
    for module in ("llama_cpp", "uvicorn", "fastapi"):
        if importlib.util.find_spec(module) is None:
            raise ModelUnavailableError(
                f"the embedded model needs llama-cpp-python[server] ({module} is missing): {INSTALL_HINT}")


def default_prompt_cache_mb(model_path: Path) -> int:
    """MiB for the prompt cache: half the model file, at least 256.

    Room for 5-6 cached 3.5k-token prompts on either model (base agent, reviewer and reflection
    alternate over 2-3), while model + KV + compute buffers + cache stay under 3x the file size.
    """
    try:
        size = model_path.stat().st_size
    except OSError:
        size = 0
    return max(256, size >> 21)


class EmbeddedServer:
    """A llama.cpp server subprocess for one model, bound to 127.0.0.1 (see the module docstring).

    Args:
        model: the registry entry.
        model_path: the verified GGUF (from ``ensure_model_file``).
        n_ctx: context size in tokens, 512-32768; default ``$SAAG_OPT_LOCAL_CTX`` or 4096 (single-call
            prompts with a registry fit in 4096; conversations need more).
        n_threads: llama.cpp threads; defaults to the machine's cores.
        startup_timeout: seconds to wait for ``GET /v1/models``.
        log_dir: where the server's stdout/stderr go (tail shown on failure).
        prompt_cache_mb: RAM for cached prompt states (0 = none); default half the model file, which
            keeps the server's peak RSS under ~3x the model file (experiments/bench/server_memory.py).
        speed: ``tuned`` (short barrier spins, grammar-first greedy sampling, a prompt cache that keeps
            one state per conversation instead of its every turn, prefix reuse on the finest grid measured
            exact; same replies) or
            ``legacy`` (the settings before them); default ``$SAAG_OPT_LOCAL_SPEED`` or ``tuned``.
        compute_lock: the file the server holds while it computes (``compute_lock``); default
            ``<cache dir>/compute.lock``, shared by every server of that cache dir.
    """

    def __init__(
        self,
        model: LocalModel,
        model_path: Path,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        startup_timeout: float = 180.0,
        log_dir: Path | None = None,
        prompt_cache_mb: int | None = None,
        speed: str | None = None,
        compute_lock: Path | None = None,
    ) -> None:
        n_ctx = context_size() if n_ctx is None else n_ctx
        if not 512 <= n_ctx <= 32768:
            raise ConfigError(f"n_ctx must be between 512 and 32768, got {n_ctx}")
        self.speed = (speed or os.environ.get(SPEED_ENV) or "tuned").strip().lower()
        if self.speed not in SPEEDS:
            raise ConfigError(f"{SPEED_ENV}: unknown speed setting {self.speed!r}; choices: {', '.join(SPEEDS)}")
        self.model, self.model_path, self.n_ctx = model, model_path, n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.startup_timeout = startup_timeout
        self.log_dir = log_dir or default_cache_dir() / "logs"
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.startup_seconds: float | None = None
        self.prompt_cache_mb = prompt_cache_mb if prompt_cache_mb is not None else default_prompt_cache_mb(model_path)
        self.compute_lock = compute_lock or default_cache_dir() / COMPUTE_LOCK_FILE

    @property
    def url(self) -> str:
        """The server's ``/v1`` URL (raises when not started)."""
        if self.port is None:
            raise ModelUnavailableError(f"the local:{self.model.name} server is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def running(self) -> bool:
        """The server process is alive."""
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [
            sys.executable, "-m", "saag_opt.lm.embedded.shim_server", "--model", str(self.model_path),
            "--alias", self.model.alias, "--port", str(self.port), "--n-ctx", str(self.n_ctx),
            "--n-threads", str(self.n_threads), "--prompt-cache-mb", str(self.prompt_cache_mb),
            "--parent-pid", str(os.getpid()), "--compute-lock", str(self.compute_lock),
            *(["--trace", trace] if (trace := os.environ.get(TRACE_ENV)) else []),
            *(["--grammar-first", "--supersede", "--fine-reuse", "--reuse-grid-record",
               str(default_cache_dir() / REUSE_GRID_RECORD)] if self.speed == "tuned" else []),
        ]

    def environment(self) -> dict[str, str]:
        """The server's environment: ours, plus the short barrier spin when tuned (see ``SPIN_COUNT``)."""
        env = dict(os.environ)
        if self.speed == "tuned" and "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
            env["GOMP_SPINCOUNT"] = SPIN_COUNT
        return env

    def start(self) -> EmbeddedServer:
        """Spawn the server and wait until it answers; stops it again on any failure."""
        if self.running:
            return self
        require_llama_cpp()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = self.log_dir / f"server-{self.model.name}-{os.getpid()}-{self.port}.log"
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self.environment())
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        while time.monotonic() - started < self.startup_timeout:
            if self.process is not None and self.process.poll() is not None:
                raise ModelUnavailableError(
                    f"the local:{self.model.name} server exited with code {self.process.returncode}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if server_ready(self.url, timeout=1.0):
                return
            time.sleep(0.2)
        raise ModelUnavailableError(
            f"the local:{self.model.name} server did not answer within {self.startup_timeout:.0f} s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the server log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"

    def stop(self, timeout: float = 3.0) -> None:
        """Terminate, then kill, the subprocess we started (never anything else).

        The server exits at once on SIGTERM, also while a completion runs or waits for the compute
        lock (``shim_server.serve``); the kill after ``timeout`` is the fallback for one that does not.
        """
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


_SERVERS: dict[str, EmbeddedServer] = {}
_SERVERS_LOCK = threading.Lock()
_HOOKS_INSTALLED = False


def context_size() -> int:
    """``$SAAG_OPT_LOCAL_CTX`` as a token count, or ``DEFAULT_CONTEXT``.

    Raises:
        ConfigError: not a whole number between 512 and 32768 (the message names the variable).
    """
    text = os.environ.get(CONTEXT_ENV, "").strip()
    if not text:
        return DEFAULT_CONTEXT
    if not text.isdigit() or not 512 <= int(text) <= 32768:
        raise ConfigError(f"{CONTEXT_ENV}: the context in tokens must be a whole number between 512 and 32768, "
                          f"got {text!r}")
    return int(text)


def local_base_url(name: str, *, n_ctx: int | None = None, startup_timeout: float = 180.0) -> str:
    """The ``/v1`` URL serving local model ``name``: ``$SAAG_OPT_LOCAL_URL`` or our own server.

    Raises:
        ModelUnavailableError: parts or runtime missing, bad checksum, or the server failed to start.
    """
    if url := os.environ.get("SAAG_OPT_LOCAL_URL"):
        return url.rstrip("/")
    model = get_local_model(name)
    with _SERVERS_LOCK:
        server = _SERVERS.get(name)
        if server is not None and server.running:
            return server.url
        require_llama_cpp()
        path = ensure_model_file(name)
        server = EmbeddedServer(model, path, n_ctx=n_ctx, startup_timeout=startup_timeout)
        _install_exit_hooks()
        _SERVERS[name] = server
        with announce(f"starting the llama.cpp server for local:{name} (n_ctx {server.n_ctx}, {server.n_threads} threads, "
                      f"prompt cache {server.prompt_cache_mb} MiB)", f"local:{name} server ready"):
            server.start()
        return server.url


def embedded_servers() -> dict[str, EmbeddedServer]:
    """The servers this process started, by model name (for reporting start times)."""
    with _SERVERS_LOCK:
        return dict(_SERVERS)


def stop_embedded_servers() -> None:
    """Stop every server this process started; safe to call repeatedly."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.stop()


def _install_exit_hooks() -> None:
    """Atexit covers normal exit and Ctrl-C; SIGTERM is chained when we are in the main thread."""
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(stop_embedded_servers)
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop_embedded_servers()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


__all__ = [
    "COMPUTE_LOCK_FILE",
    "CONTEXT_ENV",
    "REUSE_GRID_RECORD",
    "SPEEDS",
    "SPEED_ENV",
    "TRACE_ENV",
    "EmbeddedServer",
    "default_cache_dir",
    "embedded_servers",
    "free_port",
    "local_base_url",
    "require_llama_cpp",
    "server_ready",
    "stop_embedded_servers",
]
