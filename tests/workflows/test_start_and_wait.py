"""Update-with-start: start a conversation and get its first answer or first wait in one call."""

from __future__ import annotations

from typing import Any

from temporalio.testing import WorkflowEnvironment

from durable_tools import Toolkit, tool
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call


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

    text = last_user_text(request)
    if any(isinstance(i, ToolCallOutput) for i in request.transcript):
        return AssistantMessage(text="Refunded.")
    if "refund" in text:
        return AssistantMessage(tool_calls=(call("r1", "refund", order_id="A-1"),))
    return AssistantMessage(text=f"You said: {text}")


async def test_first_reply_and_first_approval_in_one_call(dev_env: WorkflowEnvironment) -> None:
    async with AgentTestEnvironment.start(
        toolkit=Toolkit(refund), model=ScriptedModel(_script), env=dev_env
    ) as env:
        conversations = env.conversations
        replied = await conversations.start_and_wait("saw-1", agent=env.agent, message="hello")
        assert replied.state == "idle" and replied.reply == "You said: hello"
        assert replied.turns == 1 and replied.pending.approvals == []

        waiting = await conversations.start_and_wait(
            "saw-2", agent=env.agent, message="please refund A-1"
        )
        assert waiting.reply is None and waiting.state == "waiting"
        (approval,) = waiting.pending.approvals
        assert approval.tool == "refund" and approval.call_id == "r1"

        # Same id again: attaches to the running conversation, the message is not re-sent.
        again = await conversations.start_and_wait(
            "saw-2", agent=env.agent, message="please refund A-1"
        )
        assert again.pending.approvals == [approval] and again.turns == 1
        await env.approve("saw-2", approval)
        assert await env.wait_for_reply("saw-2", after=3) == "Refunded."
        for workflow_id in ("saw-1", "saw-2"):
            await env.client.get_workflow_handle(workflow_id).terminate("test over")
