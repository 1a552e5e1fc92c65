"""A sampling request waiting for approval moves to a new worker version, and goes on there.

As a question does (test_mcp_input_versions.py): the approval of the test
server's sampling request (`poem`) notices a new current version at its
version-check timer and continues as new onto it, carrying the call's
progress and the pending approval (same digest and deadline). Approved on
the new version, the conversation's model answers there (`model.sample-v1`),
the call is retried once and its tool body runs once. No workflow task
fails, and every run's history replays.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_support import directed, turns
from mcp_support import replay_each_run, runs_by_build, versioned_mcp_worker
from temporalio.common import WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, outputs_by_id, set_current_version

from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions, PendingApproval
from durable_tools.mcp import McpServerConfig
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel, settled
from durable_tools.transcript import AssistantMessage

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)

SERVER = Path(__file__).with_name("mcp_test_server.py")
KEY = "a-key-both-versions-servers-share-0123456789"
POET = AgentConfig(name="main", model="poet", toolkit="tests")


def _poet(request: ModelRequest) -> AssistantMessage:
    if request.purpose == "sampling":
        return AssistantMessage(text="Fog lifts from the pier")
    return directed(request)


def _server(log: Path) -> McpServerConfig:
    """The test server in its own process, its state key shared by both versions' servers."""
    return McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log), "--state-key", KEY],
        trust_annotations=True,
    )


async def test_a_sampling_approval_moves_to_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    log = tmp_path / "server.jsonl"
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-mcp-sampling-{uuid.uuid4()}"
    options = ConversationOptions(version_check_interval=1, approval_deadline=3600)

    async def approval() -> PendingApproval:
        async def probe() -> PendingApproval | None:
            pending = await conversations.pending(workflow_id)
            found = next((a for a in pending.approvals if a.input_request is not None), None)
            # Only once the workflow task that recorded it has completed: the
            # query is answered from the worker's state, which may hold a task
            # the server times out under load and runs again (a new
            # requested_at, 53 ms later, in one loaded CI run).
            return found if await settled(client.get_workflow_handle(workflow_id)) else None

        return await eventually(probe, what="the sampling approval", timeout=30)

    first_model, second_model = ScriptedModel(_poet), ScriptedModel(_poet)
    async with versioned_mcp_worker(
        client, task_queue, v1, _server(log), models={"poet": first_model}
    ):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id,
            agent=POET,
            message=turns(
                [("s", "notes__poem", {"topic": "the pier"})],
                [("f1", "finish", {"output": "written"})],
            ),
            options=options,
        )
        first = await approval()
        async with versioned_mcp_worker(
            client, task_queue, v2, _server(log), models={"poet": second_model}
        ):
            await set_current_version(dev_env, deployment, "v2")

            async def moved() -> bool:
                return "v2" in (await runs_by_build(client, workflow_id))[-1][0]

            await eventually(moved, what="the run on v2", timeout=30)
            still = await approval()
            assert still == first  # same digest, requested_at, deadline
            await conversations.approve(
                workflow_id, "s", arguments_hash=first.arguments_hash, decided_by="ada"
            )
            result = await asyncio.wait_for(handle.result(), 30)
            items = await conversations.history(workflow_id)
            runs = await runs_by_build(client, workflow_id)
    assert result.status == "finished"
    poem: Any = json.loads(json.loads(outputs_by_id(items)["s"].content)["result"])
    assert poem["poem"] == "Fog lifts from the pier"
    sampled = [
        r for m in (first_model, second_model) for r in m.requests if r.purpose == "sampling"
    ]
    assert len(sampled) == 1
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert len([r for r in rows if r["event"] == "call" and r["tool"] == "poem"]) == 1
    assert [builds for builds, _ in runs][:2] == [{"v1"}, {"v2"}]
    await replay_each_run(runs)
