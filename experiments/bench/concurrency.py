"""Concurrency of `saag-opt evaluate`: 200 examples, 16 workers, 200 ms per LM call (scripted server, offline).

The scripted server answers every chat request after `--latency` seconds (one thread per request,
so the server itself never queues). The base agent's first answer is deterministic per example
(a hash of the query): one example in three calls the first tool with no arguments, which the
scripted reviewer rejects; the revision adds an argument and is approved. Mechanism r2.

ideal = (LM calls the server saw x latency) / workers: the wall time if every worker always had a
request in flight. `ratio=<wall / ideal>` is the LAST line (goal <= 1.10). Everything runs with a
fresh dspy cache and a fresh base-prediction cache, so every call is real.

The reference measured in the same run, `floor_ratio=`: the same server, the same examples in the
order evaluate submits them, each sending as many requests as it did in the run (2, or 4 when
revised), from as many threads of a bare `http.client` as evaluate had workers. What it cannot beat: the last examples' tail
(workers idle while others finish, ~4.7% here) and the scripted server's own time.

`first_wave=`: what the first `workers` examples cost the wall beyond the later examples' median
overhead per example (the measured job sizes replayed through a queue of `workers`): one-time work
done in the first wave's threads (cache shards, connections, dspy's first-call loading) shows here.

Run: .venv/bin/python experiments/bench/concurrency.py [--n 200] [--workers 16] [--latency 0.2]
     [--profile]   (cProfile of the run, top functions by cumulative time, printed before the ratio)
     [--counts]    (per LM call: sha256, sqlite statements, file opens, fsyncs, ... in the worker threads;
                    call counts do not depend on the machine's load, the ratio of such a run does)
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import http.client
import json
import multiprocessing
import os
import pstats
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="saag-opt-bench-concurrency-"))
os.environ["DSPY_CACHEDIR"] = str(WORK / "dspy-cache")  # before dspy is imported: nothing cached
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["SAAG_OPT_PROMPTS"] = str(ROOT / "prompts")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # r2_world, beside this script

from r2_world import examples, handler  # noqa: E402

from saag_opt.data import round_robin  # noqa: E402
from saag_opt.data.jsonl import write_examples  # noqa: E402
from saag_opt.evaluate import calls as runner  # noqa: E402
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation  # noqa: E402
from saag_opt.testing import ScriptedOpenAIServer  # noqa: E402


def _profile_workers() -> list[Any]:
    """CProfile inside every worker thread (the main thread only waits): wrap the per-example function."""
    profiles: list[Any] = []
    inner = runner._evaluate_example

    def profiled(*args: Any, **kwargs: Any) -> Any:
        prof = cProfile.Profile()
        prof.enable()
        try:
            return inner(*args, **kwargs)
        finally:
            prof.disable()
            profiles.append(prof)

    runner._evaluate_example = profiled  # type: ignore[assignment]
    return profiles


def _serve(conn: Any, latency: float) -> None:
    """Child process: run the scripted server, send its URL, report the chat-request count on request."""
    with ScriptedOpenAIServer(handler, latency=latency) as server:
        conn.send(server.url)
        conn.recv()  # "stop"
        conn.send(len(server.chat_requests))


@contextmanager
def scripted_server(latency: float, *, in_process: bool) -> Iterator[tuple[str, Callable[[], int]]]:
    """The scripted server in this process (shares our GIL) or in a child process (like a remote provider).

    Yields the URL and a function that returns the number of chat requests served so far (child: at stop).
    """
    if in_process:
        with ScriptedOpenAIServer(handler, latency=latency) as server:
            yield server.url, lambda: len(server.chat_requests)
        return
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(child, latency), daemon=True)
    proc.start()
    try:
        url = parent.recv()

        def count() -> int:
            parent.send("stop")
            return int(parent.recv())

        yield url, count
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()


COUNTED = {
    "sha256": ("openssl_sha256",),
    "sqlite_statements": ("'execute' of 'sqlite3.", "'executemany' of 'sqlite3.", "'executescript' of 'sqlite3."),
    "sqlite_connects": ("_sqlite3.connect",),
    "file_opens": ("posix.open", "io.open"),
    "fsyncs": ("posix.fsync", "posix.fdatasync"),
    "mkdirs": ("posix.mkdir",),
    "renames": ("posix.replace", "posix.rename"),
    "unlinks": ("posix.unlink", "posix.remove"),
    "locks": ("fcntl.flock", "fcntl.fcntl", "fcntl.lockf"),
}
"""What ``--counts`` counts, by cProfile's names of built-in functions (sqlite's own fsyncs happen in C, unseen)."""


def _stats(profiles: list[Any]) -> pstats.Stats:
    stats = pstats.Stats(profiles[0])
    for extra in profiles[1:]:
        stats.add(extra)
    return stats


def _print_profile(profiles: list[Any]) -> None:
    _stats(profiles).sort_stats("tottime").print_stats(30)


def _print_counts(profiles: list[Any], calls: int) -> None:
    """Calls of ``COUNTED`` built-ins in the worker threads, per LM call the server saw."""
    stats = _stats(profiles).stats  # type: ignore[attr-defined]
    totals = dict.fromkeys(COUNTED, 0)
    for func, (_, ncalls, *_rest) in stats.items():
        name = pstats.func_std_string(func)
        for what, needles in COUNTED.items():
            if func[0] == "~" and any(n in name for n in needles):
                totals[what] += ncalls
    print("per LM call (worker threads): " + " ".join(f"{k}={v / max(calls, 1):.2f}" for k, v in totals.items()))


EXAMPLE_SPANS: list[tuple[float, float, str]] = []
"""(start, end, example id) of every example evaluate ran, in perf_counter seconds (``_time_start_up``)."""


def _time_start_up() -> dict[str, float]:
    """When the first example started, and how long opening the (new, empty) LM cache took, in perf_counter s.

    Also records every example's span in ``EXAMPLE_SPANS`` (for ``where_the_wall_goes``).

    Why: opening a new dspy cache makes 16 sqlite files (0.1-0.7 s, more under disk load); it is part
    of the wall time but not of the per-call overhead, so it is printed apart.
    """
    marks: dict[str, float] = {}
    inner, configure = runner._evaluate_example, runner.configure_lm_cache

    def first(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        marks.setdefault("first_example", started)
        try:
            return inner(*args, **kwargs)
        finally:
            EXAMPLE_SPANS.append((started, time.perf_counter(), args[1].id))

    def timed_configure() -> Any:
        started = time.perf_counter()
        try:
            return configure()
        finally:
            marks["lm_cache_open"] = time.perf_counter() - started

    runner._evaluate_example = first  # type: ignore[assignment]
    runner.configure_lm_cache = timed_configure  # type: ignore[assignment]
    return marks


def makespan(durations: list[float], workers: int) -> float:
    """Wall time of jobs of these durations taken in order by ``workers`` workers (evaluate's pool)."""
    free = [0.0] * workers
    end = 0.0
    for duration in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + duration)
        end = max(end, start + duration)
    return end


def where_the_wall_goes(spans: list[tuple[float, float, str]], calls: dict[str, int], latency: float,
                        workers: int) -> str:
    """The first wave's and the steady per-example overhead, by replaying the measured job sizes.

    Overhead = an example's wall time minus its LM calls x latency. Replayed through a queue of
    ``workers``: the makespan as measured, and with the first ``workers`` examples at the later
    examples' median overhead; the difference is what the first wave cost the wall.
    """
    spans = sorted(spans)
    durations = [end - start for start, end, _ in spans]
    floors = [calls[example] * latency for *_, example in spans]
    overheads = [d - f for d, f in zip(durations, floors)]
    if len(spans) <= 2 * workers:
        return "where the wall goes: too few examples to tell the first wave from the rest"
    steady = statistics.median(overheads[2 * workers:])
    first = statistics.mean(overheads[:workers])
    steady_first = [f + steady for f in floors[:workers]] + durations[workers:]
    cost = makespan(durations, workers) - makespan(steady_first, workers)
    return (f"first_wave=+{cost:.2f}s (its {workers} examples: {1000 * first:.0f} ms over calls x latency each; "
            f"later examples: {1000 * steady:.0f} ms, median)")


def bare_client_wall(url: str, calls_per_example: list[int], workers: int) -> float:
    """Seconds for ``workers`` bare ``http.client`` threads to send these requests (the floor)."""
    parsed = urllib.parse.urlsplit(url)
    body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "floor"}],
                       "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}).encode()
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for calls in calls_per_example:
        todo.put(calls)

    def work() -> None:
        conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port)
        while True:
            try:
                calls = todo.get_nowait()
            except queue.Empty:
                return
            for _ in range(calls):
                conn.request("POST", parsed.path.rstrip("/") + "/chat/completions", body,
                             {"Content-Type": "application/json"})
                conn.getresponse().read()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def _calls_by_example(records: list[Any]) -> dict[str, int]:
    """LM calls per example id (the base proposal first, then the reviewer's and the revisions')."""
    return {record.example_id: 1 + record.agent_calls + record.reviewer_calls
            for record in records if record.condition != "base"}


def _calls_per_example(items: list[Any], records: list[Any]) -> list[int]:
    """LM calls per example in the order evaluate submitted them (round-robin across categories)."""
    calls = _calls_by_example(records)
    return [calls[ex.id] for ex in round_robin(items)]


def run(args: argparse.Namespace) -> tuple[float, int, float]:
    """One evaluate run, then the bare-client floor on the same server; returns (wall, LM calls, floor wall)."""
    data, items = WORK / "bench.jsonl", examples(args.n)
    write_examples(data, items)
    with scripted_server(args.latency, in_process=args.in_process_server) as (url, count):
        config = EvaluateConfig(base=f"fake@{url}", reviewer=f"fake@{url}", prompt="reviewer@v2",
                                mechanism="r2", dataset=str(data), workers=args.workers, runs_dir=WORK / "runs",
                                cache_dir=WORK / "base-cache", retry_base_delay=0.05)
        profiles = _profile_workers() if args.profile or args.counts else None
        marks = _time_start_up()
        start, cpu = time.perf_counter(), time.process_time()
        result = run_evaluation(config)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        jobs = _calls_per_example(items, result.records)
        floor = bare_client_wall(url, jobs, args.workers)
        calls = count() - sum(jobs)
    if profiles and args.profile:
        _print_profile(profiles)
    if profiles and args.counts:
        _print_counts(profiles, calls)
    s = result.summary
    total = s.costs["roles"]["total"]
    print(f"examples={s.n_examples} errors={s.errors} reviewer_calls/item={s.reviewer_calls_per_item:.2f} "
          f"agent_calls/item={s.agent_calls_per_item:.2f}")
    print(f"client_seconds_per_lm_call={total['seconds'] / max(total['calls'], 1):.3f} "
          f"(server latency {args.latency}s)")
    where = "client + in-process server" if args.in_process_server else "client only"
    print(f"process_cpu={cpu:.2f}s ({1000 * cpu / max(calls, 1):.1f} ms per LM call, {where})")
    print(f"start_up={marks.get('first_example', start) - start:.2f}s to the first example "
          f"(of which lm_cache_open={marks.get('lm_cache_open', 0.0):.2f}s: a new dspy cache)")
    print(where_the_wall_goes(EXAMPLE_SPANS, _calls_by_example(result.records), args.latency, args.workers))
    if sum(jobs) != calls:
        print(f"note: the records count {sum(jobs)} LM calls, the server saw {calls} (the floor sends the former)")
    return wall, calls, floor


def main() -> None:
    """Parse flags, run, print the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--in-process-server", action="store_true",
                        help="run the scripted server in this process (its CPU then competes for our GIL)")
    parser.add_argument("--profile", action="store_true", help="cProfile the worker threads")
    parser.add_argument("--counts", action="store_true",
                        help="print system-level calls per LM call (cProfile of the workers: the ratio is then slower)")
    args = parser.parse_args()
    if args.latency <= 0 or args.workers < 1 or args.n < 1:
        parser.error("--latency must be > 0 (the ideal wall time is calls x latency / workers), --workers and --n >= 1")
    try:
        wall, calls, floor = run(args)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    ideal = calls * args.latency / args.workers
    print(f"lm_calls={calls} latency={args.latency}s workers={args.workers} "
          f"server={'in-process' if args.in_process_server else 'child process'}")
    print(f"wall={wall:.2f}s ideal={ideal:.2f}s floor={floor:.2f}s (bare client, same server and examples)")
    print(f"floor_ratio={floor / ideal:.3f}")
    print(f"ratio={wall / ideal:.3f}")


if __name__ == "__main__":
    main()
