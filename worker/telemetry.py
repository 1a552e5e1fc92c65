"""OpenTelemetry setup for workers, from the standard `OTEL_*` environment variables.

`configure_telemetry()` does nothing unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. When it is, it installs, once per
process:

* a replay-safe tracer provider (`temporalio.contrib.opentelemetry.create_tracer_provider`)
  exporting spans over OTLP (batched);
* a meter provider exporting metrics over OTLP, wrapped in
  `ReplaySafeMeterProvider`, and a Temporal `Runtime` whose SDK metrics are
  drained into it by `temporalio.contrib.opentelemetry.MetricsExporter`.

Spans go through `ExportOnce`, which drops a second end of a span this
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
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from durable_tools.errors import ConfigurationError, MissingExtra

__all__ = ["ExportOnce", "Telemetry", "configure_telemetry", "telemetry_enabled"]

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
    tracer_provider.add_span_processor(ExportOnce(BatchSpanProcessor(span_exporter)))
    meter_provider = MeterProvider(
        resource=resource, metric_readers=[PeriodicExportingMetricReader(metric_exporter)]
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(ReplaySafeMeterProvider(meter_provider))
    buffer = MetricBuffer(_METRIC_BUFFER_SIZE)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    _installed = Telemetry(tracer_provider, meter_provider, runtime, buffer)
    return _installed
