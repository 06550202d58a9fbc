"""OpenTelemetry spans, optional: a run, each example, each LM call, each guard decision.

Why spans: the runtime guard sits in front of production agents, whose tracing stacks (Langfuse,
Phoenix, Jaeger, any OTLP collector) should see what it decided and what it cost. The names and
attributes follow OpenTelemetry's GenAI semantic conventions where they exist (``chat {model}``
spans with ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model`` and
``gen_ai.usage.*_tokens``); the rest is ``saag_opt.*``.

Library code only uses the OpenTelemetry API (the ``[otel]`` extra): an application that configured
a tracer provider gets saag-opt's spans inside its own traces, and without one (or without the
package) every span is a no-op. The ``saag-opt`` command configures the SDK itself (``configure``)
only when asked: ``--otel``, or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_TRACES_EXPORTER`` variables.

No prompt, reply or argument text is recorded unless the user opts in with OpenTelemetry's
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (``capture_content``).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from saag_opt import __version__
from saag_opt.errors import ConfigError

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""OpenTelemetry's GenAI switch for message content: off unless ``true``."""
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CONTENT_CHARS = 4000
"""The longest text a span attribute carries when content capture is on."""
MISSING = "OpenTelemetry is not installed: pip install 'saag-opt[otel]'"


class _NoSpan:
    """What ``span`` yields when tracing is off: attributes go nowhere."""

    def set_attribute(self, key: str, value: Any) -> None:
        """Nothing to record."""

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Nothing to record."""

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Nothing to record."""


@functools.cache
def _trace_api() -> Any:
    """OpenTelemetry's trace API, or None, looked up once.

    Why once: every LM call opens a span, and Python does not cache a failed import (it would search the
    path again each time).
    """
    try:
        from opentelemetry import trace  # noqa: PLC0415 - optional: the [otel] extra
    except ImportError:
        return None
    return trace


def clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes OpenTelemetry takes: None dropped, anything not a str/bool/int/float as JSON text."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, (str, bool, int, float)) else json.dumps(value, default=str)
    return out


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A span under the current one (a no-op without OpenTelemetry or a configured provider)."""
    trace = _trace_api()
    if trace is None:
        yield _NoSpan()
        return
    tracer = trace.get_tracer("saag_opt", __version__)
    with tracer.start_as_current_span(name, attributes=clean(attributes or {})) as current:
        yield current


def set_attributes(current: Any, attributes: Mapping[str, Any]) -> None:
    """Add attributes to a span from ``span`` (None values dropped)."""
    current.set_attributes(clean(attributes))


def add_event(current: Any, name: str, attributes: Mapping[str, Any]) -> None:
    """An event on a span from ``span`` (None values dropped)."""
    current.add_event(name, clean(attributes))


def capture_content() -> bool:
    """The user opted in to prompt, reply and argument text in spans."""
    return os.environ.get(CONTENT_ENV, "").strip().lower() == "true"


def content(value: Any) -> str | None:
    """``value`` as span text when content capture is on (clipped), else None (the attribute is dropped)."""
    if not capture_content():
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:CONTENT_CHARS]


def wanted(flag: bool = False) -> bool:
    """``--otel``, or the standard variables that say where traces go."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return flag or any(os.environ.get(name) for name in ENDPOINT_ENVS) or exporter not in ("", "none")


def configure(flag: bool = False) -> bool:
    """Set up the OpenTelemetry SDK for the ``saag-opt`` command when asked (``wanted``); True when it did.

    Exporter: ``OTEL_TRACES_EXPORTER`` (``otlp``, the default, over HTTP to ``OTEL_EXPORTER_OTLP_*``,
    or ``console``). An application's own provider, if one is set, is left alone.

    Raises:
        ConfigError: asked for, but the ``[otel]`` extra is not installed.
    """
    if not wanted(flag):
        return False
    trace = _trace_api()
    try:
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter  # noqa: PLC0415
    except ImportError:
        raise ConfigError(MISSING) from None
    if trace is None:
        raise ConfigError(MISSING)
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return True  # already configured (by the application, or an earlier call)
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":
        exporter: Any = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
        except ImportError:
            raise ConfigError(f"{MISSING} (the OTLP exporter is part of it)") from None
        exporter = OTLPSpanExporter()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "saag-opt"),
                                "service.version": __version__})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # flush what a short command recorded
    return True


__all__ = ["CONTENT_ENV", "add_event", "capture_content", "clean", "configure", "content", "set_attributes", "span", "wanted"]
