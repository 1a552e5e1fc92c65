"""A call waiting for an MCP server's answer moves to a new worker version, and goes on there.

Like every durable wait (tests/workflows/test_follow_versions.py), the
question of a call that asked for input notices a new current version at
its version-check timer and continues as new onto it, carrying the call's
progress (its round, its `requestState`) with its pending question: the same
digest and deadline. The answer is given on the new version, which retries
the call there; the server asks its second round and runs its tool body
once. No workflow task fails, and every run's history replays.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT, turns
from mcp_support import replay_each_run, runs_by_build, versioned_mcp_worker
from temporalio.common import WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, outputs_by_id, set_current_version

from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions, PendingInteraction
from durable_tools.mcp import McpServerConfig
from durable_tools.testing import settled

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)

SERVER = Path(__file__).with_name("mcp_test_server.py")
KEY = "a-key-both-versions-servers-share-0123456789"


def _server(log: Path) -> McpServerConfig:
    """The test server in its own process, its state key shared by both versions' servers."""
    return McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log), "--state-key", KEY],
        trust_annotations=True,
    )


async def test_a_question_of_an_mcp_call_moves_to_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    log = tmp_path / "server.jsonl"
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-mcp-question-{uuid.uuid4()}"
    options = ConversationOptions(version_check_interval=1, approval_deadline=3600)

    async def asked(round_: int) -> PendingInteraction:
        async def probe() -> PendingInteraction | None:
            pending = await conversations.pending(workflow_id)
            found = next(
                (
                    i
                    for i in pending.interactions
                    if i.input_request is not None and i.input_request.round == round_
                ),
                None,
            )
            # Read only from a committed workflow task (see `asked` below).
            return found if await settled(client.get_workflow_handle(workflow_id)) else None

        return await eventually(probe, what=f"the question of round {round_}", timeout=30)

    async with versioned_mcp_worker(client, task_queue, v1, _server(log)):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id,
            agent=AGENT,
            message=turns(
                [("p", "notes__paint", {"thing": "fence"})],
                [("f1", "finish", {"output": "painted"})],
            ),
            options=options,
        )
        first = await asked(1)
        async with versioned_mcp_worker(client, task_queue, v2, _server(log)):
            await set_current_version(dev_env, deployment, "v2")

            async def moved() -> bool:
                return "v2" in (await runs_by_build(client, workflow_id))[-1][0]

            await eventually(moved, what="the run on v2", timeout=30)
            still = await asked(1)
            assert still == first  # same digest, requested_at, deadline and schema
            await conversations.answer(
                workflow_id, "p", {"name": "Gil"}, arguments_hash=first.arguments_hash
            )
            second = await asked(2)
            assert second.input_request is not None
            assert second.input_request.message == "Which color, Gil?"
            await conversations.answer(
                workflow_id, "p", {"color": "teal"}, arguments_hash=second.arguments_hash
            )
            result = await asyncio.wait_for(handle.result(), 30)
            items = await conversations.history(workflow_id)
            runs = await runs_by_build(client, workflow_id)
    assert result.status == "finished"
    painted: Any = json.loads(json.loads(outputs_by_id(items)["p"].content)["result"])
    assert painted["name"] == {"name": "Gil"} and painted["color"]["color"] == "teal"
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert len([r for r in rows if r["event"] == "call" and r["tool"] == "paint"]) == 1
    assert [r["state"] for r in rows if r["event"] == "round"].count(False) == 1  # no restart
    assert [builds for builds, _ in runs][:2] == [{"v1"}, {"v2"}]
    await replay_each_run(runs)


async def test_roots_answered_beside_a_question_move_with_it(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """`tidy` asks a name and the roots: the roots' answer, recorded on v1, is sent from v2."""
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    log = tmp_path / "server.jsonl"
    server = _server(log).model_copy(update={"roots": ["/srv/data"]})
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-mcp-roots-{uuid.uuid4()}"
    options = ConversationOptions(version_check_interval=1, approval_deadline=3600)

    async def asked() -> PendingInteraction:
        async def probe() -> PendingInteraction | None:
            pending = await conversations.pending(workflow_id)
            question = next(iter(pending.interactions), None)
            # Only once the workflow task that recorded it has completed: the
            # query is answered from the worker's state, which may hold a task
            # the server times out under load and runs again (a new
            # requested_at, 80 ms later, in one loaded run).
            return question if await settled(client.get_workflow_handle(workflow_id)) else None

        return await eventually(probe, what="the question", timeout=30)

    async with versioned_mcp_worker(client, task_queue, v1, server):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id,
            agent=AGENT,
            message=turns([("t", "notes__tidy", {})], [("f1", "finish", {"output": "tidied"})]),
            options=options,
        )
        first = await asked()
        # v2's configuration lists other roots: the answer recorded on v1 is what is sent.
        other = server.model_copy(update={"roots": ["/elsewhere"]})
        async with versioned_mcp_worker(client, task_queue, v2, other):
            await set_current_version(dev_env, deployment, "v2")

            async def moved() -> bool:
                return "v2" in (await runs_by_build(client, workflow_id))[-1][0]

            await eventually(moved, what="the run on v2", timeout=30)
            assert (await asked()).model_dump() == first.model_dump()
            await conversations.answer(
                workflow_id, "t", {"name": "Gil"}, arguments_hash=first.arguments_hash
            )
            result = await asyncio.wait_for(handle.result(), 30)
            items = await conversations.history(workflow_id)
            runs = await runs_by_build(client, workflow_id)
    assert result.status == "finished"
    tidied: Any = json.loads(json.loads(outputs_by_id(items)["t"].content)["result"])
    assert tidied == {"name": {"name": "Gil"}, "roots": [["file:///srv/data", "data"]]}
    assert [builds for builds, _ in runs][:2] == [{"v1"}, {"v2"}]
    await replay_each_run(runs)
