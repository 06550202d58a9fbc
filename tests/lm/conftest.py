"""Fixtures for the model layer: an isolated embedded-model environment and the real 0.5B server."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from importlib import metadata

import pytest

from saag_opt.lm import LOCAL_MODELS, stop_embedded_servers

E2E_MODEL = "qwen2.5-coder-0.5b"


def _local_runtime_missing() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'saag-opt[local]')"
    for dist, _ in LOCAL_MODELS[E2E_MODEL].parts:
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            return f"{dist} is not installed (pip install 'saag-opt[local]')"
    return None


@pytest.fixture(scope="session")
def local_spec() -> Iterator[str]:
    """``local:qwen2.5-coder-0.5b``, skipped when the runtime or parts are missing; stops the server after."""
    reason = _local_runtime_missing()
    if reason:
        pytest.skip(reason)
    yield f"local:{E2E_MODEL}"
    stop_embedded_servers()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything opens a socket connection."""
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unexpected network access: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
