"""Waiting conversations follow new worker versions (issue 22, item 3).

Runs are pinned to the version they started on (Worker Versioning). Before,
a run moved to the current version only when it continued as new after a
model turn, so a conversation waiting (after a model failure, for an
approval, in a pause) stayed on the version it started waiting on: the
deploy that fixed a model failure could never reach it, and `retry` ran the
broken code again. Now every durable wait notices a new target version (at
a signal, or at the `version_check_interval` timer) and continues as new
onto it, carrying what waits.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id, set_current_version

from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions, ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow

CLI = str(Path(sys.executable).parent / "durable-tools")


def _broken(request: ModelRequest) -> AssistantMessage:
    """v1's model adapter: a bug that fails every turn (not retryable)."""
    raise ApplicationError("v1 bug: the adapter drops the tools", non_retryable=True)


def _worker(
    client: Client, task_queue: str, version: WorkerDeploymentVersion, models: Mapping[str, Any]
) -> Worker:
    acts = AgentActivities(TOOLKITS, dict(models))
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[acts.model_turn, acts.tool_call],
        workflow_runner=sandbox_runner(),
        deployment_config=deployment_config(version),
        max_cached_workflows=0,
    )


async def _runs(client: Client, workflow_id: str) -> list[tuple[str, list[Any]]]:
    """Every run's build ids (of its completed workflow tasks) and events, first run first."""
    runs: list[tuple[str, list[Any]]] = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        events = list((await handle.fetch_history()).events)
        builds = {
            e.workflow_task_completed_event_attributes.deployment_version.build_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        }
        runs.append((",".join(sorted(builds)), events))
    runs.sort(key=lambda run: run[1][0].event_time.ToDatetime())
    return runs


def _no_failed_tasks(runs: list[tuple[str, list[Any]]]) -> None:
    for _, events in runs:
        failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        assert not failed, failed


async def test_retry_after_a_model_failure_runs_on_the_version_that_fixes_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v1")
    v2 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-failed-{uuid.uuid4()}"
    broken = {**MODELS, "directed": ScriptedModel(_broken)}

    async with _worker(client, task_queue, v1, broken):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id,
            agent=AGENT,
            message="hello",
            options=ConversationOptions(idle_timeout=2),
        )

        async def failed() -> Any:
            return (await conversations.pending(workflow_id)).model_failed

        failure = await eventually(failed, what="the model failure on v1")
        assert "v1 bug" in failure.message
        async with _worker(client, task_queue, v2, MODELS):
            await set_current_version(dev_env, deployment, "v2")
            process = await asyncio.create_subprocess_exec(
                CLI,
                *("retry", workflow_id),
                *("--address", client.service_client.config.target_host),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, (out, err)
            result = await asyncio.wait_for(handle.result(), 60)

    assert result.status == "idle_timeout"
    assert result.output == "echo: hello"  # v2's model answered the retried turn
    runs = await _runs(client, workflow_id)
    assert [build for build, _ in runs] == ["v1", "v2"]
    _no_failed_tasks(runs)


async def test_an_approval_waits_across_two_version_changes_and_runs_on_the_last(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    versions = [
        WorkerDeploymentVersion(deployment_name=deployment, build_id=f"v{n}") for n in (1, 2, 3)
    ]
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-approval-{uuid.uuid4()}"
    script = turns([("c1", "refund", {"order": "A-1", "amount": 5})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1, approval_deadline=3600)

    async with _worker(client, task_queue, versions[0], MODELS):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def waiting() -> Any:
            return (await conversations.pending(workflow_id)).approvals

        (approval,) = await eventually(waiting, what="the approval on v1")
        async with _worker(client, task_queue, versions[1], MODELS):
            await set_current_version(dev_env, deployment, "v2")

            async def moved_to(build: str) -> bool:
                runs = await _runs(client, workflow_id)
                return runs[-1][0] == build and bool(
                    (await conversations.pending(workflow_id)).approvals
                )

            await eventually(lambda: moved_to("v2"), what="the waiting run on v2", timeout=30)
            async with _worker(client, task_queue, versions[2], MODELS):
                await set_current_version(dev_env, deployment, "v3")
                await eventually(lambda: moved_to("v3"), what="the waiting run on v3", timeout=30)
                (still,) = (await conversations.pending(workflow_id)).approvals
                # The same pending approval: same digest, same deadline.
                assert still.arguments_hash == approval.arguments_hash
                assert still.requested_at == approval.requested_at
                assert still.deadline == approval.deadline
                await conversations.approve(
                    workflow_id,
                    approval.call_id,
                    arguments_hash=approval.arguments_hash,
                    decided_by="ana",
                )
                result = await asyncio.wait_for(handle.result(), 60)
                history = await conversations.history(workflow_id)

    assert result.output == "done (directed)"
    assert outputs_by_id(history)["c1"].failure_kind is None
    runs = await _runs(client, workflow_id)
    assert [build for build, _ in runs] == ["v1", "v2", "v3"]
    _no_failed_tasks(runs)
    # The refund ran once, in the v3 run.
    scheduled = [
        [
            e
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.refund"
        ]
        for _, events in runs
    ]
    assert [len(s) for s in scheduled] == [0, 0, 1]
