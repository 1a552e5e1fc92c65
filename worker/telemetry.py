"""OpenTelemetry setup for workers, from the standard `OTEL_*` environment variables.

`configure_telemetry()` does nothing unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. When it is, it installs, once per
process:

* a replay-safe tracer provider (`temporalio.contrib.opentelemetry.create_tracer_provider`)
  exporting spans over OTLP (batched);
* a meter provider exporting metrics over OTLP, wrapped in
  `ReplaySafeMeterProvider`, and a Temporal `Runtime` whose SDK metrics are
  drained into it by `temporalio.contrib.opentelemetry.MetricsExporter`.

Spans go through `RedactingSpanProcessor` (`worker_span_processor`), which
passes each span's name, attributes, events (recorded exceptions'
`exception.message` and `exception.stacktrace` included), links and status
through the worker's redactor (`durable_tools.redact.worker_redactor`) before
they are exported: the spans durable-tools starts and those of the Temporal
SDK's interceptor (`RunActivity:model.turn` records the activity's exception
and `Type: message` as its status), and any other library's. Spans also go
through `ExportOnce`, which drops a second end of a span this
process already exported: a query that makes a worker replay a workflow it
no longer caches can re-run the workflow's last task without flagging it as
replay (measured with `max_cached_workflows=0`; sdk-java#2016 is the same
flaw), which would end a workflow span a second time.

`OTEL_EXPORTER_OTLP_PROTOCOL` defaults to `http/protobuf` (the `otel` extra,
`opentelemetry-exporter-otlp-proto-http`); `grpc` needs
`opentelemetry-exporter-otlp-proto-grpc` installed. `OTEL_SERVICE_NAME`
names the service (default `durable-tools`); the exporters read the other
`OTEL_EXPORTER_OTLP_*` variables (headers, timeouts) themselves.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import Link, Status
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from durable_tools.errors import ConfigurationError, MissingExtra
from durable_tools.redact import worker_redactor

__all__ = [
    "ExportOnce",
    "RedactingSpanProcessor",
    "Telemetry",
    "configure_telemetry",
    "telemetry_enabled",
    "worker_span_processor",
]

_DEFAULT_SERVICE = "durable-tools"
_METRIC_BUFFER_SIZE = 10_000


class ExportOnce(SpanProcessor):
    """Pass each ended span to `processor` once per (trace id, span id).

    Args:
        processor: The processor to export through (e.g. a `BatchSpanProcessor`).
        remember: How many recent span ids to remember (default 100,000).
    """

    def __init__(self, processor: SpanProcessor, remember: int = 100_000) -> None:
        self._processor = processor
        self._remember = remember
        self._seen: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Pass the start on."""
        self._processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """Pass the end on unless this span id already ended in this process."""
        context = span.context
        if context is not None:
            key = (context.trace_id, context.span_id)
            with self._lock:
                if key in self._seen:
                    return
                self._seen[key] = None
                if len(self._seen) > self._remember:
                    self._seen.popitem(last=False)
        self._processor.on_end(span)

    def shutdown(self) -> None:
        """Shut the wrapped processor down."""
        self._processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped processor."""
        return self._processor.force_flush(timeout_millis)


class RedactingSpanProcessor(SpanProcessor):
    """Pass each ended span to `processor` with its text scrubbed of secrets.

    The span's name, its attribute values (strings and sequences of
    strings), its events' names and attributes (`span.record_exception`
    writes `exception.message` and `exception.stacktrace` there), its links'
    attributes and its status description go through `redact`. A span with
    nothing to scrub is passed on as it is; otherwise a copy is (an ended
    span cannot be changed), with the same ids, times, kind and resource.

    Args:
        processor: The processor to export through (e.g. `ExportOnce(...)`).
        redact: The text scrubber (default: `worker_redactor().scrub`, the
            process's secrets as they are when the span ends).
    """

    def __init__(
        self, processor: SpanProcessor, redact: Callable[[str], str] | None = None
    ) -> None:
        self._processor = processor
        self._redact = redact

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Pass the start on."""
        self._processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """Pass the span on, scrubbed."""
        self._processor.on_end(redacted_span(span, self._redact or worker_redactor().scrub))

    def shutdown(self) -> None:
        """Shut the wrapped processor down."""
        self._processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped processor."""
        return self._processor.force_flush(timeout_millis)


def _value(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, tuple | list):
        items = cast(Sequence[Any], value)
        if any(isinstance(v, str) for v in items):
            return tuple(redact(v) if isinstance(v, str) else v for v in items)
    return cast(Any, value)


def _attributes(
    attributes: Mapping[str, Any] | None, redact: Callable[[str], str]
) -> dict[str, Any] | None:
    if attributes is None:
        return None
    return {key: _value(value, redact) for key, value in attributes.items()}


def redacted_span(span: ReadableSpan, redact: Callable[[str], str]) -> ReadableSpan:
    """`span` with its name, attributes, events, links and status passed through `redact`.

    Returns:
        `span` itself when nothing changed, else a copy.
    """
    name = redact(span.name)
    attributes = _attributes(span.attributes, redact)
    events = [
        Event(redact(e.name), _attributes(e.attributes, redact), e.timestamp, limit=None)
        for e in span.events
    ]
    links = [Link(link.context, _attributes(link.attributes, redact)) for link in span.links]
    description = span.status.description
    status = (
        Status(span.status.status_code, redact(description))
        if description is not None
        else span.status
    )
    unchanged = (
        name == span.name
        and attributes == (dict(span.attributes) if span.attributes is not None else None)
        and all(
            new.name == old.name and new.attributes == old.attributes
            for new, old in zip(events, span.events, strict=True)
        )
        and all(
            new.attributes == old.attributes for new, old in zip(links, span.links, strict=True)
        )
        and status.description == description
    )
    if unchanged:
        return span
    return ReadableSpan(
        name=name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=events,
        links=links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def worker_span_processor(processor: SpanProcessor) -> SpanProcessor:
    """What the worker exports spans through: `RedactingSpanProcessor(ExportOnce(processor))`.

    Args:
        processor: The exporting processor (`configure_telemetry` gives a
            `BatchSpanProcessor` of its OTLP exporter).
    """
    return RedactingSpanProcessor(ExportOnce(processor))


@dataclass(frozen=True)
class Telemetry:
    """What `configure_telemetry` installed.

    Attributes:
        tracer_provider: The replay-safe tracer provider (also the global one).
        meter_provider: The SDK meter provider (the global one wraps it).
        runtime: A Temporal runtime whose SDK metrics go to `meter_provider`;
            pass it to `Client.connect(runtime=...)` and keep `metrics()` running.
        buffer: The runtime's metric buffer `metrics()` drains.
    """

    tracer_provider: Any
    meter_provider: Any
    runtime: Runtime
    buffer: MetricBuffer

    @contextlib.asynccontextmanager
    async def metrics(self) -> AsyncGenerator[None]:
        """Export Temporal's SDK metrics while the block runs; flush everything at its end."""
        from temporalio.contrib.opentelemetry import MetricsExporter

        try:
            async with MetricsExporter(self.buffer, self.meter_provider):
                yield
        finally:
            self.tracer_provider.force_flush()
            self.meter_provider.force_flush()


_installed: Telemetry | None = None


def telemetry_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for OTLP export (an OTLP endpoint is set)."""
    env = os.environ if environ is None else environ
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def _exporters(protocol: str) -> tuple[Any, Any]:
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (  # type: ignore[import-not-found]
                OTLPMetricExporter,  # pyright: ignore[reportUnknownVariableType]
            )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,  # pyright: ignore[reportUnknownVariableType]
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        if protocol != "grpc":
            raise MissingExtra("OTLP export (OTEL_EXPORTER_OTLP_ENDPOINT is set)", "otel") from None
        raise ConfigurationError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set with OTEL_EXPORTER_OTLP_PROTOCOL=grpc but "
            "opentelemetry-exporter-otlp-proto-grpc is not installed"
        ) from exc
    return cast(Any, OTLPSpanExporter()), cast(Any, OTLPMetricExporter())


def configure_telemetry(environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """Install OTLP tracing and metrics when the environment asks for them.

    Args:
        environ: The variables to read (default `os.environ`).

    Returns:
        The installed `Telemetry` (the same one on later calls), or `None`
        when no OTLP endpoint is set.

    Raises:
        MissingExtra: An endpoint is set and the `otel` extra (the
            `http/protobuf` exporter) is not installed.
        ConfigurationError: The `grpc` exporter is asked for and not
            installed, or the protocol is neither `http/protobuf` nor `grpc`.
    """
    global _installed
    env = os.environ if environ is None else environ
    if _installed is not None or not telemetry_enabled(env):
        return _installed
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol not in ("http/protobuf", "grpc"):
        raise ConfigurationError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: "
            "use http/protobuf (default) or grpc"
        )
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import (
        ReplaySafeMeterProvider,
        create_tracer_provider,
    )

    span_exporter, metric_exporter = _exporters(protocol)
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": _DEFAULT_SERVICE}
    resource = Resource.create(attributes)
    tracer_provider = create_tracer_provider(resource=resource)
    tracer_provider.add_span_processor(worker_span_processor(BatchSpanProcessor(span_exporter)))
    meter_provider = MeterProvider(
        resource=resource, metric_readers=[PeriodicExportingMetricReader(metric_exporter)]
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(ReplaySafeMeterProvider(meter_provider))
    buffer = MetricBuffer(_METRIC_BUFFER_SIZE)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    _installed = Telemetry(tracer_provider, meter_provider, runtime, buffer)
    return _installed
