"""Helpers for the `AgentWorkflow` integration tests in tests/workflows/.

`running(...)` runs a real worker (the `DurableToolsPlugin` with the shared
test toolkit and fresh scripted models) against one of the conftest servers
and yields a `Harness`: a `Conversations` client plus bounded polling helpers.
Every wait here has a deadline, or (`quiet`) ends with the run's own work;
nothing polls forever.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agent_support import AGENT, TOOLKITS, directed, read_ledger
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.agents import Agent
from durable_tools.budgets import ModelPrice
from durable_tools.client import Conversations
from durable_tools.conversation import (
    AgentConfig,
    ConversationOptions,
    PendingApproval,
    PendingInteraction,
)
from durable_tools.mcp import McpServerConfig
from durable_tools.models.base import Model
from durable_tools.policies import Policy
from durable_tools.storage import PayloadStorage
from durable_tools.testing import ScriptedModel, settled, terminate_running
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, ToolCallOutput, TranscriptItem
from durable_tools.webhooks import Webhook
from durable_tools.worker.plugin import DurableToolsPlugin

STICKY_SCHEDULE_TO_START_SECONDS = 10.0
"""`Worker(sticky_queue_schedule_to_start_timeout=...)`'s default (temporalio 1.35)."""
WORKFLOW_TASK_TIMEOUT_SECONDS = 10.0
"""A workflow execution's task timeout when its start sets none (the server's default)."""
WAIT_SECONDS = STICKY_SCHEDULE_TO_START_SECONDS + WORKFLOW_TASK_TIMEOUT_SECONDS
"""How long a step the tests wait for may take: one workflow task at most 2 tries late.

A step that needs one workflow task may find it on the sticky queue of a
worker that is gone or too busy (the server moves it to the task queue once
the sticky schedule-to-start timeout passes), then lose that task once more
to a workflow task timeout; the activities the tests wait for take well
under a second, and a test that waits for longer work adds its length.
"""

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    what: str,
    timeout: float = WAIT_SECONDS,
    interval: float = 0.05,
) -> T:
    """Await `probe()` until it returns a truthy value; fail after `timeout` seconds.

    Transient RPC / query errors (e.g. a query racing the first workflow task)
    are retried until the deadline and reported if it passes.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await probe()
            if last:
                return last
        except (RPCError, WorkflowQueryFailedError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; last: {last!r}"
            )
        await asyncio.sleep(interval)


async def quiet(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the run has no workflow task and no activity in flight.

    For workers with `max_cached_workflows=0`, before a query. Such a worker
    replays the run for every task and evicts it after; a query that reaches
    it while it works on the same run (a workflow task, or another query such
    as the model activity's transcript read) can be dropped at that eviction
    (temporalio's core logs "There were leftover buffered tasks when evicting
    run"), and the caller waits out the server's query timeout: 30 s here,
    while the run itself finished its work in under a second. A query sent
    once the run is quiet meets nothing on the worker to collide with.

    Asks the server (DescribeWorkflowExecution), never the worker. Bounded by
    the run's own work: a signal's workflow task is scheduled before `signal`
    returns, and each activity completion schedules the next task, so the run
    is quiet only once everything that followed has been done.
    """
    while not await settled(handle):
        await asyncio.sleep(0.05)


def outputs_by_id(items: Sequence[TranscriptItem]) -> dict[str, ToolCallOutput]:
    """Tool outputs of a transcript by call id (asserts each call id has one output)."""
    found: dict[str, ToolCallOutput] = {}
    for item in items:
        if isinstance(item, ToolCallOutput):
            assert item.call_id not in found, f"two outputs for {item.call_id!r}"
            found[item.call_id] = item
    return found


def assistant_texts(items: Sequence[TranscriptItem]) -> list[str]:
    return [i.text for i in items if isinstance(i, AssistantMessage) and i.text]


@dataclass
class Harness:
    """A running worker on `task_queue` and a client for its conversations."""

    env: WorkflowEnvironment
    client: Client
    conversations: Conversations
    models: dict[str, ScriptedModel]
    ledger: Path
    task_queue: str
    plugin: DurableToolsPlugin
    started: list[str] = field(default_factory=list[str])
    handles: dict[str, WorkflowHandle[Any, Any]] = field(
        default_factory=dict[str, WorkflowHandle[Any, Any]]
    )

    async def start(
        self,
        message: str | None = None,
        *,
        options: ConversationOptions | None = None,
        handoffs: Sequence[AgentConfig] = (),
        agent: AgentConfig = AGENT,
        workflow_id: str | None = None,
        team: str | None = None,
    ) -> str:
        workflow_id = workflow_id or f"conv-{uuid.uuid4()}"
        self.started.append(workflow_id)
        self.handles[workflow_id] = await self.conversations.start(
            workflow_id,
            agent=agent,
            message=message,
            handoffs=handoffs,
            options=options or ConversationOptions(search_attributes=True),
            team=team,
        )
        return workflow_id

    def ledger_rows(self, tool: str | None = None) -> list[dict[str, Any]]:
        return [r for r in read_ledger(self.ledger) if tool is None or r.get("tool") == tool]

    async def wait_outputs(
        self, workflow_id: str, *call_ids: str, timeout: float = WAIT_SECONDS
    ) -> dict[str, ToolCallOutput]:
        async def probe() -> dict[str, ToolCallOutput] | None:
            found = outputs_by_id(await self.conversations.history(workflow_id))
            return found if all(c in found for c in call_ids) else None

        return await eventually(probe, what=f"outputs of {call_ids}", timeout=timeout)

    async def wait_assistant_text(
        self, workflow_id: str, text: str, *, timeout: float = WAIT_SECONDS
    ) -> list[TranscriptItem]:
        async def probe() -> list[TranscriptItem] | None:
            items = await self.conversations.history(workflow_id)
            return items if text in assistant_texts(items) else None

        return await eventually(probe, what=f"assistant text {text!r}", timeout=timeout)

    async def wait_approval(self, workflow_id: str, call_id: str) -> PendingApproval:
        async def probe() -> PendingApproval | None:
            pending = await self.conversations.pending(workflow_id)
            return next((a for a in pending.approvals if a.call_id == call_id), None)

        return await eventually(probe, what=f"pending approval of {call_id!r}")

    async def wait_interaction(self, workflow_id: str, call_id: str) -> PendingInteraction:
        async def probe() -> PendingInteraction | None:
            pending = await self.conversations.pending(workflow_id)
            return next((i for i in pending.interactions if i.call_id == call_id), None)

        return await eventually(probe, what=f"pending interaction of {call_id!r}")

    async def wait_state(self, workflow_id: str, state: str) -> None:
        async def probe() -> bool:
            return (await self.conversations.status(workflow_id)).state == state

        await eventually(probe, what=f"status state {state!r}")

    async def result(self, workflow_id: str, *, timeout: float = WAIT_SECONDS) -> Any:
        """The conversation's result, through the handle `start` returned.

        On the time-skipping server only that handle's `result()` lets the
        server skip time while it waits (the SDK's auto time skipping).
        """
        async with asyncio.timeout(timeout):
            return await self.handles[workflow_id].result()

    async def execution_status(self, workflow_id: str) -> WorkflowExecutionStatus | None:
        return (await self.client.get_workflow_handle(workflow_id).describe()).status


@asynccontextmanager
async def running(
    env: WorkflowEnvironment,
    task_queue: str,
    ledger: Path,
    *,
    toolkits: Mapping[str, Toolkit] | None = None,
    models: Mapping[str, Model] | None = None,
    mcp_servers: Sequence[McpServerConfig] = (),
    agents: Mapping[str, Agent] | None = None,
    allow_offline_models: bool = False,
    scripts_dir: Path | None = None,
    storage: PayloadStorage | None = None,
    tool_threads: int | None = None,
    policies: Mapping[str, Policy] | None = None,
    prices: Mapping[str, ModelPrice] | None = None,
    webhooks: Mapping[str, Webhook] | None = None,
) -> AsyncIterator[Harness]:
    """Run a durable-tools worker on `task_queue` for the duration of the block.

    `toolkits` and `models` are registered beside the shared ones (`tests`;
    `directed`, `specialist-model`); the tools of
    `mcp_servers` join every toolkit (the harness's `plugin.mcp` has their stats).
    Conversations started through the harness that are still running when the
    block ends are terminated, so no timer of theirs outlives the test (on the
    time-skipping server a leftover workflow task would stall time skipping).
    """
    scripted = {
        "directed": ScriptedModel(directed),
        "specialist-model": ScriptedModel(directed),
        **(models or {}),
    }
    plugin = DurableToolsPlugin(
        toolkits={**TOOLKITS, **(toolkits or {})},
        models={**scripted, **(models or {})},
        mcp_servers=mcp_servers,
        agents=agents,
        allow_offline_models=allow_offline_models,
        scripts_dir=scripts_dir,
        storage=storage,
        tool_threads=tool_threads,
        policies=policies,
        prices=prices,
        webhooks=webhooks,
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    harness = Harness(
        env=env,
        client=client,
        conversations=Conversations(client, task_queue=task_queue),
        models=scripted,
        ledger=ledger,
        task_queue=task_queue,
        plugin=plugin,
    )
    async with Worker(client, task_queue=task_queue):
        try:
            yield harness
        finally:
            await terminate_running(client, harness.started)


def payloads_of(message: Message, *, skip: str = "") -> list[Payload]:
    """Every payload a history event (or any API message) holds: inputs, results,
    headers, failure details; fields named `skip` (e.g. `user_metadata`) left out."""
    if isinstance(message, Payload):
        return [message]
    found: list[Payload] = []
    for described, value in message.ListFields():
        if described.name == skip or described.message_type is None:
            continue
        if described.message_type.GetOptions().map_entry:
            values = list(value.values())
        elif described.is_repeated:
            values = list(value)
        else:
            values = [value]
        for item in values:
            if isinstance(item, Message):
                found += payloads_of(item, skip=skip)
    return found


ROUTING_PROPAGATION_SECONDS = 2 * 60 + 5
"""How long the server may take to hand a new current version to the task queues.

Its worker-deployment workflow does it with an activity of 1 minute's
start-to-close timeout, retried without limit (temporalio/temporal,
service/worker/workerdeployment/util.go, `propagationActivityOptions`); on
a loaded 2-core machine one took more than 30 s. Two attempts, and the
retry's 100 ms backoff.
"""

VERSIONED_TEST_TIMEOUT = 120 + 2 * ROUTING_PROPAGATION_SECONDS
"""pytest-timeout for a test that sets the current version (twice at most, each
possibly waiting `ROUTING_PROPAGATION_SECONDS`), beside pyproject's 120 s."""


async def set_current_version(env: WorkflowEnvironment, deployment: str, build_id: str) -> None:
    """Make `deployment:build_id` the current Worker Deployment Version (the Temporal CLI).

    The version exists once a worker of it has polled: tried until it does
    (30 s). Returns once the server says the routing change reached the
    deployment's task queues (`routing_config_update_state`), within
    `ROUTING_PROPAGATION_SECONDS`; a test calling it is bounded by
    `VERSIONED_TEST_TIMEOUT`.
    """
    from durable_tools.worker.dev_server import find_temporal_cli

    async def attempt() -> bool:
        process = await asyncio.create_subprocess_exec(
            find_temporal_cli(),
            *("worker", "deployment", "set-current-version"),
            *("--deployment-name", deployment, "--build-id", build_id, "--yes"),
            *("--address", env.client.service_client.config.target_host),
            *("--namespace", env.client.namespace),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await asyncio.wait_for(process.communicate(), 30)
        return process.returncode == 0

    await eventually(attempt, what=f"{deployment}:{build_id} current", timeout=30, interval=0.5)

    # The server records the new current version at once and hands it to the
    # task queues afterwards: a run started meanwhile may start under the old
    # routing and, seeing the new current version at its first check, move.
    from temporalio.api.enums.v1 import RoutingConfigUpdateState
    from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest

    async def propagated() -> bool:
        described = await env.client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=env.client.namespace, deployment_name=deployment
            )
        )
        info = described.worker_deployment_info
        state = info.routing_config_update_state
        current = info.routing_config.current_deployment_version.build_id
        return current == build_id and state in (
            RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED,
            RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_UNSPECIFIED,  # older servers
        )

    await eventually(
        propagated,
        what=f"{deployment}:{build_id} routed",
        timeout=ROUTING_PROPAGATION_SECONDS,
        interval=0.1,
    )
