"""One rule for credentials in a URL: a password in user:password@host or a key in the query string."""

from __future__ import annotations

import pytest

from saag_opt.errors import ConfigError
from saag_opt.lm import parse_model_spec
from saag_opt.tune.storage import _without_password, parse_storage

SECRET = "s3cret-value-42"


@pytest.mark.parametrize("url", [
    f"http://user:{SECRET}@127.0.0.1:8000/v1",
    f"http://127.0.0.1:8000/v1?api-key={SECRET}",
    f"http://127.0.0.1:8000/v1?key={SECRET}",
    f"http://127.0.0.1:8000/v1?foo=1&token={SECRET}",
    f"http://127.0.0.1:8000/v1?Access_Token={SECRET}",
    f"http://127.0.0.1:8000/v1?api_key={SECRET}&x=2",
])
@pytest.mark.parametrize("kind", ["openai/m@", "fake@"])
def test_a_server_url_with_credentials_is_refused_without_echoing_them(url: str, kind: str) -> None:
    """Only user:password@host was refused; a key in the query went into run.json and cache paths."""
    with pytest.raises(ConfigError, match="carries credentials") as info:
        parse_model_spec(kind + url)
    assert SECRET not in str(info.value) and "127.0.0.1:8000" in str(info.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1?api-version=2024-06-01", "http://user@127.0.0.1:8000/v1",
                                 "http://127.0.0.1:8000/v1?monkeys=3"])
def test_a_server_url_without_credentials_is_accepted(url: str) -> None:
    assert parse_model_spec(f"openai/m@{url}").base_url == url


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://me:{SECRET}@db:5432/optuna", "postgresql://me:***@db:5432/optuna"),
    (f"postgresql://me@db:5432/optuna?password={SECRET}", "postgresql://me@db:5432/optuna?password=***"),
    ("postgresql://me@db:5432/optuna?sslmode=require", "postgresql://me@db:5432/optuna?sslmode=require"),
])
def test_a_storage_url_is_written_and_quoted_with_its_credentials_masked(url: str, shown: str) -> None:
    spec = parse_storage(url)
    assert spec.redacted == shown
    assert _without_password(f'connection to "{url}" failed', spec) == f'connection to "{shown}" failed'
