"""Workers on a namespace without durable-tools' search attributes.

A real dev server started without them (as a fresh cluster is): the worker
refuses to start with one line naming the command that registers them; with
`--no-search-attributes` a conversation runs to its end with no failed
workflow task, and its history replays on a worker with them on; once the
printed command has run, the worker starts.

The same for a worker built the README's plugin way (`DurableToolsPlugin` on
the client, `temporalio.worker.Worker(...)`), on a namespace registered on
the shared dev server (a new namespace has no custom search attributes):
`Worker.run()` and `async with Worker(...)` raise the same message as
`run_worker`, and `DurableToolsPlugin(search_attributes=False)` runs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator

import pytest
from agent_support import AGENT, MODELS, TOOLKITS, turns
from cli_process import Running, cli
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    RegisterNamespaceRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from durable_tools.client import Conversations
from durable_tools.errors import ConfigurationError
from durable_tools.worker.dev_server import DevServer
from durable_tools.worker.plugin import DurableToolsPlugin, sandbox_runner
from durable_tools.worker.runner import run_worker
from durable_tools.workflows.agent_workflow import AgentWorkflow
from durable_tools.workflows.visibility import NO_SEARCH_ATTRIBUTES_PATCH


@pytest.fixture(scope="module")
async def bare_server() -> AsyncIterator[str]:
    """A dev server with no custom search attributes; its address."""
    async with DevServer(headless=True, search_attributes={}) as server:
        yield server.address


def _command(address: str, namespace: str = "default") -> str:
    return (
        f"temporal operator search-attribute create --address {address} --namespace {namespace} "
        "--name DurableToolsPendingCount --type Int && "
        f"temporal operator search-attribute create --address {address} --namespace {namespace} "
        "--name DurableToolsPendingKinds --type KeywordList && "
        f"temporal operator search-attribute create --address {address} --namespace {namespace} "
        "--name DurableToolsTeam --type Keyword"
    )


@pytest.fixture
async def fresh_namespace(dev_env: WorkflowEnvironment) -> str:
    """A namespace registered on the shared dev server now: no custom search attributes."""
    namespace = f"fresh-{uuid.uuid4().hex[:8]}"
    service = dev_env.client.workflow_service
    await service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    async with asyncio.timeout(20):  # the frontend's namespace cache catching up
        while True:
            try:
                await service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
                return namespace
            except RPCError:
                await asyncio.sleep(0.1)


def _plugin_client(dev_env: WorkflowEnvironment, namespace: str, **options: bool) -> Client:
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS, **options)
    config = dev_env.client.config()
    config["namespace"] = namespace
    config["plugins"] = [plugin]
    return Client(**config)


async def test_plugin_worker_refuses_to_start_with_run_workers_message(
    dev_env: WorkflowEnvironment, fresh_namespace: str, task_queue: str
) -> None:
    address = dev_env.client.service_client.config.target_host
    client = _plugin_client(dev_env, fresh_namespace)
    with pytest.raises(ConfigurationError) as refused:
        await asyncio.wait_for(Worker(client, task_queue=task_queue).run(), 20)
    message = str(refused.value)
    assert "\n" not in message
    assert "lacks the search attributes of conversations" in message
    assert f"run `{_command(address, fresh_namespace)}`" in message
    assert "search_attributes=False" in message and "--no-search-attributes" in message

    # `async with` gets it too, and does not wait forever in its shutdown.
    with pytest.raises(ConfigurationError) as entered:
        # (Another task queue: a worker object, even one that never ran,
        # holds its task queue on the client until it is dropped.)
        async with asyncio.timeout(20), Worker(client, task_queue=f"{task_queue}-2"):
            await asyncio.sleep(20)
    assert str(entered.value) == message

    # One owner: run_worker refuses with the very same line.
    with pytest.raises(ConfigurationError) as from_runner:
        await asyncio.wait_for(
            run_worker(
                address, fresh_namespace, f"{task_queue}-3", TOOLKITS, MODELS, handle_signals=False
            ),
            20,
        )
    assert str(from_runner.value) == message


async def test_plugin_worker_without_search_attributes_runs_a_conversation(
    dev_env: WorkflowEnvironment, fresh_namespace: str, task_queue: str
) -> None:
    client = _plugin_client(dev_env, fresh_namespace, search_attributes=False)
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"plugin-no-sa-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue):
        await conversations.start(
            workflow_id,
            agent=AGENT,
            message=turns(
                [("c1", "get_weather", {"city": "Oslo"})], [("c2", "finish", {"output": "mild"})]
            ),
        )
        result = await asyncio.wait_for(conversations.result(workflow_id), 30)
    assert result.output == "mild"
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    types = [event.event_type for event in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in types
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED in types


async def test_worker_refuses_to_start_and_names_the_command(bare_server: str) -> None:
    done = await cli("worker", "--app", "cli_app:app", "--address", bare_server, timeout=60)
    line = done.error_line()
    assert done.code == 2
    assert "lacks the search attributes" in line
    assert f"run `{_command(bare_server)}`" in line
    assert "--no-search-attributes" in line
    assert "worker polling" not in done.stdout


async def test_no_search_attributes_runs_a_conversation_without_failed_tasks(
    bare_server: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    task_queue = f"no-sa-{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("worker") / "stderr.log"
    worker = await Running.start(
        "worker",
        "--app",
        "cli_app:app",
        "--address",
        bare_server,
        "--task-queue",
        task_queue,
        "--no-search-attributes",
        "--graceful-shutdown",
        "2",
        stderr=log,
    )
    workflow_id = f"no-sa-{uuid.uuid4().hex[:8]}"
    try:
        await worker.wait_for_line("worker polling", timeout=60)
        prompt = json.dumps(
            {
                "turns": [
                    [["c1", "get_weather", {"city": "Oslo"}]],
                    [["c2", "finish", {"output": "mild"}]],
                ]
            }
        )
        done = await cli(
            "run",
            "--model",
            "directed",
            "--toolkit",
            "tests",
            "--id",
            workflow_id,
            "--address",
            bare_server,
            "--task-queue",
            task_queue,
            prompt,
            timeout=60,
        )
        assert done.code == 0, done.stdout + done.stderr
        assert "final answer: mild" in done.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        stopped = await worker.finish(timeout=30)
    assert stopped.code == 0, stopped.stderr

    client = await Client.connect(bare_server, data_converter=pydantic_data_converter)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    types = [event.event_type for event in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in types
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED in types
    upserts = [
        event.upsert_workflow_search_attributes_event_attributes.search_attributes
        for event in history.events
        if event.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    upserted = {name for attributes in upserts for name in attributes.indexed_fields}
    assert upserted <= {"TemporalChangeVersion"}  # the SDK's, for the patch; always registered
    markers = [
        event.marker_recorded_event_attributes.SerializeToString()
        for event in history.events
        if event.HasField("marker_recorded_event_attributes")
    ]
    assert len(markers) == 1 and NO_SEARCH_ATTRIBUTES_PATCH.encode() in markers[0]
    # Deterministic whatever the replaying worker's setting: a replayer (no
    # patch activation callback, search attributes on) makes no upserts either.
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    await replayer.replay_workflow(history)


async def test_worker_starts_once_the_printed_command_ran(bare_server: str) -> None:
    registered = await cli(shell=_command(bare_server), timeout=60)
    assert registered.code == 0, registered.stdout + registered.stderr
    worker = await Running.start(
        "worker", "--app", "cli_app:app", "--address", bare_server, "--graceful-shutdown", "1"
    )
    try:
        await worker.wait_for_line("worker polling", timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        done = await worker.finish(timeout=30)
    assert done.code == 0, done.stderr
