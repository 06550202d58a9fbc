"""Fixtures for the model layer (the real-model ``local_spec`` fixture is in tests/conftest.py)."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything opens a socket connection."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unexpected network access: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
