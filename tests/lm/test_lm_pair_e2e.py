"""An asymmetric pair on the embedded models: the 0.5B base agent and the 1.5B reviewer, served together.

Marked e2e (the real models; a few minutes on 2 cores). Asserts what ``compute_lock`` promises on the
real servers: both ran, their completions never overlapped (the server trace's wall-clock
intervals), the two servers' peaks together stay under 3x the two model files, and every reply is the
one each model gives when it is served alone, although the pair's requests were sent at once.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from saag_opt.agents.base import BaseAgent
from saag_opt.agents.setup import bind_reviewer
from saag_opt.artifacts import resolve_ref
from saag_opt.data import load_dataset
from saag_opt.errors import ModelUnavailableError
from saag_opt.lm import LOCAL_MODELS, open_lm, stop_embedded_servers
from saag_opt.lm.embedded.model_file import ensure_model_file, find_part_files
from saag_opt.lm.embedded.server import TRACE_ENV, embedded_servers, local_base_url
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.e2e

BASE, REVIEWER = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"
BOUND = 3.0
"""The pair's memory bound: both servers' peak RSS together <= 3x the two model files together."""


def _peak(pid: int) -> int:
    """``VmHWM`` of a live process in bytes (as experiments/bench/server_memory.py measures it)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise KeyError("VmHWM")


def _base(agent: BaseAgent, example: Any) -> Any:
    return agent.propose(example).prediction


def _review(reviewer: Any, example: Any, prediction: Any) -> Any:
    return reviewer.review_call(example, prediction)


def test_a_05b_agent_and_a_15b_reviewer_take_turns_within_the_bound_and_answer_as_alone(
        local_spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        find_part_files(LOCAL_MODELS[REVIEWER])
    except ModelUnavailableError as exc:
        skip_or_fail(str(exc))
    examples = load_dataset("shipped:bfcl", split="test", limit=2)
    prompt = resolve_ref("reviewer@v2")
    monkeypatch.delenv("SAAG_OPT_LOCAL_URL", raising=False)
    monkeypatch.delenv(TRACE_ENV, raising=False)
    stop_embedded_servers()  # another e2e test's server must not be the "alone" one here

    # Alone: each model is the only server; its requests one at a time.
    started = time.monotonic()
    agent = BaseAgent(open_lm(f"local:{BASE}", role="base", cache=False))
    alone_calls = [_base(agent, e) for e in examples]
    stop_embedded_servers()
    reviewer = bind_reviewer(prompt, open_lm(f"local:{REVIEWER}", role="reviewer", cache=False))
    alone_verdicts = [_review(reviewer, e, p) for e, p in zip(examples, alone_calls)]
    stop_embedded_servers()
    alone_seconds = time.monotonic() - started

    # Together: both servers up (one per model, one compute lock), every request sent at once.
    for name in (BASE, REVIEWER):
        monkeypatch.setenv(TRACE_ENV, str(tmp_path / f"{name}.trace"))
        local_base_url(name)
    monkeypatch.delenv(TRACE_ENV)
    agent = BaseAgent(open_lm(f"local:{BASE}", role="base", cache=False))
    reviewer = bind_reviewer(prompt, open_lm(f"local:{REVIEWER}", role="reviewer", cache=False))
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(2 * len(examples)) as pool:
            calls = [pool.submit(_base, agent, e) for e in examples]
            verdicts = [pool.submit(_review, reviewer, e, p) for e, p in zip(examples, alone_calls)]
            together_calls = [f.result() for f in calls]
            together_verdicts = [f.result() for f in verdicts]
        together_seconds = time.monotonic() - started
        servers = embedded_servers()
        assert set(servers) == {BASE, REVIEWER} and all(s.running for s in servers.values())
        peaks = {name: _peak(s.process.pid) for name, s in servers.items() if s.process is not None}
    finally:
        stop_embedded_servers()

    assert any(p.calls for p in alone_calls), "no call at all proves little"
    assert together_calls == alone_calls
    assert together_verdicts == alone_verdicts
    files = {name: ensure_model_file(name).stat().st_size for name in (BASE, REVIEWER)}
    ratio = sum(peaks.values()) / sum(files.values())
    assert ratio <= BOUND, f"peaks {peaks} vs files {files}"
    traced = {name: [json.loads(line) for line in (tmp_path / f"{name}.trace").read_text().splitlines()]
              for name in (BASE, REVIEWER)}
    assert all(traced.values()), "both servers computed"
    spans = sorted((line["start"], line["end"], name) for name, lines in traced.items() for line in lines)
    assert all(b[0] >= a[1] - 0.001 for a, b in zip(spans, spans[1:])), f"completions overlapped: {spans}"
    print(f"\n[e2e] pair {BASE} + {REVIEWER}, {len(examples)} examples: alone {alone_seconds:.1f} s "
          f"(with server starts), together {together_seconds:.1f} s; peak RSS "
          + ", ".join(f"{n} {p / 2**20:,.0f} MiB" for n, p in peaks.items())
          + f" = {ratio:.2f}x the two files ({sum(files.values()) / 2**20:,.0f} MiB)")
