"""Our own work per LM call stays small without changing what is keyed or sent.

Why these tests: experiments/bench/concurrency.py found per-call waste (the request hashed twice, a
lock file made and removed per call, a price-map scan per worker); the fixes must keep dspy's cache
key and our time-store key byte for byte (a cached run must still find the cache written before).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import dspy
import dspy.clients.model_metadata as metadata
import pytest
from dspy._vendor.lm15.transports import _proxy as lm15_proxy
from dspy._vendor.lm15.transports._proxy import proxy_route_for
from dspy._vendor.lm15.transports._url import parse_url

from saag_opt.lm import SaagLM, chat_completion, open_lm
from saag_opt.lm import client as client_module
from saag_opt.lm.dspy_call_path import (
    FIRST_CALL_MODULES,
    do_first_call_work,
    environment_proxies,
    lighten_dspy_call_path,
)
from saag_opt.lm.latency import TIME_LOG_DIR
from saag_opt.testing import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "what is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
DSPY_KEY = "a10209d7431dcedaf1f2813bf57d232a24b9e4d161022f3e91b3a5e072b6e84b"
"""dspy's cache key of that request as SaagLM sends it (measured on main before the overhead work)."""
TIME_KEY = "55c3ea4123563b93d8303af925b6797ad9fff99f76454de4e78fcd9228857f7c"
"""Our time-store key (``SaagLM._request_hash``) of the same request, measured alike."""


def _lm(server: ScriptedOpenAIServer) -> SaagLM:
    """An LM whose cache namespace does not depend on the server's (random) port."""
    lm = open_lm("openai/m@http://127.0.0.1:1/v1", role="reviewer")
    lm.kwargs["api_base"] = server.url  # not part of any key
    return lm


def test_the_cache_keys_and_the_time_key_are_those_main_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    keys: list[str] = []
    put = dspy.cache.put

    def spy(request: dict[str, Any], value: Any, ignored: list[str] | None = None, enable_memory_cache: bool = True) -> None:
        keys.append(dspy.cache.cache_key(request, ignored))
        put(request, value, ignored, enable_memory_cache)

    monkeypatch.setattr(dspy.cache, "put", spy)
    monkeypatch.setattr(client_module, "_CALL_TIMES", {})  # its own time store (another test may delete files)
    with ScriptedOpenAIServer(lambda request: Reply(text="ok")) as server:
        lm = _lm(server)
        hashes: list[str | None] = []
        real_hash = SaagLM._request_hash

        def counted(self: SaagLM, *args: Any) -> str | None:
            hashes.append(real_hash(self, *args))
            return hashes[-1]

        monkeypatch.setattr(SaagLM, "_request_hash", counted)
        result = chat_completion(lm, MESSAGES, tools=TOOLS, tool_choice="auto")
    if not result.cached:  # a real call (first in this pytest session): keyed as before, hashed once
        assert keys == [DSPY_KEY]
        assert hashes == [TIME_KEY]  # one hash serves the in-flight lock and the time store
    log = Path(dspy.cache.disk_cache_dir) / "saag-call-seconds" / TIME_LOG_DIR / f"{TIME_KEY[0]}.times"
    assert f"\n{TIME_KEY} ".encode() in log.read_bytes()  # the time is stored under the same key as before


def test_a_cache_hit_is_hashed_once_too(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedOpenAIServer(lambda request: Reply(text="ok")) as server:
        lm = _lm(server)
        messages = [{"role": "user", "content": f"hit me {time.time_ns()}"}]
        lm(messages=messages)
        calls: list[int] = []
        real_hash = SaagLM._request_hash
        monkeypatch.setattr(SaagLM, "_request_hash", lambda self, *a: calls.append(1) or real_hash(self, *a))
        assert lm(messages=messages) == ["ok"]
        assert len(server.chat_requests) == 1 and calls == [1]


def test_workers_asking_the_price_map_at_once_scan_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 workers' first calls used to scan dspy's whole price map side by side (lru_cache is not single-flight)."""
    lighten_dspy_call_path()
    scans: list[int] = []
    real_load = metadata._load

    def slow_load() -> Any:
        scans.append(1)
        time.sleep(0.05)
        return real_load()

    monkeypatch.setattr(metadata, "_load", slow_load)
    model = f"no-such-model-{time.time_ns()}"
    start = threading.Barrier(8)
    found: list[dict[str, Any]] = []

    def ask() -> None:
        start.wait()
        found.append(metadata.model_info("openai", model))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(scans) == 1 and len(found) == 8 and all(f == found[0] for f in found)
    found[0]["mutated"] = True  # callers still get their own copy
    assert "mutated" not in metadata.model_info("openai", model)


def test_opening_an_lm_loads_the_price_map_and_the_first_call_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers' first calls then queue behind neither (the map is ~19 ms of JSON parsing under the GIL)."""
    monkeypatch.setattr(metadata, "_data", None)  # as in a process that has made no call yet
    do_first_call_work()
    assert metadata._data is not None
    assert set(FIRST_CALL_MODULES) <= set(sys.modules)


PROXY_ENVIRONMENTS = [
    {},
    {"HTTPS_PROXY": "http://upper:1"},
    {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:1"},
    {"HTTPS_PROXY": "http://upper:1", "https_proxy": ""},  # an empty lowercase one removes the scheme
    {"HTTP_PROXY": "http://header:1", "REQUEST_METHOD": "GET"},  # a CGI script ignores HTTP_PROXY
    {"http_proxy": "http://lower:1", "REQUEST_METHOD": "GET"},
    {"ALL_PROXY": "http://all:1", "NO_PROXY": "localhost", "Ftp_Proxy": "http://mixed:1", "PROXY": "x"},
    {"HTTP_PROXY": "", "no_proxy": "*"},
]


@pytest.mark.parametrize("variables", PROXY_ENVIRONMENTS)
def test_the_proxies_read_per_call_are_urllibs(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert environment_proxies() == urllib.request.getproxies()


def test_dspys_transport_still_reads_the_proxy_on_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed, the faster lookup changes no route: a proxy set (or removed) mid-run is honoured."""
    lighten_dspy_call_path()
    assert lm15_proxy.getproxies is environment_proxies  # what dspy's transport asks is ours
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    target = parse_url("http://api.example.test/v1/chat/completions")
    assert proxy_route_for(target, proxy=None, trust_env=True) is None
    monkeypatch.setenv("http_proxy", "http://user:pw@proxy.example.test:3128")
    route = proxy_route_for(target, proxy=None, trust_env=True)
    assert route is not None and (route.host, route.port) == ("proxy.example.test", 3128) and route.basic_auth
    monkeypatch.setenv("no_proxy", "api.example.test")
    assert proxy_route_for(target, proxy=None, trust_env=True) is None
