"""OTLP/HTTP export from a worker configured by the standard `OTEL_*` variables.

A worker subprocess (`run_worker`, as `durable-tools worker` and `dev` run it)
gets `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a receiver on 127.0.0.1 that
decodes the protocol's protobuf messages (`opentelemetry-proto`).
"""

from __future__ import annotations

import asyncio
import gzip
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent_support import AGENT, turns
from cli_process import ROOT, cli_env
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import eventually, outputs_by_id

from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.worker.telemetry import configure_telemetry

WORKER = """
import asyncio, sys
from agent_support import MODELS, TOOLKITS
from durable_tools.worker.runner import run_worker
asyncio.run(run_worker(sys.argv[1], "default", sys.argv[2], TOOLKITS, MODELS,
                       on_ready=lambda _: print("worker-ready", flush=True)))
"""


class Received:
    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on 127.0.0.1 (a free port) decoding traces and metrics."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            received.paths.append(self.path)
            if self.path == "/v1/traces":
                received.traces.append(ExportTraceServiceRequest.FromString(body))
            elif self.path == "/v1/metrics":
                received.metrics.append(ExportMetricsServiceRequest.FromString(body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def value(kv: KeyValue) -> Any:
    field = kv.value.WhichOneof("value")
    return getattr(kv.value, field) if field else None


def attributes(items: Any) -> dict[str, Any]:
    return {kv.key: value(kv) for kv in items}


async def test_worker_exports_spans_and_metrics_over_otlp_http(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    address = dev_env.client.service_client.config.target_host
    with otlp_receiver() as (endpoint, received):
        env = cli_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_SERVICE_NAME="dt-otlp-test",
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_METRIC_EXPORT_INTERVAL="500",
        )
        stderr = (tmp_path / "worker.err").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER,
            address,
            task_queue,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        try:
            assert process.stdout is not None
            async with asyncio.timeout(30):
                assert b"worker-ready" in await process.stdout.readline()
            conversations = Conversations(dev_env.client, task_queue=task_queue)
            workflow_id = f"otlp-{uuid.uuid4()}"
            await conversations.start(
                workflow_id,
                agent=AGENT,
                message=turns([("a1", "get_weather", {"city": "Paris"})]),
                options=ConversationOptions(search_attributes=False),
            )

            async def answered() -> bool:
                items = await conversations.history(workflow_id)
                return "a1" in outputs_by_id(items) and (
                    (await conversations.status(workflow_id)).state == "idle"
                )

            await eventually(answered, what="the conversation's answer")
            await dev_env.client.get_workflow_handle(workflow_id).terminate("test over")
            process.send_signal(signal.SIGTERM)  # graceful: flushes spans and metrics
            async with asyncio.timeout(40):
                assert await process.wait() == 0, (tmp_path / "worker.err").read_text()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            stderr.close()

    spans: list[tuple[dict[str, Any], Any]] = []
    for request in received.traces:
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                spans += [(resource, s) for s in scope.spans]
    mine = [
        (r, s)
        for r, s in spans
        if attributes(s.attributes).get("gen_ai.conversation.id") == workflow_id
    ]
    assert mine, f"no span of the conversation among {len(spans)} received ({received.paths})"
    assert all(r["service.name"] == "dt-otlp-test" for r, _ in mine)
    names = sorted(s.name for _, s in mine)
    assert (
        names
        == ["chat directed", "chat directed", "execute_tool get_weather"]
        + ["invoke_agent main"] * 2
    )
    tool = next(s for _, s in mine if s.name == "execute_tool get_weather")
    tool_attributes = attributes(tool.attributes)
    assert tool_attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_attributes["gen_ai.tool.call.id"] == "a1"
    assert tool_attributes["durable_tools.tool.outcome"] == "ok"
    assert len({s.trace_id for _, s in mine}) == 1

    metric_names: set[str] = set()
    tool_call_points: list[dict[str, Any]] = []
    for request in received.metrics:
        for resource_metrics in request.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    metric_names.add(metric.name)
                    if metric.name == "durable_tools.tool.calls":
                        tool_call_points += [
                            {**attributes(p.attributes), "value": p.as_int}
                            for p in metric.sum.data_points
                        ]
    assert {
        "durable_tools.tool.calls",
        "durable_tools.tool.duration",
        "gen_ai.client.operation.duration",
    } <= metric_names
    assert {
        "gen_ai.tool.name": "get_weather",
        "durable_tools.tool.outcome": "ok",
        "value": 1,
    } in tool_call_points
    # Temporal's own SDK metrics, through `MetricsExporter` into the same pipeline.
    assert any(name.startswith("temporal_") for name in metric_names), sorted(metric_names)


def test_no_endpoint_configures_nothing() -> None:
    assert configure_telemetry({"OTEL_SERVICE_NAME": "x"}) is None
