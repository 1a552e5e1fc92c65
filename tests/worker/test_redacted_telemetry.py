"""A secret in a provider error, a tool error and an MCP error reaches no span, log or history.

Issue 23, item 8. One secret, the worker's `OPENAI_API_KEY`, is echoed by
three failures: an OpenAI-compatible server on 127.0.0.1 answers 401 with the
key in its body (through the real OpenAI SDK), a tool raises with it in its
message, and the MCP test server refuses a call naming it (its own `env`).
The conversation runs on the dev server with OpenTelemetry on (the spans
through the processor the worker installs, `worker_span_processor`; an
in-memory metric reader) and the worker's loggers at DEBUG, captured. Then
history (every event's payloads decoded), the event stream, every span
(name, attributes, events, links, status), the metric labels and the log
text are searched for the secret.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp_support import TEST_SERVER
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from tracing_support import WORKER, meter_provider, tracer_provider
from workflow_helpers import payloads_of, running

from durable_tools import tool
from durable_tools.activities.failure_log import ExpectedFailureFilter, mark_expected
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.mcp import McpServerConfig
from durable_tools.models.base import ModelRequest
from durable_tools.models.openai import OpenAIChatModel
from durable_tools.redact import REDACTED
from durable_tools.results import ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, ToolCallOutput
from durable_tools.worker.log_redaction import RedactingFilter, install_log_redaction
from durable_tools.worker.telemetry import worker_span_processor

SECRET = "Zq7-no-known-shape-4411"
"""Shaped like no credential the redactor knows: only its value gives it away."""

CAPTURED = ("durable_tools", "temporalio", "openai", "httpx", "mcp")


class _Refusing(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers every request 401, naming the key it got."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        message = f"Incorrect API key provided: {key}. See https://example.com/keys?for={key}"
        body = json.dumps(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """The 401 server on 127.0.0.1; its base URL (`.../v1`)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Lines(logging.Handler):
    """Every record as its handlers would print it (message and traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def worker_log() -> Iterator[_Lines]:
    """The worker's loggers at DEBUG, captured on the root logger."""
    handler = _Lines()
    levels = {name: logging.getLogger(name).level for name in CAPTURED}
    for name in CAPTURED:
        logging.getLogger(name).setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


@tool(retry=1)
async def deploy(service: str) -> str:
    """Deploy a service.

    Args:
        service: The service.
    """
    raise RuntimeError(f"registry refused key {os.environ['OPENAI_API_KEY']} for {service}")


class _ToolsThenProvider:
    """Calls the failing tool and the MCP tool, then asks the provider (which answers 401)."""

    def __init__(self, provider: OpenAIChatModel) -> None:
        self.provider = provider

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        if any(isinstance(item, ToolCallOutput) for item in request.transcript):
            return await self.provider(request)
        return AssistantMessage(
            tool_calls=(
                ToolCall(call_id="t1", name="deploy", arguments='{"service": "billing"}'),
                ToolCall(
                    call_id="m1",
                    name="notes__upstream_refused",
                    arguments='{"variable": "UPSTREAM_API_KEY"}',
                ),
            )
        )


def _span_texts() -> list[str]:
    return [span.to_json() for span in WORKER.get_finished_spans()]


def _metric_texts() -> list[str]:
    data = meter_provider().get_metrics_data()
    if data is None:
        return []
    return [
        json.dumps(dict(point.attributes or {}))
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    ]


async def test_a_secret_in_provider_tool_and_mcp_errors_is_nowhere(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refusing_server: str,
    worker_log: _Lines,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    tracer_provider()
    meter_provider()
    WORKER.clear()
    model = _ToolsThenProvider(OpenAIChatModel("gpt-test", base_url=refusing_server))
    notes = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(TEST_SERVER), "stdio", "--log", str(tmp_path / "mcp.jsonl")],
        env={"UPSTREAM_API_KEY": SECRET},
        trust_annotations=True,
    )
    agent = AgentConfig(model="leaky", toolkit="leaky")
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger.jsonl",
        toolkits={"leaky": Toolkit(deploy)},
        models={"leaky": model},
        mcp_servers=[notes],
    ) as h:
        assert h.plugin.interceptors, "tracing is on"
        workflow_id = await h.start(
            "deploy billing", agent=agent, options=ConversationOptions(search_attributes=False)
        )
        outputs = await h.wait_outputs(workflow_id, "t1", "m1")
        await h.wait_state(workflow_id, "model_failed")
        status = await h.conversations.status(workflow_id)
        events, _ = await h.conversations.retained_events(workflow_id)
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()

    # What failed, failed for the reasons planted, with the secret scrubbed.
    assert outputs["t1"].is_error and REDACTED in outputs["t1"].content
    assert outputs["m1"].is_error and REDACTED in outputs["m1"].content
    assert status.model_failed is not None
    assert status.model_failed.type == "ProviderAuthentication"
    assert REDACTED in status.model_failed.message

    payloads = [
        payload.data.decode("utf-8", "replace")
        for event in history.events
        for payload in payloads_of(event)
    ]
    places: dict[str, list[str]] = {
        "history payloads": payloads,
        "history": [history.to_json(), *(str(event) for event in history.events)],
        "events": [event.model_dump_json() for event in events],
        "spans": _span_texts(),
        "metric labels": _metric_texts(),
        "log": worker_log.lines,
    }
    for place, texts in places.items():
        found = [text for text in texts if SECRET in text]
        assert not found, f"the secret is in the {place}: {found[0][:2_000]}"

    # Not vacuous: the spans and the log did record the failures, scrubbed.
    chat = [s for s in WORKER.get_finished_spans() if s.name == "chat leaky"]
    assert any(
        REDACTED in str((e.attributes or {}).get("exception.message"))
        for span in chat
        for e in span.events
    )
    assert any("Incorrect API key provided" in line for line in worker_log.lines)
    assert any("registry refused key" in line and REDACTED in line for line in worker_log.lines)


def test_the_span_processor_scrubs_what_other_code_records() -> None:
    """Spans durable-tools does not start (the SDK's interceptor, any library) are scrubbed too."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    from durable_tools.redact import register_secrets

    register_secrets([SECRET])
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(worker_span_processor(SimpleSpanProcessor(exported)))
    tracer = provider.get_tracer("elsewhere")
    with tracer.start_as_current_span(
        f"GET /v1?api_key={SECRET}", attributes={"http.url": f"https://x.io/?key={SECRET}"}
    ) as span:
        span.add_event("retry", {"why": [f"token={SECRET}", "later"]})
        span.record_exception(RuntimeError(f"refused {SECRET}"))
        span.set_status(Status(StatusCode.ERROR, f"RuntimeError: refused {SECRET}"))
    with tracer.start_as_current_span("plain", attributes={"n": 1}):
        pass
    secret_span, plain = exported.get_finished_spans()
    text = secret_span.to_json()
    assert SECRET not in text and REDACTED in text
    assert secret_span.status.status_code == StatusCode.ERROR
    assert secret_span.context == secret_span.context and plain.name == "plain"


def test_log_records_are_scrubbed_after_the_expected_failure_filter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The traceback is printed scrubbed; an expected failure is still demoted to DEBUG."""
    monkeypatch.setenv("SOME_SERVICE_KEY", SECRET)
    logger = logging.getLogger("temporalio.activity")
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(logger, "level", logging.DEBUG)
    logger.addFilter(ExpectedFailureFilter())
    install_log_redaction()
    assert isinstance(logger.filters[-1], RedactingFilter)
    handler = _Lines()
    logger.addHandler(handler)
    try:
        try:
            raise ApplicationError(f"refused {SECRET}", type="ProviderAuthentication")
        except ApplicationError as exc:
            mark_expected(exc)
            logger.warning("call failed with %s", exc, exc_info=True)
    finally:
        logger.removeHandler(handler)
    (line,) = handler.lines
    assert SECRET not in line
    assert line.startswith(
        f"temporalio.activity DEBUG call failed with ProviderAuthentication: refused {REDACTED}"
    )
    assert (
        "Traceback" in line
        and f"ApplicationError: ProviderAuthentication: refused {REDACTED}" in line
    )
