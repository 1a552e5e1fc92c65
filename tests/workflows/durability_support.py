"""Shared parts of the durability tests (`test_durability.py`, `test_worker_kills.py`).

Bounds derived from what the tests wait for, the refund script, and readers of
a conversation's pending state, result, activity starts and outputs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_support import (
    MODELS,
    TOOLKITS,
    turns,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from durable_tools.client import Conversations
from durable_tools.conversation import (
    ConversationResult,
    PendingApproval,
    PendingState,
)
from durable_tools.transcript import (
    AssistantMessage,
    ToolCallOutput,
    TranscriptItem,
    is_reconciled,
)
from durable_tools.worker.plugin import DurableToolsPlugin

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

WAIT = 30.0
"""Upper bound of every wait in these tests (seconds)."""

STICKY_TIMEOUT = 1.0
"""Sticky schedule-to-start timeout of worker subprocesses (seconds).

When a worker dies, the workflow's next task goes to the dead worker's sticky
queue first and reaches the task queue only after this timeout (SDK default
10 s, measured here as a 10 s WorkflowTaskTimedOut gap)."""

QUERY_TIMEOUT = timedelta(seconds=5)
"""Deadline of one try of a query (see `pending_state`)."""

T = TypeVar("T")

REFUND_SCRIPT = turns(
    [("r1", "refund", {"order": "o-42", "amount": 500})],
    [("f1", "finish", {"output": "refund handled"})],
)


# ----------------------------------------------------------------- helpers


def time_client(env: WorkflowEnvironment) -> Client:
    """A client of `env` with its own plugin (a worker built on it is a fresh one)."""
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    config = env.client.config()
    config["plugins"] = [plugin]
    return Client(**config)


async def until(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = WAIT) -> T:
    """Poll `probe` until it returns something other than None (bounded)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = await probe()
                if value is not None:
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


async def pending_state(conv: Conversations, workflow_id: str) -> PendingState:
    """`Conversations.pending`, each try bounded by `QUERY_TIMEOUT`, retried up to `WAIT`.

    A query is a task for a worker. The SDK interrupts its long polls when a
    worker shuts down, and a task the server hands to such a poll in that
    moment can be lost. Once in ~350 runs the first query after worker A
    stopped hung for 30 s (probably that; not confirmed), so a try that times
    out is retried. A query that fails is not retried.
    """
    handle = conv.client.get_workflow_handle(workflow_id)

    async def probe() -> PendingState | None:
        try:
            return await handle.query(
                "pending", result_type=PendingState, rpc_timeout=QUERY_TIMEOUT
            )
        except RPCError as exc:
            # The test server answers DEADLINE_EXCEEDED; the SDK's own
            # deadline surfaces as CANCELLED ("Timeout expired").
            if exc.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise
            return None

    return await until(probe, f"an answer to the `pending` query of {workflow_id}")


async def pending_approval(conv: Conversations, workflow_id: str) -> PendingApproval:
    async def probe() -> PendingApproval | None:
        approvals = (await pending_state(conv, workflow_id)).approvals
        return approvals[0] if approvals else None

    return await until(probe, f"an approval pending in {workflow_id}")


async def result_of(conv: Conversations, workflow_id: str) -> ConversationResult:
    async with asyncio.timeout(WAIT):
        return await conv.result(workflow_id)


async def activity_starts(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str, int]]:
    """(activity type, worker identity, attempt) of every started activity."""
    scheduled: dict[int, str] = {}
    starts: list[tuple[str, str, int]] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            starts.append((scheduled[attrs.scheduled_event_id], attrs.identity, attrs.attempt))
    return starts


async def event_types(handle: WorkflowHandle[Any, Any]) -> list[EventType.ValueType]:
    return [event.event_type async for event in handle.fetch_history_events()]


def outputs_per_call(transcript: list[TranscriptItem]) -> dict[str, int]:
    """How many outputs each call of the transcript has (0 for none)."""
    counts = {
        call.call_id: 0
        for item in transcript
        if isinstance(item, AssistantMessage)
        for call in item.tool_calls
    }
    for item in transcript:
        if isinstance(item, ToolCallOutput):
            counts[item.call_id] = counts.get(item.call_id, 0) + 1
    return counts


def output_of(transcript: list[TranscriptItem], call_id: str) -> ToolCallOutput:
    (found,) = [i for i in transcript if isinstance(i, ToolCallOutput) and i.call_id == call_id]
    return found


def assert_reconciled(transcript: list[TranscriptItem]) -> None:
    assert is_reconciled(transcript), transcript
    counts = outputs_per_call(transcript)
    assert counts and set(counts.values()) == {1}, counts


# ------------------------------------------------- approval 3 days later
