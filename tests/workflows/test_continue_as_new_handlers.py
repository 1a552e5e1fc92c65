"""Continue-as-new never waits on a handler that waits on the loop (issue 22, item 1).

`await_turn` (what `Conversations.start_and_wait` sends with update-with-start)
waits for the conversation to settle; the loop, before it continues as new,
waits for every handler to finish. At a tool-call turn both waited on each
other for good. Now the run hands `await_turn` over (state `continued`) and
the client asks the next run.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from durable_tools import Toolkit, tool
from durable_tools.conversation import ConversationOptions
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call


@tool(annotations={"read_only": True, "idempotent": True})
async def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order.
    """
    return f"{order_id}: delivered"


@tool(needs_approval=True)
async def refund(order_id: str) -> str:
    """Refund an order.

    Args:
        order_id: The order.
    """
    return f"refunded {order_id}"


def _script(request: Any) -> Any:
    from durable_tools.testing import last_user_text
    from durable_tools.transcript import AssistantMessage, ToolCallOutput

    outputs = [i for i in request.transcript if isinstance(i, ToolCallOutput)]
    text = last_user_text(request)
    if "refund" in text and not any(o.call_id == "r1" for o in outputs):
        if not outputs:
            return AssistantMessage(tool_calls=(call("l1", "lookup", order_id="A-1"),))
        return AssistantMessage(tool_calls=(call("r1", "refund", order_id="A-1"),))
    if outputs:
        return AssistantMessage(text=f"Done: {outputs[-1].content}")
    return AssistantMessage(tool_calls=(call("l1", "lookup", order_id="A-1"),))


async def _continued_runs(env: AgentTestEnvironment, workflow_id: str) -> int:
    count = 0
    async for execution in env.client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await env.client.get_workflow_handle(
            workflow_id, run_id=execution.run_id
        ).fetch_history()
        count += any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            for e in history.events
        )
    return count


async def test_start_and_wait_follows_continue_as_new_to_the_reply(
    dev_env: WorkflowEnvironment,
) -> None:
    """The first turn calls a read-only tool and the run continues as new after it."""
    async with AgentTestEnvironment.start(
        toolkit=Toolkit(lookup, refund), model=ScriptedModel(_script), env=dev_env
    ) as env:
        options = ConversationOptions(continue_as_new_after_turns=1)
        outcome = await env.conversations.start_and_wait(
            "can-reply", agent=env.agent, message="where is A-1?", options=options
        )
        assert outcome.state == "idle"
        assert outcome.reply == "Done: A-1: delivered"
        assert outcome.turns == 2
        assert await _continued_runs(env, "can-reply") >= 1
        # A later wait is answered by the newest run, too.
        again = await env.conversations.wait_turn("can-reply", after_turns=0)
        assert again.reply == "Done: A-1: delivered"
        await env.client.get_workflow_handle("can-reply").terminate("test over")


async def test_start_and_wait_follows_continue_as_new_to_an_approval(
    dev_env: WorkflowEnvironment,
) -> None:
    """The answer that settles the wait is a pending approval in a later run."""
    async with AgentTestEnvironment.start(
        toolkit=Toolkit(lookup, refund), model=ScriptedModel(_script), env=dev_env
    ) as env:
        options = ConversationOptions(continue_as_new_after_turns=1)
        outcome = await env.conversations.start_and_wait(
            "can-approval", agent=env.agent, message="refund A-1", options=options
        )
        assert outcome.state == "waiting" and outcome.reply is None
        (approval,) = outcome.pending.approvals
        assert approval.call_id == "r1"
        await env.approve("can-approval", approval)
        assert await env.wait_for_reply("can-approval", after=3) == "Done: refunded A-1"
        await env.client.get_workflow_handle("can-approval").terminate("test over")
