"""Model spec strings: what users type after --base/--reviewer/--reflection."""

from __future__ import annotations

import pytest

import saag_opt.lm.scripted_server as moved
import saag_opt.testing
import saag_opt.testing.scripted_server as old
from saag_opt.errors import ConfigError
from saag_opt.lm import ModelSpec, backends, default_workers, is_reasoning_model, parse_model_spec


@pytest.mark.parametrize(
    ("text", "kind", "model", "url", "label"),
    [
        ("gpt-4o", "openai", "gpt-4o", None, "gpt-4o"),
        ("gpt-5-mini", "openai", "gpt-5-mini", None, "gpt-5-mini"),
        ("openai/gpt-4.1-mini", "openai", "gpt-4.1-mini", None, "gpt-4.1-mini"),
        ("o4-mini", "openai", "o4-mini", None, "o4-mini"),
        ("openai/qwen@http://localhost:8000/v1/", "compatible", "qwen", "http://localhost:8000/v1",
         "qwen-at-localhost-8000"),
        ("local", "local", "qwen2.5-coder-1.5b", None, "local-qwen2.5-coder-1.5b"),
        ("local:qwen2.5-coder-0.5b", "local", "qwen2.5-coder-0.5b", None, "local-qwen2.5-coder-0.5b"),
        ("fake", "fake", "fake", None, "fake"),
        ("fake@http://127.0.0.1:5000/v1", "fake", "fake", "http://127.0.0.1:5000/v1", "fake-at-127.0.0.1-5000"),
    ],
)
def test_parse_model_spec_forms(text: str, kind: str, model: str, url: str | None, label: str) -> None:
    spec = parse_model_spec(text)
    assert (spec.kind, spec.model, spec.base_url, spec.label) == (kind, model, url, label)
    assert parse_model_spec(spec.text) == spec  # canonical text round-trips
    assert parse_model_spec(spec) is spec


def test_label_is_filename_safe_for_urls() -> None:
    spec = parse_model_spec("openai/org/model:v1@https://user@example.com:8443/v1")
    assert spec.model == "org/model:v1"
    assert set(spec.label) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"model spec is empty"),
        ("local:qwen2.5-coder-7b", r"unknown local model 'qwen2.5-coder-7b' \(did you mean local:qwen2.5-coder-\d\.5b\?\); "
                                   r"choices: local:qwen2.5-coder-1.5b, local:qwen2.5-coder-0.5b"),
        ("local:llama", r"unknown local model 'llama'; choices: local:qwen2.5-coder-1.5b, local:qwen2.5-coder-0.5b"),
        ("claude-3-opus", r"unknown model 'claude-3-opus': use an OpenAI model"),
        ("openai/qwen@localhost:8000", r"server URL must look like http://host:port/v1"),
        ("@http://localhost:1/v1", r"has no model name before '@'"),
    ],
)
def test_parse_model_spec_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_model_spec(text)


def test_credentials_in_a_server_url_are_refused_without_echoing_them() -> None:
    """A spec is written to run.json and cache paths: a password in its URL would leak there."""
    with pytest.raises(ConfigError, match=r"carries credentials") as info:
        parse_model_spec("openai/m@http://user:s3cret-pass@127.0.0.1:8000/v1")
    assert "s3cret-pass" not in str(info.value) and "127.0.0.1:8000" in str(info.value)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-5", True), ("gpt-5-mini", True), ("gpt-5.1", True), ("gpt-5-nano-2025-08-07", True),
        ("o1", True), ("o3-mini", True), ("o4-mini", True),
        ("gpt-5-chat-latest", False), ("gpt-5.1-chat-latest", False), ("gpt-4o", False),
        ("gpt-4.1-mini", False), ("openai/gpt-5-mini", True),
    ],
)
def test_is_reasoning_model(model: str, expected: bool) -> None:
    assert is_reasoning_model(model) is expected


def test_local_models_are_never_reasoning_models() -> None:
    assert not is_reasoning_model(ModelSpec("local", "qwen2.5-coder-0.5b"))
    assert parse_model_spec("local").native_tools is False
    assert parse_model_spec("gpt-4o").native_tools is True


def test_default_workers_is_one_with_an_embedded_model_else_four() -> None:
    assert default_workers("gpt-4o", "gpt-5-mini") == 4
    assert default_workers("gpt-4o", "local") == 1
    assert default_workers("local:qwen2.5-coder-0.5b", None) == 1
    assert default_workers("not a model", None) == 4


def test_a_registered_backend_parses_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_BACKENDS", dict(backends._BACKENDS))

    class Ollama(backends.BackendFacts):
        form = "ollama:<model>"

        def parse(self, text: str) -> ModelSpec | None:
            return ModelSpec("ollama", text.split(":", 1)[1]) if text.startswith("ollama:") else None

        def spec_text(self, spec: ModelSpec) -> str:
            return f"ollama:{spec.model}"

        def endpoint(self, spec: ModelSpec) -> backends.Endpoint:
            return backends.Endpoint(f"openai/{spec.model}", "http://127.0.0.1:11434/v1", "ollama")

    backends.register_backend("ollama", Ollama())
    spec = parse_model_spec("ollama:llama3")
    assert (spec.kind, spec.model, spec.text, spec.label) == ("ollama", "llama3", "ollama:llama3", "ollama-llama3")
    assert parse_model_spec(spec.text) == spec and parse_model_spec("gpt-4o").kind == "openai"
    with pytest.raises(ConfigError, match="or ollama:<model>"):
        parse_model_spec("claude-3-opus")


def test_a_parsed_spec_carries_its_backends_facts_without_asking_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend fills text, native_tools and serial when it parses: a spec is a self-contained value."""
    spec = parse_model_spec("local:qwen2.5-coder-0.5b")
    monkeypatch.setattr(backends, "_BACKENDS", {})  # no registry left to ask
    assert (spec.text, str(spec), spec.native_tools, spec.serial) == (
        "local:qwen2.5-coder-0.5b", "local:qwen2.5-coder-0.5b", False, True)
    assert spec == ModelSpec("local", "qwen2.5-coder-0.5b")  # derived fields never split equality or hashing
    assert hash(spec) == hash(ModelSpec("local", "qwen2.5-coder-0.5b"))


def test_the_scripted_server_keeps_its_old_import_path() -> None:
    for name in old.__all__:
        assert getattr(old, name) is getattr(moved, name)
    served = set(saag_opt.testing.__all__) & set(moved.__all__)  # the face also gives ScriptedWorld and its helpers
    assert {"Reply", "ScriptedOpenAIServer", "Fault"} <= served
    for name in served:
        assert getattr(saag_opt.testing, name) is getattr(moved, name)
