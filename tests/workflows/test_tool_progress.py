"""A local tool's `emit` heartbeats its attempt and becomes `tool_progress` events.

On the dev server: a sync tool emits from its thread (the worker's pool) and
an async tool emits from a task it started, which is not the activity's own
task. Each value is the attempt's heartbeat details while it runs (read with
`describe`, as `temporal workflow describe` shows it) and a `tool_progress`
event of its call. (MCP progress, which arrives from the MCP session's
reader task, is tests/mcp/test_mcp_progress.py.)
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from pathlib import Path
from typing import Any

from agent_support import turns
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools import Toolkit, tool
from durable_tools.conversation import AgentConfig
from durable_tools.events import ConversationEvent
from durable_tools.tools import Emit, ToolContext

STEPS = 8
STEP_SECONDS = 0.4


@tool
def report_sync(emit: Emit, ctx: ToolContext) -> str:
    """Report STEPS steps from a thread."""
    for step in range(1, STEPS + 1):
        emit({"sync_step": step})
        ctx.cancellation.wait(STEP_SECONDS)
    return "reported"


@tool
async def report_async(emit: Emit) -> str:
    """Report STEPS steps from a task of its own."""

    async def steps() -> None:
        for step in range(1, STEPS + 1):
            emit({"async_step": step})
            await asyncio.sleep(STEP_SECONDS)

    # A task with an empty context, like a library's background task.
    loop = asyncio.get_running_loop()
    await loop.create_task(steps(), context=contextvars.Context())
    return "reported"


KIT = Toolkit(report_sync, report_async, label="progress")
AGENT = AgentConfig(name="main", model="directed", toolkit="progress")


async def _heartbeat_details(h: Harness, workflow_id: str, key: str) -> list[Any]:
    """The heartbeat details of the workflow's pending tool activities that carry `key`."""
    found: list[Any] = []
    description = await h.client.get_workflow_handle(workflow_id).describe()
    for pending in description.raw_description.pending_activities:
        if pending.HasField("heartbeat_details"):
            for value in await h.client.data_converter.decode(
                list(pending.heartbeat_details.payloads)
            ):
                if isinstance(value, dict) and key in value:
                    found.append(value)
    return found


async def test_emit_heartbeats_and_becomes_tool_progress_from_a_thread_and_a_foreign_task(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"progress": KIT}) as h:
        workflow_id = await h.start(
            turns([("p1", "report_sync", {}), ("p2", "report_async", {})]), agent=AGENT
        )
        for key in ("sync_step", "async_step"):

            async def beating(key: str = key) -> list[Any]:
                return await _heartbeat_details(h, workflow_id, key)

            details = await eventually(beating, what=f"a heartbeat carrying {key}")
            assert details[0][key] >= 1
        events: list[ConversationEvent] = []
        async with asyncio.timeout(30):
            async for event in h.conversations.events(workflow_id):
                events.append(event)
                if event.kind == "turn_finished" and event.turn == 2:
                    break
        outputs = await h.wait_outputs(workflow_id, "p1", "p2")
    assert all(not o.is_error and "reported" in o.content for o in outputs.values()), outputs
    for call_id, key in (("p1", "sync_step"), ("p2", "async_step")):
        steps = [
            json.loads(e.text or "null")[key]
            for e in events
            if e.kind == "tool_progress" and e.call_id == call_id
        ]
        assert steps and steps == sorted(steps), (call_id, steps)
