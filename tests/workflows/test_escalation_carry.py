"""A reminder and escalation carried across continue-as-new with the wait (issue 28).

The approval waits on worker version v1, its reminder fires there; the
conversation then moves to v2 (continue-as-new, the wait carried). On v2
the escalation fires at its time counted from the wait's start, not from
the move, and the reminder does not fire again. Real seconds on the dev
server (Worker Versioning is not on the time-skipping server).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, set_current_version

from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.policies import Policy
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)

POLICY = Policy.from_text("""
name: refunds
rules:
  - {id: refund, when: 'tool == "refund"', outcome: approve, groups: [finance],
     remind_after: 1s, escalate_after: 8s, escalate_to: [oncall]}
""")


def _worker(client: Client, task_queue: str, version: WorkerDeploymentVersion) -> Worker:
    acts = AgentActivities(TOOLKITS, dict(MODELS), policies={"tests": POLICY})
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[acts.model_turn, acts.tool_call],
        workflow_runner=sandbox_runner(),
        deployment_config=deployment_config(version),
        max_cached_workflows=0,
    )


async def _run_ids(client: Client, workflow_id: str) -> list[str]:
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    ids = [run_id]
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=ids[-1]).fetch_history()
        previous = history.events[0].workflow_execution_started_event_attributes
        if not previous.continued_execution_run_id:
            return ids[::-1]
        ids.append(previous.continued_execution_run_id)


async def _timers(client: Client, workflow_id: str, run_id: str) -> list[str]:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return [
        e.user_metadata.summary.data.decode()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]


async def test_the_escalation_fires_in_the_next_run_at_its_time(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1, v2 = (WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in ("v1", "v2"))
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"escalation-carry-{uuid.uuid4()}"
    script = turns([("c1", "refund", {"order": "A-1", "amount": 5})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1, approval_deadline=12)

    async with _worker(client, task_queue, v1):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def reminded() -> Any:
            approvals = (await conversations.pending(workflow_id)).approvals
            state = approvals[0].escalation if approvals else None
            return approvals[0] if state is not None and state.reminded_at else None

        approval = await eventually(reminded, what="the reminder on v1")
        assert approval.escalation is not None and approval.escalation.escalated_at is None
        async with _worker(client, task_queue, v2):
            await set_current_version(dev_env, deployment, "v2")
            result = await asyncio.wait_for(handle.result(), 60)
            events = [e async for e in conversations.events(workflow_id)]
    assert result.status == "idle_timeout"
    runs = await _run_ids(client, workflow_id)
    assert len(runs) >= 2
    first, later = runs[0], runs[1:]
    assert any(
        s.startswith('"reminder of refund(') for s in await _timers(client, workflow_id, first)
    )
    later_timers = [s for r in later for s in await _timers(client, workflow_id, r)]
    assert not any(s.startswith('"reminder of') for s in later_timers)
    assert any("escalation of refund(" in s for s in later_timers)
    asked = approval.requested_at
    kinds = [e.kind for e in events if e.call_id == "c1"]
    assert kinds.count("approval_reminder") == 1 and kinds.count("approval_escalated") == 1
    at = {e.kind: e.at for e in events if e.call_id == "c1"}
    waited = at["approval_escalated"] - asked
    assert timedelta(seconds=8) <= waited < timedelta(seconds=10), waited
    assert at["approval_expired"] - asked >= timedelta(seconds=12)
