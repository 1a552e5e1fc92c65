"""Usage totals: tokens in and out per model, summed across turns and continue-as-new."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from durable_tools import Toolkit, tool
from durable_tools.conversation import ConversationOptions
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call
from durable_tools.transcript import AssistantMessage, Usage


@tool
async def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order.
    """
    return f"order {order_id}: delivered"


async def test_usage_totals_carry_across_continue_as_new(dev_env: WorkflowEnvironment) -> None:
    model = ScriptedModel(
        [
            AssistantMessage(
                tool_calls=(call("c1", "lookup", order_id="A-1"),),
                usage=Usage(input_tokens=100, output_tokens=10, cached_input_tokens=40),
            ),
            AssistantMessage(
                tool_calls=(call("c2", "lookup", order_id="A-2"),),
                usage=Usage(input_tokens=150, output_tokens=12),
            ),
            AssistantMessage(
                text="Both delivered.", usage=Usage(input_tokens=200, output_tokens=5)
            ),
        ]
    )
    # The dev server: on the time-skipping server, queries during a chain of
    # continue-as-new runs time out when the machine is loaded.
    async with AgentTestEnvironment.start(toolkit=Toolkit(lookup), model=model, env=dev_env) as env:
        chat = await env.start_conversation(
            "Where are A-1 and A-2?",
            options=ConversationOptions(continue_as_new_after_turns=1, idle_timeout=2),
        )
        assert await env.wait_for_reply(chat) == "Both delivered."
        status = await env.conversations.status(chat)
        assert status.runs >= 3  # it continued as new after each turn
        expected = {"model": Usage(input_tokens=450, output_tokens=27, cached_input_tokens=40)}
        assert status.usage == expected
        result = await env.result(chat)
    assert result.usage == expected


def test_status_table_shows_tokens_per_model() -> None:
    from rich.console import Console

    from durable_tools.conversation import ConversationStatus
    from durable_tools.worker.render import render_status

    status = ConversationStatus(
        state="idle",
        agent="main",
        turns=3,
        runs=1,
        pending_approvals=0,
        pending_interactions=0,
        running_tools=0,
        transcript_items=7,
        reconciled=True,
        usage={"openai:gpt-4o": Usage(input_tokens=450, output_tokens=27, cached_input_tokens=40)},
    )
    console = Console(width=200, record=True, color_system=None)
    console.print(render_status("t-1", status))
    assert "tokens openai:gpt-4o │ 450 in (40 cached), 27 out" in console.export_text()
