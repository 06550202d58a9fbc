"""Test hygiene: no network, a private dspy cache, the local price map; markers."""

from __future__ import annotations

import os
import tempfile

# Before anything imports dspy or litellm (DESIGN section 11).
os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="saag-opt-dspy-cache-"))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.pop("OPENAI_API_KEY", None) if not os.environ.get("SAAG_OPT_TEST_KEEP_KEY") else None

import pytest  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runapi", action="store_true", default=False, help="run tests that call the real OpenAI API")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runapi"):
        return
    skip = pytest.mark.skip(reason="needs --runapi and a real key")
    for item in items:
        if "api" in item.keywords:
            item.add_marker(skip)


# --- scripted OpenAI-compatible server (saag_opt.testing) -------------------------------------------
from collections.abc import Iterator  # noqa: E402

from saag_opt.testing import ScriptedOpenAIServer  # noqa: E402


@pytest.fixture
def scripted_server() -> Iterator[ScriptedOpenAIServer]:
    """A fresh scripted server per test (echo handler; set ``.handler``, ``.inject([...])``, ``.latency``)."""
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def scripted_server_session() -> Iterator[ScriptedOpenAIServer]:
    """One scripted server for the session; call ``.reset(handler)`` at the start of each test."""
    with ScriptedOpenAIServer() as server:
        yield server
