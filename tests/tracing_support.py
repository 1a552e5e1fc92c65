"""The test process's replay-safe tracer provider with in-memory exporters.

OpenTelemetry sets a global tracer provider once per process, so every test
that reads spans shares this one: `RAW` sees every ended span, `ONCE` sees
them through `ExportOnce`, and `WORKER` through `worker_span_processor`
(what `configure_telemetry` installs: `ExportOnce` and the redaction). Once it is
installed, `DurableToolsPlugin` turns tracing on for the rest of the session.
"""

from __future__ import annotations

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider, create_tracer_provider

from durable_tools.worker.telemetry import ExportOnce, worker_span_processor

METRICS = InMemoryMetricReader()
RAW = InMemorySpanExporter()
ONCE = InMemorySpanExporter()
WORKER = InMemorySpanExporter()


def tracer_provider() -> ReplaySafeTracerProvider:
    """The process's replay-safe tracer provider, exporting to `RAW`, `ONCE` and `WORKER`."""
    current = trace.get_tracer_provider()
    if isinstance(current, ReplaySafeTracerProvider):
        provider = current
    else:
        provider = create_tracer_provider()
        trace.set_tracer_provider(provider)
        assert trace.get_tracer_provider() is provider, "another global tracer provider was set"
    if not getattr(provider, "_dt_in_memory", False):
        provider.add_span_processor(SimpleSpanProcessor(RAW))
        provider.add_span_processor(ExportOnce(SimpleSpanProcessor(ONCE)))
        provider.add_span_processor(worker_span_processor(SimpleSpanProcessor(WORKER)))
        provider._dt_in_memory = True  # type: ignore[attr-defined]
    return provider


def meter_provider() -> InMemoryMetricReader:
    """Install a global meter provider read by `METRICS` (once per process)."""
    if not getattr(METRICS, "_dt_installed", False):
        metrics.set_meter_provider(MeterProvider(metric_readers=[METRICS]))
        METRICS._dt_installed = True  # type: ignore[attr-defined]
    return METRICS
