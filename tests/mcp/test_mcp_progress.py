"""MCP progress is a sign of life on the dev server, over stdio as over HTTP.

`@modelcontextprotocol/server-everything`'s `trigger-long-running-operation`
runs 45 s and reports progress every 5 s (9 steps) over stdio, under the
server's 30 s heartbeat timeout. Its progress notifications reach the tool
activity's own context: each one heartbeats the attempt and becomes a
`tool_progress` event, so the call succeeds on its first attempt. (Before,
every notification raised `Not in activity context` in the worker: no event,
no heartbeat, and the keepalive took the progress for a heartbeat and sent
none either, so all 4 attempts timed out on the heartbeat.)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agent_support import turns
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import running

from durable_tools.events import ConversationEvent
from durable_tools.mcp import McpServerConfig

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = REPO / "node_modules" / ".bin" / "mcp-server-everything"
DURATION, STEPS = 45, 9


@pytest.mark.timeout(180)  # the tool alone takes 45 s
async def test_a_45_s_stdio_tool_reporting_progress_succeeds_on_its_first_attempt(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    if not EVERYTHING.exists():
        pytest.fail(f"{EVERYTHING} is missing: run `npm ci` (or `make test`)")
    server = McpServerConfig(
        name="every", command=str(EVERYTHING), args=["stdio"], trust_annotations=True
    )
    assert server.heartbeat_timeout == 30 < DURATION  # the call outlives one heartbeat timeout
    async with running(dev_env, task_queue, tmp_path / "ledger", mcp_servers=[server]) as h:
        workflow_id = await h.start(
            turns(
                [
                    (
                        "long",
                        "every__trigger-long-running-operation",
                        {"duration": DURATION, "steps": STEPS},
                    )
                ]
            )
        )
        events: list[ConversationEvent] = []
        async with asyncio.timeout(DURATION + 60):
            async for event in h.conversations.events(workflow_id):
                events.append(event)
                if event.kind == "tool_call_finished" and event.call_id == "long":
                    break
        outputs = await h.wait_outputs(workflow_id, "long")

    output = outputs["long"]
    assert not output.is_error, output
    assert f"Duration: {DURATION} seconds, Steps: {STEPS}" in output.content
    finished = events[-1]
    assert (finished.outcome, finished.attempt) == ("ok", 1)
    started = [e.attempt for e in events if e.kind == "tool_attempt_started"]
    assert started == [1]
    assert not [e for e in events if e.kind == "tool_attempt_failed"]
    # Throttled, the latest value each time: several of the 9 steps, in order.
    steps = [
        json.loads(e.text or "null")
        for e in events
        if e.kind == "tool_progress" and e.call_id == "long"
    ]
    reported = [s["progress"] for s in steps if isinstance(s, dict) and "progress" in s]
    assert len(reported) >= 3, steps
    assert reported == sorted(reported) and reported[-1] >= STEPS - 1, reported
    assert all(s["total"] == STEPS for s in steps if "progress" in s)
