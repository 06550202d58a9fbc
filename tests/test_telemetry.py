"""OpenTelemetry spans read back from the SDK's in-memory exporter: examples, LM calls, guard decisions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from saag_opt import telemetry
from saag_opt.errors import ConfigError
from tests.conftest import requires

pytestmark = requires(None if importlib.util.find_spec("opentelemetry.sdk") else
                      "OpenTelemetry is not installed: pip install -e '.[otel]'")

REPO = Path(__file__).resolve().parents[1]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TYPO = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"citty": "Paris"}'}}
_EXPORTER: list[Any] = []


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process's tracer provider (OpenTelemetry allows one: ours, or one set before) also exporting to memory."""
    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: PLC0415

    if not _EXPORTER:
        exporter = InMemorySpanExporter()
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):  # else another library (MLflow) set one first: join it
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        _EXPORTER.append(exporter)
    monkeypatch.delenv(telemetry.CONTENT_ENV, raising=False)
    _EXPORTER[0].clear()
    return _EXPORTER[0]


def _guard_decision() -> Any:
    from saag_opt.runtime import Guard  # noqa: PLC0415

    return Guard().review([{"role": "user", "content": "What's the weather in Paris?"}], TOOLS, [TYPO])


def test_a_guard_decision_is_a_span_carrying_its_action_rule_and_stage_and_no_text(spans: Any) -> None:
    decision = _guard_decision()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "saag_opt.guard.review"]
    attrs = dict(span.attributes)
    assert attrs["saag_opt.guard.action"] == decision.action == "block"
    assert attrs["saag_opt.guard.reason"] == decision.reason and attrs["saag_opt.guard.saag_stage"] == 2
    assert attrs["saag_opt.guard.saag_passed"] is False and attrs["saag_opt.guard.latency_s"] >= 0
    assert "gen_ai.tool.call.arguments" not in attrs and "saag_opt.guard.feedback" not in attrs
    assert attrs["gen_ai.guardrail.component.name"] == "saag-opt guard"
    (event,) = [e for e in span.events if e.name == "gen_ai.guardrail.result"]  # OpenTelemetry's guardrail result
    assert event.attributes["gen_ai.guardrail.result.value"] == "block"
    assert event.attributes["gen_ai.guardrail.policy.rule.id"] == "saag.s2"
    assert event.attributes["gen_ai.guardrail.source"] == "tool_input"


def test_text_is_recorded_only_when_the_user_opts_in(spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.CONTENT_ENV, "true")
    _guard_decision()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "saag_opt.guard.review"]
    assert "citty" in span.attributes["gen_ai.tool.call.arguments"]
    assert "city" in span.attributes["saag_opt.guard.feedback"]


@pytest.mark.integration
def test_an_evaluation_traces_each_example_with_its_lm_calls_inside(spans: Any, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from saag_opt.evaluate.config import EvaluateConfig  # noqa: PLC0415
    from saag_opt.evaluate.run import run_evaluation  # noqa: PLC0415
    from saag_opt.testing import ScriptedOpenAIServer  # noqa: PLC0415
    from tests.optimize import optimize_world as world  # noqa: PLC0415

    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    with ScriptedOpenAIServer(world.handler) as server:
        run_evaluation(EvaluateConfig(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", mechanism="r1",
                                      limit=2, split="val", workers=2, runs_dir=tmp_path / "runs",
                                      cache_dir=tmp_path / "cache"))
    finished = spans.get_finished_spans()
    examples = [s for s in finished if s.name == "saag_opt.example"]
    calls = [s for s in finished if s.name.startswith("chat ")]
    assert len(examples) == 2 and {"saag_opt.base.correct", "saag_opt.final.correct"} <= set(examples[0].attributes)
    assert {c.attributes["saag_opt.role"] for c in calls} == {"base", "reviewer"}
    inside = {e.context.span_id for e in examples}
    assert all(c.parent is not None and c.parent.span_id in inside for c in calls)
    for call in calls:
        assert call.attributes["gen_ai.operation.name"] == "chat" and call.attributes["gen_ai.request.model"]
        assert call.attributes["gen_ai.usage.input_tokens"] > 0 and "gen_ai.input.messages" not in call.attributes


def test_the_command_configures_tracing_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*telemetry.ENDPOINT_ENVS, "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert not telemetry.wanted() and telemetry.wanted(flag=True)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert telemetry.wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not telemetry.wanted(flag=True)


def test_asking_for_traces_without_the_extra_is_one_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from saag_opt.cli import main  # noqa: PLC0415

    monkeypatch.setattr(telemetry, "_trace_api", lambda: None)
    with pytest.raises(ConfigError, match=r"pip install 'saag-opt\[otel\]'"):
        telemetry.configure(flag=True)
    with pytest.raises(SystemExit) as stop:
        main(["--otel", "datasets", "list"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: {telemetry.MISSING}"
