"""A call running as an MCP task moves to a new worker version, and is polled on there.

Like every durable wait (tests/workflows/test_follow_versions.py), the
polls of a call that runs as a task (the Tasks extension) notice a new
current version at their version-check timer and continue as new onto it,
carrying the call's `TaskProgress` (the task id, its questions and answers
so far). The new version polls the same task, asks its question and sends
the answer with `tasks/update`; the server created one task and ran its body
once. No workflow task fails, and every run's history replays.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT, turns
from mcp_support import http_test_server, replay_each_run, runs_by_build, versioned_mcp_worker
from temporalio.common import WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, outputs_by_id, set_current_version

from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions, PendingInteraction
from durable_tools.mcp import McpServerConfig

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)


def _server(url: str) -> McpServerConfig:
    """The HTTP test server (one process, outliving each worker)."""
    return McpServerConfig(
        name="notes", url=url, token_env="DT_TEST_MCP_TOKEN", trust_annotations=True
    )


async def test_a_task_of_an_mcp_call_moves_to_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DT_TEST_MCP_TOKEN", "versions-token")
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    log = tmp_path / "server.jsonl"
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-mcp-task-{uuid.uuid4()}"
    options = ConversationOptions(version_check_interval=1, approval_deadline=3600)

    async def asked() -> PendingInteraction:
        async def probe() -> PendingInteraction | None:
            pending = await conversations.pending(workflow_id)
            return next((i for i in pending.interactions if i.call_id == "p"), None)

        return await eventually(probe, what="the task's question", timeout=30)

    async def polled() -> bool:
        return any(r["event"] == "task_get" for r in _rows(log))

    with http_test_server(log, "DT_TEST_MCP_TOKEN") as url:
        async with versioned_mcp_worker(client, task_queue, v1, _server(url)):
            await set_current_version(dev_env, deployment, "v1")
            handle = await conversations.start(
                workflow_id,
                agent=AGENT,
                message=turns(
                    [("p", "notes__survey", {"topic": "reefs", "seconds": 8})],
                    [("f1", "finish", {"output": "surveyed"})],
                ),
                options=options,
            )
            await eventually(polled, what="the task's first poll", timeout=30)
            async with versioned_mcp_worker(client, task_queue, v2, _server(url)):
                await set_current_version(dev_env, deployment, "v2")

                async def moved() -> bool:
                    return "v2" in (await runs_by_build(client, workflow_id))[-1][0]

                await eventually(moved, what="the run on v2", timeout=30)
                question = await asked()
                await conversations.answer(
                    workflow_id, "p", {"name": "Gil"}, arguments_hash=question.arguments_hash
                )
                result = await asyncio.wait_for(handle.result(), 60)
                items = await conversations.history(workflow_id)
                runs = await runs_by_build(client, workflow_id)
    assert result.status == "finished"
    output = outputs_by_id(items)["p"]
    assert not output.is_error and "survey of reefs for Gil (accept)" in output.content
    rows = _rows(log)
    created = [r for r in rows if r["event"] == "task_created"]
    assert len(created) == 1
    assert len([r for r in rows if r["event"] == "call"]) == 1
    assert [r for r in rows if r["event"] == "task_cancel"] == []
    assert [builds for builds, _ in runs][:2] == [{"v1"}, {"v2"}]
    # The second run started with the task carried (its id), not a new call.
    carried = runs[1][1].events[0].workflow_execution_started_event_attributes.input
    assert b"task_progress" in carried.payloads[0].data
    assert created[0]["task_id"].encode() in carried.payloads[0].data
    await replay_each_run(runs)


def _rows(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
