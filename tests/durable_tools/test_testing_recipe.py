"""`durable_tools.testing`: the documented recipe for testing your own agent runs as written."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_tools import RetryPolicy, ToolContext, Toolkit, tool
from durable_tools.conversation import ConversationOptions
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call
from durable_tools.transcript import ToolCallOutput

REFUNDS: list[dict[str, Any]] = []


@tool(needs_approval=True)
async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund an order; a person approves each refund.

    Args:
        order_id: The order to refund.
        amount_cents: The amount in cents.
    """
    REFUNDS.append({"order_id": order_id, "amount_cents": amount_cents})
    return {"refunded": amount_cents}


@tool
async def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return {"order_id": order_id, "total_cents": 1290}


kit = Toolkit(refund, lookup_order)


# The recipe of docs/testing.md and of durable_tools.testing's docstring, verbatim.
async def test_refund_waits_for_approval() -> None:
    model = ScriptedModel([[call("c1", "refund", order_id="A-1", amount_cents=5)], "Refunded."])
    async with AgentTestEnvironment.start(toolkit=kit, model=model) as env:
        chat = await env.start_conversation("Refund order A-1, please")
        (approval,) = (await env.wait_for_pending(chat)).approvals
        assert approval.tool == "refund"
        await env.approve(chat, approval)
        assert await env.wait_for_reply(chat) == "Refunded."


async def test_denial_reaches_the_model_and_timers_skip(time_env: WorkflowEnvironment) -> None:
    REFUNDS.clear()
    model = ScriptedModel(
        [
            [
                call("c1", "lookup_order", order_id="A-2"),
                call("c2", "refund", order_id="A-2", amount_cents=9),
            ],
            "I could not refund it.",
        ]
    )
    async with AgentTestEnvironment.start(toolkit=kit, model=model, env=time_env) as env:
        chat = await env.start_conversation(
            "Refund A-2", options=ConversationOptions(idle_timeout=3600)
        )
        (approval,) = (await env.wait_for_pending(chat)).approvals
        await env.deny(chat, approval, reason="over the limit")
        assert await env.wait_for_reply(chat) == "I could not refund it."
        outputs = await env.tool_outputs(chat)
        assert not outputs["c1"].is_error and "1290" in outputs["c1"].content
        assert outputs["c2"].failure_kind == "denied"
        assert "over the limit" in outputs["c2"].content
        # The model saw both outputs on its second turn.
        seen = {o.call_id for o in model.requests[1].transcript if isinstance(o, ToolCallOutput)}
        assert seen == {"c1", "c2"}
        # An hour of idle timeout passes at once on the time-skipping server.
        result = await env.result(chat, timeout=30)
        assert result.status == "idle_timeout"
    assert REFUNDS == []


ATTEMPTS: list[int] = []


@tool(local=True, timeout=5, retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
async def flaky_stock(order_id: str, ctx: ToolContext) -> str:
    """Check the stock; fails its first two attempts (a local tool).

    Args:
        order_id: The order id.
    """
    ATTEMPTS.append(ctx.attempt)
    if ctx.attempt < 3:
        raise ConnectionError("stock service busy")
    return f"{order_id} in stock"


async def test_an_approval_two_days_later_beside_a_local_tool(
    time_env: WorkflowEnvironment,
) -> None:
    """`skip` moves the clock while a local tool call retries in the same turn."""
    REFUNDS.clear()
    ATTEMPTS.clear()
    model = ScriptedModel(
        [
            [
                call("c1", "refund", order_id="A-3", amount_cents=7),
                call("c2", "flaky_stock", order_id="A-3"),
            ],
            "Refunded, and it is in stock.",
        ]
    )
    async with AgentTestEnvironment.start(
        toolkit=Toolkit(refund, flaky_stock), model=model, env=time_env
    ) as env:
        chat = await env.start_conversation("Refund A-3")
        (approval,) = (await env.wait_for_pending(chat)).approvals
        before = await time_env.get_current_time()
        await env.skip(timedelta(days=2))
        assert await time_env.get_current_time() - before >= timedelta(days=2)
        # Two days is inside the approval's 7-day deadline: still waiting.
        assert [a.call_id for a in (await env.conversations.pending(chat)).approvals] == ["c1"]
        await env.approve(chat, approval)
        assert await env.wait_for_reply(chat) == "Refunded, and it is in stock."
        outputs = await env.tool_outputs(chat)
    assert outputs["c2"].content == "A-3 in stock"
    assert ATTEMPTS == [1, 2, 3]
    assert REFUNDS == [{"order_id": "A-3", "amount_cents": 7}]


async def test_missing_server_binary_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_tools import MissingExtra, testing

    monkeypatch.setattr(testing.shutil, "which", lambda _name: None)
    monkeypatch.setattr(testing.sys, "executable", "/nonexistent/bin/python")
    with pytest.raises(MissingExtra, match=r"durable-tools\[dev-server\]"):
        async with AgentTestEnvironment.start(toolkit=kit, model=ScriptedModel([])):
            pass


@tool
async def export_orders(n_bytes: int) -> str:
    """Export the orders as one large text.

    Args:
        n_bytes: How large.
    """
    return "o" * n_bytes


async def test_a_large_result_with_storage_reaches_the_model(
    time_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    size = 3_000_000  # over the 1.5 MB a result may have without external storage
    model = ScriptedModel([[call("c1", "export_orders", n_bytes=size)], "Exported."])
    storage = PayloadStorage(driver=LocalFileStorageDriver(tmp_path))
    async with AgentTestEnvironment.start(
        toolkit=Toolkit(export_orders), model=model, env=time_env, storage=storage
    ) as env:
        chat = await env.start_conversation("Export everything")
        assert await env.wait_for_reply(chat) == "Exported."
        (output,) = [o for o in model.requests[1].transcript if isinstance(o, ToolCallOutput)]
        assert not output.is_error and output.content == "o" * size
        assert (await env.tool_outputs(chat))["c1"].content == "o" * size
    assert any(p.stat().st_size > size for p in tmp_path.rglob("*") if p.is_file())
