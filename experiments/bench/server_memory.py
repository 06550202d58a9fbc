"""Resident memory and prompt-cache speed-up of the embedded llama.cpp server (needs the local model).

Two phases against ``python -m saag_opt.lm.embedded.shim_server`` subprocesses started as ``EmbeddedServer``
starts them:

* memory - N distinct chat prompts of ~T tokens (default 40 x 3,500: a shared ~3,400-token system
  text + a distinct ~100-token request, like the base agent's calls over one registry; every prompt
  leaves a full ~3.5k-token state in the prompt cache; with ``--distinct-from-start`` nothing is
  shared, which costs the same memory but ~35x the compute). The server's peak RSS (``VmHWM`` of
  ``/proc/<pid>/status``) is divided by the GGUF file size.
* speed-up - then, on the same server, two ~1,000-token system prompts (base agent vs reviewer) alternate with changing
  requests, A1 B1 A2 B2 A3 B3, once on the server as shipped and once with ``--prompt-cache-mb 0``
  (the reference, measured in the same run); speed-up = mean reference seconds / mean seconds over
  the calls after the first A/B pair.

Wall times depend on machine load (the load average is printed); RSS does not.
The last line is ``ratio=<peak RSS / model file size>`` (goal <= 3.0).

Run (one llama server at a time on a shared machine):
  python experiments/bench/server_memory.py [--model qwen2.5-coder-0.5b]
"Before" numbers came from the old server:
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from saag_opt.lm.embedded.model_file import LOCAL_MODELS, ensure_model_file  # noqa: E402
from saag_opt.lm.embedded.server import EmbeddedServer, free_port, server_ready  # noqa: E402

TAIL = 100
"""Tokens of the distinct request in each memory-phase prompt (the rest is the shared system text)."""

NEW_FLAGS = ("--prompt-cache-mb", "--n-batch", "--compute-lock")
"""Server flags an old checkout (``--legacy``) does not know."""


def _status(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` memory field in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class Server:
    """The shim server as ``EmbeddedServer`` would start it (``extra`` args appended), stopped on exit."""

    def __init__(self, model: str, extra: list[str], pythonpath: str, log: Path, legacy: bool = False) -> None:
        spec = LOCAL_MODELS[model]
        embedded = EmbeddedServer(spec, ensure_model_file(model))
        embedded.port = self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = embedded.command() + extra
        if legacy:
            cmd = [a for i, a in enumerate(cmd) if a not in NEW_FLAGS and cmd[i - 1] not in NEW_FLAGS]
        self.command = cmd
        env = dict(os.environ, PYTHONPATH=pythonpath)
        self.log = log
        with open(log, "wb") as out:
            # cwd too: ``python -m`` puts the working directory ahead of PYTHONPATH
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=pythonpath)
        started = time.monotonic()
        while not server_ready(self.url + "/v1"):
            if self.proc.poll() is not None or time.monotonic() - started > 300:
                raise SystemExit(f"server failed to start; log {log}:\n{log.read_text()[-2000:]}")
            time.sleep(0.3)
        self.alias = spec.alias

    def post(self, path: str, payload: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1800) as resp:
            return json.loads(resp.read())

    def n_tokens(self, text: str) -> int:
        return len(self.post("/extras/tokenize", {"input": text, "model": self.alias})["tokens"])

    def chat(self, system: str, user: str) -> float:
        """Seconds for one greedy 8-token reply."""
        started = time.monotonic()
        self.post("/v1/chat/completions", {"model": self.alias, "temperature": 0, "max_tokens": 8, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": user}]})
        return time.monotonic() - started

    def rss(self) -> int:
        return _status(self.proc.pid, "VmRSS")

    def peak(self) -> int:
        return _status(self.proc.pid, "VmHWM")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _text(tag: str, n_words: int) -> str:
    """Deterministic filler that tokenizes to roughly 2 tokens per word; distinct per ``tag``."""
    return " ".join(f"{tag}-{i} v{(i * 7919) % 1000}" for i in range(n_words))


def _sized(server: Server, tag: str, tokens: int) -> str:
    """Filler text of about ``tokens`` tokens (calibrated with the server's tokenizer)."""
    probe = _text(tag, 200)
    per_word = server.n_tokens(probe) / 200
    return _text(tag, max(1, int(tokens / per_word)))


def memory_phase(server: Server, n_prompts: int, tokens: int, distinct_from_start: bool) -> list[int]:
    """Send the distinct prompts; RSS after each."""
    shared = "" if distinct_from_start else "Tool registry and rules:\n" + _sized(server, "sys", tokens - TAIL)
    tail_tokens = tokens if distinct_from_start else TAIL
    rss = []
    for i in range(n_prompts):
        context = "Request context:\n" + _sized(server, f"p{i}", tail_tokens - 20)
        seconds = server.chat(shared + ("\n" if shared else "") + context, f"Request {i}: which tool fits?")
        rss.append(server.rss())
        print(f"  prompt {i + 1:2d}/{n_prompts}: {seconds:6.1f} s, RSS {_mib(rss[-1])}", flush=True)
    return rss


def alternating(server: Server, tokens: int) -> list[float]:
    """A1 B1 A2 B2 A3 B3: two system prompts, changing requests; seconds per call."""
    systems = {k: f"You are the {k} role. " + _sized(server, f"role{k}", tokens) for k in ("agent", "reviewer")}
    times = []
    for round_ in range(3):
        for role, system in systems.items():
            times.append(server.chat(system, f"Request {round_}: book a table for {round_ + 2} people ({role})."))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", choices=sorted(LOCAL_MODELS))
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=3500)
    parser.add_argument("--alt-tokens", type=int, default=1000, help="system prompt size in the speed-up phase")
    parser.add_argument("--distinct-from-start", action="store_true", help="no shared prefix (slow: every prompt is cold)")
    parser.add_argument("--no-speedup", action="store_true", help="memory phase only")
    parser.add_argument("--pythonpath", default=str(ROOT), help="checkout whose saag_opt.lm.embedded.shim_server runs")
    parser.add_argument("--legacy", action="store_true", help="the --pythonpath checkout predates the bounded cache")
    args = parser.parse_args()
    model_path = ensure_model_file(args.model)
    size = model_path.stat().st_size
    logs = Path(tempfile.mkdtemp(prefix="saag-opt-bench-server-"))
    base: list[str] = []
    print(f"model {args.model}: {model_path.name}, {size:,} B; server code from {args.pythonpath}; {_load()}")

    server = Server(args.model, base, args.pythonpath, logs / "memory.log", legacy=args.legacy)
    print("server: " + " ".join(server.command[1:]))
    try:
        started_rss = server.rss()
        print(f"memory: {args.prompts} distinct prompts of ~{args.tokens} tokens "
              f"({'nothing shared' if args.distinct_from_start else f'shared ~{args.tokens - TAIL}-token system text'}); "
              f"RSS after start {_mib(started_rss)}")
        rss = memory_phase(server, args.prompts, args.tokens, args.distinct_from_start)
        peak = server.peak()
        speed = alternating(server, args.alt_tokens) if not args.no_speedup else None
        peak = max(peak, server.peak())
    finally:
        server.stop()
    print(f"memory: RSS start {_mib(started_rss)}, after prompt 1 {_mib(rss[0])}, last {_mib(rss[-1])}, "
          f"peak {_mib(peak)} = {peak / size:.2f} x model file; {_load()}")
    if speed is not None:
        ref = Server(args.model, base + ["--prompt-cache-mb", "0"], args.pythonpath, logs / "ref.log")
        try:
            reference = alternating(ref, args.alt_tokens)
            ref_peak = ref.peak()
        finally:
            ref.stop()
        mean, ref_mean = sum(speed[2:]) / len(speed[2:]), sum(reference[2:]) / len(reference[2:])
        print(f"alternating ~{args.alt_tokens}-token system prompts, A1 B1 A2 B2 A3 B3 (s): cached "
              f"{' '.join(f'{t:.1f}' for t in speed)} | no cache {' '.join(f'{t:.1f}' for t in reference)}")
        print(f"alternating speedup={ref_mean / mean:.2f} (mean of the last 4 calls: {ref_mean:.1f} s without "
              f"the prompt cache -> {mean:.1f} s with it); no-cache server peak {_mib(ref_peak)}; {_load()}")
    print(f"ratio={peak / size:.2f}")


if __name__ == "__main__":
    main()
