"""Upgrades on the dev server: Worker Versioning keeps each run on the code that wrote it.

A conversation waits for an approval on version v1; v2, whose loop is NOT
replay-compatible with v1's histories (it starts a timer before every model
turn), becomes current; the approval arrives, the v1 run (pinned: its history
never meets v2's code) notices the new version at that wait and continues as
new with AUTO_UPGRADE, carrying the decision, and the call and the later turns
run on v2 (tests/workflows/test_follow_versions.py has more). No workflow
task fails.

A rolling deploy without versioning that drops or changes a tool under an
approved call gives the model a clear Failure.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, outputs_by_id, set_current_version

from durable_tools import Toolkit, tool
from durable_tools._wire import ConversationInput
from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions, ConversationResult
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)

V2_MARKER = "loop v2: before the model turn"


@workflow.defn(name="AgentWorkflow")
class AgentWorkflowV2(AgentWorkflow):
    """A changed loop: a timer before each model turn (new commands: v1 histories would
    fail to replay on it with a nondeterminism error)."""

    @workflow.init
    def __init__(self, input: ConversationInput) -> None:
        super().__init__(input)

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        return await super().run(input)

    async def _model_turn(self) -> Any:
        await workflow.sleep(timedelta(milliseconds=1), summary=V2_MARKER)
        return await super()._model_turn()


def _worker(
    client: Client, task_queue: str, version: WorkerDeploymentVersion, workflow_class: type
) -> Worker:
    acts = AgentActivities(TOOLKITS, MODELS)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[workflow_class],
        activities=[acts.model_turn, acts.tool_call],
        workflow_runner=sandbox_runner(),
        deployment_config=deployment_config(version),
        max_cached_workflows=0,
    )


async def _runs(client: Client, workflow_id: str) -> list[list[Any]]:
    """Every run's history events, first run first (follows continue-as-new)."""
    runs: list[list[Any]] = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        runs.append(list((await handle.fetch_history()).events))
    runs.sort(key=lambda events: events[0].event_time.ToDatetime())
    return runs


def _has_marker(events: list[Any]) -> bool:
    return any(
        e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        and V2_MARKER in e.user_metadata.summary.data.decode()
        for e in events
    )


async def test_pinned_run_finishes_on_v1_then_upgrades_to_v2(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v1")
    v2 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"upgrade-{uuid.uuid4()}"
    script = turns(
        [("c1", "refund", {"order": "A-1", "amount": 5})], [("c2", "get_weather", {"city": "Oslo"})]
    )

    async with _worker(client, task_queue, v1, AgentWorkflow):
        await set_current_version(dev_env, deployment, "v1")
        handle: WorkflowHandle[Any, Any] = await conversations.start(
            workflow_id,
            agent=AGENT,
            message=script,
            options=ConversationOptions(search_attributes=True, idle_timeout=2),
        )

        async def waiting() -> Any:
            return (await conversations.pending(workflow_id)).approvals

        (approval,) = await eventually(waiting, what="the approval on v1")
        async with _worker(client, task_queue, v2, AgentWorkflowV2):
            await set_current_version(dev_env, deployment, "v2")
            await conversations.approve(
                workflow_id,
                approval.call_id,
                arguments_hash=approval.arguments_hash,
                decided_by="ana",
            )
            result = await asyncio.wait_for(handle.result(), 60)
            history = await conversations.history(workflow_id)  # the last run, on v2

    assert result.status == "idle_timeout"
    assert result.output == "done (directed)"
    runs = await _runs(client, workflow_id)
    assert len(runs) >= 2, "the conversation continued as new onto v2"
    first, *later = runs
    # v1's history never met v2's code (the run moved at its wait).
    assert not _has_marker(first)
    assert any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW for e in first
    )
    # Its later turns ran on v2's loop.
    assert any(_has_marker(events) for events in later)
    for events in runs:
        failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        assert not failed, failed
    outputs = outputs_by_id(history)
    assert outputs["c1"].failure_kind is None and outputs["c2"].failure_kind is None


@tool(needs_approval=True)
async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund an order.

    Args:
        order_id: The order.
        amount_cents: The amount in cents.
    """
    return {"refunded": amount_cents}


@tool(name="refund", needs_approval=True)
async def refund_v2(order_id: str, amount: str) -> dict[str, Any]:
    """Refund an order (v2: the amount as a decimal string).

    Args:
        order_id: The order.
        amount: The amount, e.g. "12.90".
    """
    return {"refunded": amount}


async def test_rolling_deploy_changes_a_tool_under_an_approved_call(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Unversioned workers: the approved call meets v2's toolkit and becomes a clear Failure."""
    await _rolling(dev_env, task_queue, "changed", Toolkit(refund_v2))  # arguments no longer fit
    await _rolling(dev_env, task_queue, "removed", Toolkit())  # the tool is gone


async def _rolling(
    dev_env: WorkflowEnvironment, task_queue: str, case: str, new_kit: Toolkit
) -> None:
    from durable_tools.worker.plugin import DurableToolsPlugin

    async def run_with(kit: Toolkit, body: Any) -> Any:
        plugin = DurableToolsPlugin(toolkits={**TOOLKITS, "shop": kit}, models=MODELS)
        config = dev_env.client.config()
        config["plugins"] = [plugin]
        client = Client(**config)
        async with Worker(client, task_queue=task_queue, max_cached_workflows=0):
            return await body(Conversations(client, task_queue=task_queue))

    workflow_id = f"rolling-{case}-{uuid.uuid4()}"
    script = turns([("c1", "refund", {"order_id": "A-1", "amount_cents": 1290})])
    agent = AGENT.model_copy(update={"toolkit": "shop"})

    async def start(conv: Conversations) -> Any:
        await conv.start(
            workflow_id,
            agent=agent,
            message=script,
            options=ConversationOptions(search_attributes=True, idle_timeout=1),
        )

        async def waiting() -> Any:
            return (await conv.pending(workflow_id)).approvals

        return (await eventually(waiting, what="the approval"))[0]

    approval = await run_with(Toolkit(refund), start)

    async def finish(conv: Conversations) -> Any:
        await conv.approve(
            workflow_id, approval.call_id, arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        result = await asyncio.wait_for(conv.result(workflow_id), 30)
        return result, await conv.history(workflow_id)

    result, history = await run_with(new_kit, finish)
    assert result.status == "idle_timeout", case
    output = outputs_by_id(history)["c1"]
    assert output.is_error, (case, output)
    if case == "changed":
        assert output.failure_kind == "input_validation_error"
        assert "amount" in output.content
    else:
        assert output.failure_kind == "unknown_tool"
    events = (await dev_env.client.get_workflow_handle(workflow_id).fetch_history()).events
    assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]


async def test_check_upgrade_lists_runs_the_installed_code_cannot_replay(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """`durable-tools check-upgrade`: a run written by another loop is reported, exit 1."""
    import os
    import sys

    client = dev_env.client
    script = turns([("c1", "refund", {"order": "A-1", "amount": 5})])
    ids = {"same": f"check-same-{uuid.uuid4()}", "other": f"check-other-{uuid.uuid4()}"}
    for case, workflow_class in (("same", AgentWorkflow), ("other", AgentWorkflowV2)):
        queue = f"{task_queue}-{case}"
        conversations = Conversations(client, task_queue=queue)
        acts = AgentActivities(TOOLKITS, MODELS)
        async with Worker(
            client,
            task_queue=queue,
            workflows=[workflow_class],
            activities=[acts.model_turn, acts.tool_call],
            workflow_runner=sandbox_runner(),
        ):
            await conversations.start(
                ids[case],
                agent=AGENT,
                message=script,
                options=ConversationOptions(search_attributes=True),
            )

            async def waiting(conv: Conversations = conversations, wid: str = ids[case]) -> Any:
                return (await conv.pending(wid)).approvals

            await eventually(waiting, what=f"{case}: waiting for approval")
    query = f"WorkflowId = '{ids['same']}' OR WorkflowId = '{ids['other']}'"

    async def listed() -> bool:
        return len([e async for e in client.list_workflows(query)]) == 2

    await eventually(listed, what="both runs in visibility")
    process = await asyncio.create_subprocess_exec(
        os.path.join(os.path.dirname(sys.executable), "durable-tools"),
        "check-upgrade",
        "--query",
        query,
        "--address",
        client.service_client.config.target_host,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"},
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    text = out.decode()
    assert process.returncode == 1, text + err.decode()
    assert f"✓ {ids['same']}" in text
    assert f"✗ {ids['other']}" in text and "ondeterminism" in text
    assert "2 replayed, 1 would fail on this code" in text
    for workflow_id in ids.values():
        await client.get_workflow_handle(workflow_id).terminate("test over")
