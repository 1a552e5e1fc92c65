"""Tracing: one span per tool call and per model call, in one trace, across worker restarts.

The SDK's in-memory exporters of `tracing_support` collect the spans. A conversation
runs on worker 1 until it waits for an approval; worker 1 stops; the
approval is sent while no worker runs; worker 2 replays the history and
finishes the conversation.
"""

from __future__ import annotations

import json
import linecache
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT, LEDGER_ENV, MODELS, TOOLKITS, turns
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, NoOpTracerProvider, ProxyTracerProvider
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from tracing_support import ONCE, RAW, tracer_provider
from workflow_helpers import eventually, outputs_by_id, quiet

from durable_tools import telemetry
from durable_tools.approvals import call_digest
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.worker.telemetry import ExportOnce


def conversation_spans(exporter: InMemorySpanExporter, workflow_id: str) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("gen_ai.conversation.id") == workflow_id
    ]


def named(spans: Sequence[ReadableSpan], operation: str) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == operation]


def attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {})[key]


SCRIPT = turns(
    [
        ("w1", "get_weather", {"city": "Paris"}),
        ("w2", "get_weather", {"city": "Oslo"}),
        ("r1", "refund", {"order": "A-1", "amount": 5}),
    ],
    [("w3", "get_weather", {"city": "Rome"})],
)


async def run_across_restart(
    env: WorkflowEnvironment, task_queue: str, *, cached: bool, queries: bool
) -> str:
    """Run SCRIPT on worker 1, stop it at the approval, approve, finish on worker 2.

    `cached=False`: both workers run with `max_cached_workflows=0`, so every
    workflow task replays the whole history. `queries=False`: nothing queries
    the workflow (the model activity gets the transcript as input; the test
    polls the history), so no query makes a worker replay it.
    """
    workflow_id = f"traced-{uuid.uuid4()}"
    options: dict[str, Any] = {} if cached else {"max_cached_workflows": 0}

    def conversations() -> tuple[Client, Conversations]:
        plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
        assert plugin.interceptors, "tracing is on with a replay-safe global provider"
        client = Client(**{**env.client.config(), "plugins": [plugin]})
        return client, Conversations(client, task_queue=task_queue)

    async def event_types(client: Client) -> list[str]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        return [str(e.WhichOneof("attributes")) for e in history.events]

    client, convs = conversations()
    async with Worker(client, task_queue=task_queue, **options):
        await convs.start(
            workflow_id,
            agent=AGENT,
            message=SCRIPT,
            options=ConversationOptions(
                search_attributes=False, transcript_in_activity_input=not queries
            ),
        )

        async def waiting() -> bool:  # the model turn and two weather calls done, r1 waits
            types = await event_types(client)
            return (
                types.count("activity_task_completed_event_attributes") >= 3
                and types[-1] == "workflow_task_completed_event_attributes"
            )

        await eventually(waiting, what="the approval wait of r1")
    # No worker runs now: the decision is a durable signal.
    await convs.approve(
        workflow_id,
        "r1",
        arguments_hash=call_digest("refund", "r1", json.dumps({"order": "A-1", "amount": 5})),
        decided_by="ana",
    )

    client, convs = conversations()
    async with Worker(client, task_queue=task_queue, **options):

        async def done() -> bool:
            types = await event_types(client)  # 3 model turns + 4 tools, then the idle timer
            return (
                types.count("activity_task_completed_event_attributes") >= 7
                and types[-1] == "timer_started_event_attributes"
            )

        await eventually(done, what="the conversation's last turn", timeout=40)
        if queries:
            # The queries that make the uncached worker replay the whole history
            # (and may re-run its last task as if live), asked once the run is
            # quiet: on a worker without a cache a query that meets one of the
            # run's workflow tasks can be dropped, and its caller waits out the
            # server's 30 s query timeout (`quiet`; seen in 3 of 4 full runs).
            await quiet(client.get_workflow_handle(workflow_id))
            items = await convs.history(workflow_id)
            assert "w3" in outputs_by_id(items)
            assert (await convs.status(workflow_id)).state == "idle"
        await client.get_workflow_handle(workflow_id).terminate("test over")
    return workflow_id


def assert_one_trace_of_exact_spans(spans: list[ReadableSpan]) -> None:
    tools = named(spans, "execute_tool")
    chats = named(spans, "chat")
    turn_spans = named(spans, "invoke_agent")

    by_call = Counter(attr(s, "gen_ai.tool.call.id") for s in tools)
    assert by_call == {"w1": 1, "w2": 1, "r1": 1, "w3": 1}
    assert {s.name for s in tools} == {"execute_tool get_weather", "execute_tool refund"}
    assert all(attr(s, "durable_tools.tool.outcome") == "ok" for s in tools)
    assert all(attr(s, "gen_ai.tool.name") in ("get_weather", "refund") for s in tools)
    # Three model calls: two turns with calls, one that answers "done".
    assert len(chats) == 3
    assert {s.name for s in chats} == {"chat directed"}
    assert all(attr(s, "gen_ai.request.model") == "directed" for s in chats)
    assert sorted(attr(s, "durable_tools.turn") for s in turn_spans) == [1, 2, 3]
    assert {s.name for s in turn_spans} == {"invoke_agent main"}

    assert len({s.context.trace_id for s in spans}) == 1, "the conversation spans several traces"
    turn_ids = {s.context.span_id for s in turn_spans}
    for span in [*tools, *chats]:
        assert span.parent is not None and span.parent.span_id in turn_ids, span.name

    first = next(s for s in turn_spans if attr(s, "durable_tools.turn") == 1)
    events = {e.name: dict(e.attributes or {}) for e in first.events}
    assert events["approval.requested"]["gen_ai.tool.call.id"] == "r1"
    assert events["approval.decided"]["durable_tools.approval.decided_by"] == "ana"
    assert events["approval.decided"]["durable_tools.approval.decision"] == "approved"
    refund = next(s for s in tools if attr(s, "gen_ai.tool.call.id") == "r1")
    assert refund.parent is not None and refund.parent.span_id == first.context.span_id


async def test_uncached_replays_export_each_span_once_in_one_trace(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every workflow task replays the history; the replay-safe tracer ends each span once."""
    tracer_provider()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    workflow_id = await run_across_restart(dev_env, task_queue, cached=False, queries=False)
    assert_one_trace_of_exact_spans(conversation_spans(RAW, workflow_id))


async def test_evicted_runs_format_no_traceback(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26, item 4: a run evicted mid-turn (here at every task) records no failure.

    Its coroutines unwind while it counts as replaying; a turn's span does
    not end then, so recording the exception would only format a traceback,
    which reads the workflow's source files into `linecache` for good.
    """
    tracer_provider()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    workflow_sources = str(Path(telemetry.__file__).parent / "workflows")
    for name in [n for n in linecache.cache if n.startswith(workflow_sources)]:
        del linecache.cache[name]
    linecache.cache.pop(str(Path(telemetry.__file__)), None)  # an earlier test's failure read it
    await run_across_restart(dev_env, task_queue, cached=False, queries=False)
    assert not [n for n in linecache.cache if n.startswith(workflow_sources)]
    assert str(Path(telemetry.__file__)) not in linecache.cache


async def test_restarted_worker_with_queries_exports_each_span_once(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker 2 replays once and caches the workflow; queries read the cached instance."""
    tracer_provider()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    workflow_id = await run_across_restart(dev_env, task_queue, cached=True, queries=True)
    assert_one_trace_of_exact_spans(conversation_spans(RAW, workflow_id))


async def test_queries_on_uncached_workflows_export_each_span_once_through_export_once(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query replaying an uncached workflow may re-run its last task as if live.

    Without `ExportOnce` a turn's span is then ended twice (seen in 9 of
    18 runs here); through it, each span is exported once.
    """
    tracer_provider()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    workflow_id = await run_across_restart(dev_env, task_queue, cached=False, queries=True)
    assert_one_trace_of_exact_spans(conversation_spans(ONCE, workflow_id))


def test_export_once_passes_a_span_id_once() -> None:
    provider = create_tracer_provider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(ExportOnce(SimpleSpanProcessor(exporter), remember=2))
    tracer = provider.get_tracer("t")
    span = tracer.start_span("twice")
    span.end()
    # The same span object ended again stands for a re-run that ends the same span id.
    span._span._end_time = None  # type: ignore[attr-defined]
    span.end()
    others = [tracer.start_span(f"other {n}") for n in range(3)]
    for other in others:
        other.end()
    assert [s.name for s in exporter.get_finished_spans()] == [
        "twice",
        "other 0",
        "other 1",
        "other 2",
    ]


@pytest.mark.parametrize("unset", [ProxyTracerProvider(), NoOpTracerProvider()])
def test_without_a_tracer_provider_the_activity_spans_are_not_started(
    monkeypatch: pytest.MonkeyPatch, unset: Any
) -> None:
    # OpenTelemetry's default provider records nothing: no span is started,
    # and the current context stays as it was (nothing attached per turn).
    monkeypatch.setattr(otel_trace, "get_tracer_provider", lambda: unset)
    outside = otel_trace.get_current_span()
    with telemetry.tool_span("echo", "c1", 1, "wf") as tool_span:
        assert tool_span is INVALID_SPAN
        assert otel_trace.get_current_span() is outside
        telemetry.finish_tool_span(tool_span, "echo", "ok", 0.01)
    with telemetry.chat_span("gpt-x", "wf") as chat_span:
        assert chat_span is INVALID_SPAN
        assert otel_trace.get_current_span() is outside


def test_with_a_tracer_provider_the_activity_spans_record(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    provider = SdkTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(otel_trace, "get_tracer_provider", lambda: provider)
    monkeypatch.setattr(telemetry, "_tracer", lambda: provider.get_tracer("test"))
    with telemetry.tool_span("echo", "c1", 1, "wf") as span:
        assert span.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["execute_tool echo"]
