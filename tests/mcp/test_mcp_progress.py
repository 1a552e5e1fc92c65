"""MCP progress is a sign of life on the dev server, over stdio as over HTTP.

`@modelcontextprotocol/server-everything`'s `trigger-long-running-operation`
runs 45 s and reports progress every 5 s (9 steps) over stdio, under the
server's 30 s heartbeat timeout. Its progress notifications reach the tool
activity's own context: each one heartbeats the attempt and becomes a
`tool_progress` event, so the call succeeds on its first attempt. (Before,
every notification raised `Not in activity context` in the worker: no event,
no heartbeat, and the keepalive took the progress for a heartbeat and sent
none either, so all 4 attempts timed out on the heartbeat.) Over streamable
HTTP a shorter call's progress becomes `tool_progress` events the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from agent_support import turns
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

from durable_tools.events import ConversationEvent
from durable_tools.mcp import McpServerConfig
from durable_tools.transcript import ToolCallOutput
from durable_tools.worker.dev_server import free_port

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = REPO / "node_modules" / ".bin" / "mcp-server-everything"
DURATION, STEPS = 45, 9


async def _long_call(
    h: Harness, server: str, duration: int, steps: int
) -> tuple[ToolCallOutput, list[ConversationEvent]]:
    """Run `trigger-long-running-operation` in a conversation; its output and events."""
    workflow_id = await h.start(
        turns(
            [
                (
                    "long",
                    f"{server}__trigger-long-running-operation",
                    {"duration": duration, "steps": steps},
                )
            ]
        )
    )
    events: list[ConversationEvent] = []
    async with asyncio.timeout(duration + 60):
        async for event in h.conversations.events(workflow_id):
            events.append(event)
            if event.kind == "tool_call_finished" and event.call_id == "long":
                break
    outputs = await h.wait_outputs(workflow_id, "long")
    return outputs["long"], events


def _check(
    output: ToolCallOutput, events: list[ConversationEvent], duration: int, steps: int
) -> list[int]:
    """The call succeeded on its first attempt; the steps its progress events reported."""
    assert not output.is_error, output
    assert f"Duration: {duration} seconds, Steps: {steps}" in output.content
    finished = events[-1]
    assert (finished.outcome, finished.attempt) == ("ok", 1)
    assert not [e for e in events if e.kind == "tool_attempt_failed"]
    reported = [
        json.loads(e.text or "null")
        for e in events
        if e.kind == "tool_progress" and e.call_id == "long"
    ]
    assert all(r["total"] == steps for r in reported), reported
    progress = [int(r["progress"]) for r in reported]
    assert progress == sorted(progress), progress
    return progress


@pytest.mark.timeout(180)  # the tool alone takes 45 s
async def test_a_45_s_stdio_tool_reporting_progress_succeeds_on_its_first_attempt(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    server = McpServerConfig(
        name="every", command=str(_everything()), args=["stdio"], trust_annotations=True
    )
    assert server.heartbeat_timeout == 30 < DURATION  # the call outlives one heartbeat timeout
    async with running(dev_env, task_queue, tmp_path / "ledger", mcp_servers=[server]) as h:
        output, events = await _long_call(h, "every", DURATION, STEPS)
    progress = _check(output, events, DURATION, STEPS)
    assert [e.attempt for e in events if e.kind == "tool_attempt_started"] == [1]
    # Throttled, the latest value each time: several of the 9 steps, up to the last ones.
    assert len(progress) >= 3 and progress[-1] >= STEPS - 1, progress


async def test_progress_over_streamable_http_becomes_tool_progress(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    duration, steps = 4, 4
    with _everything_over_http() as url:
        server = McpServerConfig(name="web", url=url, trust_annotations=True)
        async with running(dev_env, task_queue, tmp_path / "ledger", mcp_servers=[server]) as h:
            output, events = await _long_call(h, "web", duration, steps)
    progress = _check(output, events, duration, steps)
    assert progress, events


def _everything() -> Path:
    if not EVERYTHING.exists():
        pytest.fail(f"{EVERYTHING} is missing: run `npm ci` (or `make test`)")
    return EVERYTHING


@contextmanager
def _everything_over_http() -> Iterator[str]:
    """server-everything over streamable HTTP on a free port of 127.0.0.1; its URL."""
    port = free_port()
    process = subprocess.Popen(
        [str(_everything()), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("server-everything did not listen within 30 s") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)
