"""Shared helpers of the MCP tests (tests/mcp/, and the CLI's and inbox's MCP tests in
tests/worker/): start toolsets, run the test server, read its log, a model that samples."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from agent_support import MODELS, TOOLKITS, directed
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker

from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.conversation import AgentConfig
from durable_tools.mcp import McpServerConfig, McpToolsets
from durable_tools.models.base import ModelRequest
from durable_tools.toolkit import compose
from durable_tools.transcript import AssistantMessage, Usage
from durable_tools.worker.dev_server import free_port
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow


@asynccontextmanager
async def started(*servers: McpServerConfig, timeout: float = 30) -> AsyncIterator[McpToolsets]:
    """`McpToolsets` of `servers`, started (every server up, none skipped), closed on exit."""
    toolsets = McpToolsets(list(servers))
    async with asyncio.timeout(timeout):
        await toolsets.start()
    try:
        assert toolsets.skipped == {}
        yield toolsets
    finally:
        await toolsets.aclose()


TEST_SERVER = Path(__file__).resolve().parent / "mcp" / "mcp_test_server.py"
"""The project's MCP test server (`tests/mcp/mcp_test_server.py`)."""


def stdio_test_server(log: Path, name: str = "notes", **fields: Any) -> McpServerConfig:
    """The test server as a stdio server, logging to `log` (JSON lines)."""
    return McpServerConfig(
        name=name,
        command=sys.executable,
        args=[str(TEST_SERVER), "stdio", "--log", str(log)],
        **fields,
    )


def server_log(log: Path, event: str) -> list[dict[str, Any]]:
    """The test server's log records (`--log`, JSON lines) of one `event` kind, oldest first."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event]


TASK_ACTIVITY_TIMEOUT = 10 + 1 + 10
"""The tool activity's start-to-close timeout of `task_test_server`: handshake + call + 10 s."""


def task_test_server(log: Path, name: str = "notes") -> McpServerConfig:
    """The test server, trusted (`survey` needs no approval), with a 1 s call timeout.

    Its tool activity's timeout is `TASK_ACTIVITY_TIMEOUT`: a `survey` of
    more seconds outlives any one activity. The handshake keeps 10 s: a
    server that starts slower (a loaded machine) would be skipped, and its
    tools unknown to the model.
    """
    return stdio_test_server(
        log,
        name,
        trust_annotations=True,
        needs_approval=False,
        handshake_timeout=10,
        call_timeout=1,
    )


HAIKU = "Waves fold into foam"
"""What `poet` answers a server's sampling request with."""

POET = AgentConfig(name="main", model="poet", toolkit="tests")
"""An agent on the `poet` model (register `{"poet": ScriptedModel(poet)}`)."""


def poet(request: ModelRequest) -> AssistantMessage:
    """A conversation's model: directed turns, and `HAIKU` when a server samples."""
    if request.purpose == "sampling":
        return AssistantMessage(
            text=HAIKU, usage=Usage(input_tokens=7, output_tokens=5), stop_reason="end_turn"
        )
    return directed(request).model_copy(update={"usage": Usage(input_tokens=1, output_tokens=1)})


@contextmanager
def http_test_server(log: Path, token_env: str) -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1 (token from `token_env`); its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), "http", "--port", str(port)]
        + ["--token-env", token_env, "--log", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("the HTTP test server exited") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("the HTTP test server did not listen within 20 s") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@asynccontextmanager
async def versioned_mcp_worker(
    client: Client,
    task_queue: str,
    version: WorkerDeploymentVersion,
    server: McpServerConfig,
    *,
    models: Mapping[str, Any] | None = None,
) -> AsyncIterator[None]:
    """A worker of one deployment version whose `tests` toolkit has `server`'s tools.

    Sandboxed, with no cached runs (each workflow task replays), so a run
    moved between versions is replayed by the version that takes it.
    `models` adds to the test models (a `poet` for sampling); the model's
    sampling activity runs too.
    """
    async with started(server) as toolsets:
        toolkits = {**TOOLKITS, "tests": compose(TOOLKITS["tests"], toolsets.toolkit())}
        acts = AgentActivities(toolkits, {**MODELS, **(models or {})})
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[AgentWorkflow],
            activities=[acts.model_turn, acts.tool_call, acts.model_sample],
            workflow_runner=sandbox_runner(),
            deployment_config=deployment_config(version),
            max_cached_workflows=0,
        ):
            yield


async def runs_by_build(client: Client, workflow_id: str) -> list[tuple[set[str], WorkflowHistory]]:
    """Each run's build ids (of its completed workflow tasks) and history, first run first."""
    runs: list[tuple[set[str], WorkflowHistory]] = []
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        builds = {
            e.workflow_task_completed_event_attributes.deployment_version.build_id
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        }
        runs.append((builds, history))
        first = history.events[0].workflow_execution_started_event_attributes
        if not first.continued_execution_run_id:
            return runs[::-1]
        run_id = first.continued_execution_run_id


async def replay_each_run(runs: list[tuple[set[str], WorkflowHistory]]) -> None:
    """Assert each run (`runs_by_build`) has no failed workflow task and replays in the sandbox."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    for builds, history in runs:
        failed = [
            e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert not failed, (builds, failed)
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, (builds, replayed.replay_failure)
