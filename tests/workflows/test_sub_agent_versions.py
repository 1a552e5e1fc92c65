"""Agents as tools across worker versions (Worker Deployments, dev server).

A parent whose agent-tool call waits for budget before its child started
moves to a new worker version with the call, which starts its child there
once the budget is raised; a parent whose child runs does not move while it
runs (its continue-as-new would close the child's parent run), and moves at
its next wait after the child returned. Either way: one child, one output,
no failed workflow task, every run's history replays.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from agent_support import MODELS, TOOLKITS, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, outputs_by_id, set_current_version

from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.agent_tools import sub_agent_workflow_id
from durable_tools.budgets import Budget
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)

DESK = AgentConfig(name="desk", model="metered", toolkit="desk")
RESEARCHER = AgentConfig(name="researcher", model="metered", toolkit="tests")


def _worker(client: Client, task_queue: str, version: WorkerDeploymentVersion) -> Worker:
    acts = AgentActivities(TOOLKITS, dict(MODELS))
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[acts.model_turn, acts.tool_call],
        workflow_runner=sandbox_runner(),
        deployment_config=deployment_config(version),
        max_cached_workflows=0,
    )


async def _runs(client: Client, workflow_id: str) -> list[tuple[str, list[Any], Any]]:
    """(build ids, events, history) of every run of the conversation, first run first."""
    runs: list[tuple[str, list[Any], Any]] = []
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = list(history.events)
        builds = {
            e.workflow_task_completed_event_attributes.deployment_version.build_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        }
        runs.append((",".join(sorted(builds)), events, history))
        started = events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return runs[::-1]
        run_id = started.continued_execution_run_id


async def _checked(client: Client, workflow_id: str) -> list[tuple[str, list[Any], Any]]:
    runs = await _runs(client, workflow_id)
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    for build, events, history in runs:
        failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        assert not failed, (build, failed)
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (build, result.replay_failure)
    return runs


def _children(events: list[Any]) -> list[str]:
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]


async def _on(client: Client, workflow_id: str, build: str) -> None:
    async def probe() -> bool:
        return (await _runs(client, workflow_id))[-1][0] == build

    await eventually(probe, what=f"the run on {build}", timeout=30)


async def test_a_call_stopped_by_the_budget_moves_and_starts_its_child_on_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    conversations = Conversations(client, task_queue=task_queue)
    wid = f"sub-agent-move-{uuid.uuid4()}"
    child_script = turns([("w1", "get_weather", {"city": "Oslo"})])
    script = turns([("r1", "researcher", {"message": child_script})])
    options = ConversationOptions(
        idle_timeout=2, version_check_interval=1, budget=Budget(max_tokens=500)
    )
    async with _worker(client, task_queue, v1):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            wid, agent=DESK, handoffs=[RESEARCHER], message=script, options=options
        )

        async def stopped() -> bool:
            return (await conversations.status(wid)).state == "budget_exceeded"

        await eventually(stopped, what="budget_exceeded on v1")
        async with _worker(client, task_queue, v2):
            await set_current_version(dev_env, deployment, "v2")
            await _on(client, wid, "v2")
            await eventually(stopped, what="budget_exceeded again on v2")
            await conversations.raise_budget(wid, max_tokens=100_000, requested_by="ops")
            result = await asyncio.wait_for(handle.result(), 60)
            history = await conversations.history(wid)
    assert result.output == "done (metered)"
    assert outputs_by_id(history)["r1"].content == "done (metered)"
    runs = await _checked(client, wid)
    assert [build for build, _, _ in runs] == ["v1", "v2"]
    assert [_children(events) for _, events, _ in runs] == [
        [],
        [sub_agent_workflow_id(wid, 1, "r1")],
    ]


async def test_a_parent_whose_child_runs_moves_only_after_the_child_returned(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    conversations = Conversations(client, task_queue=task_queue)
    wid = f"sub-agent-stay-{uuid.uuid4()}"
    child_script = turns([("f1", "refund", {"order": "o1", "amount": 5})])
    script = turns([("r1", "researcher", {"message": child_script})])
    options = ConversationOptions(idle_timeout=5, version_check_interval=1)
    child = sub_agent_workflow_id(wid, 1, "r1")
    async with _worker(client, task_queue, v1):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            wid, agent=DESK, handoffs=[RESEARCHER], message=script, options=options
        )

        async def approval() -> Any:
            try:
                return (await conversations.pending(child)).approvals
            except Exception:  # the child has not started yet
                return None

        (pending,) = await eventually(approval, what="the child's approval on v1")
        async with _worker(client, task_queue, v2):
            await set_current_version(dev_env, deployment, "v2")
            await _on(client, child, "v2")  # the child moves at its approval wait
            await asyncio.sleep(2)  # two version checks of the parent's, were it waiting
            assert len(await _runs(client, wid)) == 1  # its child runs: it stays
            await conversations.approve(
                child, "f1", arguments_hash=pending.arguments_hash, decided_by="ana"
            )
            await _on(client, wid, "v2")  # at its idle wait, after the child returned
            result = await asyncio.wait_for(handle.result(), 60)
            history = await conversations.history(wid)
    assert result.status == "idle_timeout" and result.output == "done (metered)"
    assert outputs_by_id(history)["r1"].content == "done (metered)"
    runs = await _checked(client, wid)
    assert [build for build, _, _ in runs] == ["v1", "v2"]
    assert [_children(events) for _, events, _ in runs] == [[child], []]
