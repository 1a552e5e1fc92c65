"""Running the agent loop from the user's own workflow, on the dev server.

`run_agent` runs it inside the user's workflow with namespaced handlers that
never collide with the user's own `decide` signal or `status` query;
`start_child_conversation` runs it as a child workflow that approvals reach
by its own workflow id.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually

with workflow.unsafe.imports_passed_through():
    from durable_tools.approvals import Decision
    from durable_tools.client import Conversations
    from durable_tools.conversation import ConversationOptions, ConversationStatus, PendingState
    from durable_tools.worker.plugin import DurableToolsPlugin

from durable_tools.workflows.embedded import run_agent, start_child_conversation


@workflow.defn
class TicketWorkflow:
    """A user's workflow with handler names of its own that the agent also uses."""

    def __init__(self) -> None:
        self.user_decisions: list[str] = []

    @workflow.signal(name="decide")
    def decide(self, value: str) -> None:
        self.user_decisions.append(value)

    @workflow.query(name="status")
    def status(self) -> str:
        return "ticket status: open"

    @workflow.run
    async def run(self, message: str) -> dict[str, Any]:
        result = await run_agent(
            AGENT, message=message, namespace="agent", options=ConversationOptions(idle_timeout=1)
        )
        return {
            "status": result.status,
            "output": result.output,
            "user_decisions": self.user_decisions,
        }


@workflow.defn
class ParentWorkflow:
    """A user's workflow that runs the conversation as a child."""

    @workflow.run
    async def run(self, args: list[str]) -> str:
        child_id, message = args
        child = await start_child_conversation(
            child_id,
            agent=AGENT,
            message=message,
            options=ConversationOptions(idle_timeout=1),
        )
        result = await child
        return f"{result.status}: {result.output}"


def _client(env: WorkflowEnvironment) -> Client:
    config = env.client.config()
    config["plugins"] = [DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)]
    return Client(**config)


async def test_run_agent_inside_a_user_workflow_with_namespaced_handlers(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = _client(dev_env)
    script = turns([("c1", "refund", {"order": "A-1", "amount": 5})])
    async with Worker(client, task_queue=task_queue, workflows=[TicketWorkflow]):
        handle = await client.start_workflow(
            TicketWorkflow.run, script, id=f"ticket-{uuid.uuid4()}", task_queue=task_queue
        )

        async def approval() -> Any:
            pending = await handle.query("agent.pending", result_type=PendingState)
            return pending.approvals

        (pending,) = await eventually(approval, what="the agent's approval")
        # The user's own handlers still answer under their own names.
        await handle.signal("decide", "the user's own decide signal")
        assert await handle.query("status") == "ticket status: open"
        status = await handle.query("agent.status", result_type=ConversationStatus)
        assert status.pending_approvals == 1
        # Garbage to the agent's signal is recorded, never fails the task.
        await handle.signal("agent.decide", "not a decision")

        async def rejected() -> Any:
            return (await handle.query("agent.pending", result_type=PendingState)).rejected

        assert any(r.signal == "decide" for r in await eventually(rejected, what="rejection"))
        # So is garbage to the rule-changing signals: they reach the embedded loop too.
        await handle.signal("agent.revoke_grant", "g9")
        await handle.signal("agent.set_policy", "not a policy")

        async def rule_rejections() -> Any:
            signals = {r.signal for r in await rejected()}
            return signals >= {"revoke_grant", "set_policy"} or None

        await eventually(rule_rejections, what="revoke_grant and set_policy rejected")
        await handle.signal(
            "agent.decide",
            Decision(
                call_id=pending.call_id,
                approved=True,
                arguments_hash=pending.arguments_hash,
                decided_by="ana",
            ),
        )
        result = await asyncio.wait_for(handle.result(), 30)
    assert result["status"] == "idle_timeout"
    assert result["output"] == "done (directed)"
    assert result["user_decisions"] == ["the user's own decide signal"]
    history = await handle.fetch_history()
    types = {e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events}
    assert {"model.turn", "tool.refund"} <= types
    failed = [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
    assert not failed


async def test_child_conversation_is_approved_by_its_own_id(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = _client(dev_env)
    child_id = f"child-{uuid.uuid4()}"
    script = turns([("c1", "refund", {"order": "A-2", "amount": 7})])
    conversations = Conversations(client, task_queue=task_queue)
    async with Worker(client, task_queue=task_queue, workflows=[ParentWorkflow]):
        parent = await client.start_workflow(
            ParentWorkflow.run,
            [child_id, script],
            id=f"parent-{uuid.uuid4()}",
            task_queue=task_queue,
        )

        async def approval() -> Any:
            return (await conversations.pending(child_id)).approvals

        (pending,) = await eventually(approval, what="the child's approval")
        await conversations.approve(
            child_id, pending.call_id, arguments_hash=pending.arguments_hash, decided_by="ana"
        )
        assert await asyncio.wait_for(parent.result(), 30) == "idle_timeout: done (directed)"
    description = await client.get_workflow_handle(child_id).describe()
    assert description.parent_id == parent.id
