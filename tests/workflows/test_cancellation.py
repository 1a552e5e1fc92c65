"""Invariant 1 under cancellation: a cancelled conversation leaves a reconciled transcript.

A turn runs `slow` (started, outcome unknown when cancelled: `interrupted`)
beside `refund` waiting for approval (never started: `cancelled`). Cancelling
the conversation closes the workflow as cancelled, and the transcript read
from the closed workflow (the `history` query, replayed by a running worker)
answers both calls.
"""

from __future__ import annotations

import json

import pytest
from agent_support import turns
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError
from workflow_helpers import Harness, eventually, outputs_by_id

from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage, is_reconciled


async def test_cancel_with_a_running_tool_and_a_pending_approval(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(
        turns(
            [
                ("w1", "get_weather", {"city": "Bern"}),
                ("s1", "slow", {"seconds": 25}),
                ("r1", "refund", {"order": "o1", "amount": 500}),
            ]
        )
    )
    await harness.wait_approval(wf, "r1")

    async def slow_started() -> bool:
        return any(r.get("call_id") == "s1" for r in harness.ledger_rows("slow"))

    await eventually(slow_started, what="the slow tool to start")
    await harness.wait_outputs(wf, "w1")
    status = await conv.status(wf)
    assert status.running_tools == 1 and status.pending_approvals == 1
    assert not status.reconciled  # s1 and r1 are still open

    await conv.cancel(wf)

    with pytest.raises(WorkflowFailureError) as raised:
        await harness.result(wf)
    assert isinstance(raised.value.cause, CancelledError)
    assert await harness.execution_status(wf) == WorkflowExecutionStatus.CANCELED

    items = await conv.history(wf)  # the closed workflow, replayed by the worker
    assert is_reconciled(items)
    assert [type(i) for i in items] == [
        UserMessage,
        AssistantMessage,
        ToolCallOutput,
        ToolCallOutput,
        ToolCallOutput,
    ]
    outputs = outputs_by_id(items)
    assert not outputs["w1"].is_error
    assert outputs["s1"].failure_kind == "interrupted"
    assert "may have" in json.loads(outputs["s1"].content)["reason"]  # outcome unknown
    assert outputs["r1"].failure_kind == "cancelled"
    assert "cancelled" in json.loads(outputs["r1"].content)["reason"]

    status = await conv.status(wf)
    assert status.state == "cancelled" and status.reconciled
    assert (await conv.pending(wf)).approvals == []
    assert harness.ledger_rows("refund") == []
    # Only one attempt of the slow tool ever started, and it never finished.
    slow = [r for r in harness.ledger_rows("slow") if r.get("call_id") == "s1"]
    assert [r.get("attempt") for r in slow] == [1]
