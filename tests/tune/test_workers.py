"""Local workers and the embedded model: one shared server, its cache namespace, and the refusals."""

from __future__ import annotations

import pytest

from saag_opt.errors import ConfigError
from saag_opt.lm.backends import LocalBackend, parse_model_spec
from saag_opt.tune.space import parse_space
from saag_opt.tune.workers import (
    SHARED_LOCAL_ENV,
    WorkerJob,
    local_model_names,
    shared_model_env,
)


def _space(fixed: dict, search: dict | None = None):
    return parse_space({"fixed": fixed, "search": search or {"mechanism": ["r1", "r2"]}})


def test_local_model_names_come_from_fixed_and_searched_models() -> None:
    space = _space({"base": "local:qwen2.5-coder-0.5b"}, {"mechanism": ["r1"], "reviewer": ["gpt-4o", "local"]})
    assert local_model_names(space) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert local_model_names(_space({"base": "gpt-4o", "reviewer": "gpt-5-mini"})) == set()


def test_two_embedded_models_cannot_share_one_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAAG_OPT_LOCAL_URL", raising=False)
    space = _space({"base": "local:qwen2.5-coder-0.5b", "reviewer": "local:qwen2.5-coder-1.5b"})
    with pytest.raises(ConfigError, match="uses 2 embedded models .* share one llama.cpp server"):
        shared_model_env(space)
    assert shared_model_env(_space({"base": "gpt-4o", "reviewer": "gpt-5-mini"})) == {}
    monkeypatch.setenv("SAAG_OPT_LOCAL_URL", "http://127.0.0.1:9/v1")  # a server already given: use it
    assert shared_model_env(space) == {}


def test_a_parents_embedded_server_keeps_the_local_cache_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_model_spec("local:qwen2.5-coder-0.5b")
    monkeypatch.setenv("SAAG_OPT_LOCAL_URL", "http://127.0.0.1:9/v1")
    external = LocalBackend().endpoint(spec)
    assert external.api_base == "http://127.0.0.1:9/v1" and external.cache_namespace is not None
    monkeypatch.setenv(SHARED_LOCAL_ENV, "1")  # set by tune for its workers: same weights as in-process
    shared = LocalBackend().endpoint(spec)
    assert shared.api_base == "http://127.0.0.1:9/v1" and shared.cache_namespace is None


def test_a_worker_job_round_trips_through_the_environment() -> None:
    job = WorkerJob("s.toml", {"base": "local"}, "postgresql://u:secret@h/db", "study", "/t", {"sampler": "grid"}, 3)
    assert WorkerJob.from_env(job.to_env()) == job
