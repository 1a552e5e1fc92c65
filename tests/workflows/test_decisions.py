"""Invariant 3: decisions are bound to their call and fail closed; early ones only on request.

Against real Temporal servers (the dev server; the time-skipping server for
deadlines). `refund` needs approval and records every run in the ledger, so
"nothing ran" and "ran exactly once" are read from the ledger.
"""

from __future__ import annotations

import json
import time

import pytest
from agent_support import turns
from conftest import PENDING_COUNT, PENDING_KINDS
from workflow_helpers import Harness, eventually, outputs_by_id

from durable_tools.approvals import call_digest
from durable_tools.conversation import ConversationOptions, RejectedDecision
from durable_tools.errors import DecisionRejected
from durable_tools.transcript import ToolCallOutput, is_reconciled

REFUND = {"order": "o1", "amount": 500}
WRONG_HASH = call_digest("refund", "r1", {"order": "o1", "amount": 50_000})


async def _rejected(harness: Harness, wf: str, call_id: str, n: int = 1) -> list[RejectedDecision]:
    async def probe() -> list[RejectedDecision] | None:
        found = [
            r for r in (await harness.conversations.pending(wf)).rejected if r.call_id == call_id
        ]
        return found if len(found) >= n else None

    return await eventually(probe, what=f"{n} rejected decision(s) for {call_id!r}")


async def test_bad_decisions_by_update_are_rejected_and_nothing_runs(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("r1", "refund", REFUND)]))
    pending = await harness.wait_approval(wf, "r1")
    assert pending.arguments_hash == call_digest("refund", "r1", json.dumps(REFUND))
    assert pending.tool == "refund" and "order='o1'" in pending.summary

    # The workflow publishes what waits as search attributes.
    described = await harness.client.get_workflow_handle(wf).describe()
    assert described.typed_search_attributes.get(PENDING_COUNT) == 1
    assert described.typed_search_attributes.get(PENDING_KINDS) == ["approval"]

    with pytest.raises(DecisionRejected, match="hash does not match"):
        await conv.approve(wf, "r1", arguments_hash=WRONG_HASH, decided_by="mallory", wait=True)
    with pytest.raises(DecisionRejected, match="unknown call id 'r404'"):
        await conv.approve(wf, "r404", arguments_hash=pending.arguments_hash, wait=True)
    with pytest.raises(DecisionRejected, match="hash does not match"):
        await conv.deny(wf, "r1", arguments_hash=WRONG_HASH, wait=True)

    # Fail closed: the call still waits, and it neither ran nor was denied.
    assert [a.call_id for a in (await conv.pending(wf)).approvals] == ["r1"]
    assert "r1" not in outputs_by_id(await conv.history(wf))
    assert harness.ledger_rows("refund") == []

    receipt = await conv.approve(
        wf, "r1", arguments_hash=pending.arguments_hash, decided_by="ana", wait=True
    )
    assert receipt is not None and receipt.call_id == "r1" and receipt.accepted
    outputs = await harness.wait_outputs(wf, "r1")
    assert not outputs["r1"].is_error and outputs["r1"].content == "refunded 500 on o1"

    # A second decision, either way, is rejected and changes nothing.
    with pytest.raises(DecisionRejected, match="r1"):
        await conv.approve(wf, "r1", arguments_hash=pending.arguments_hash, wait=True)
    with pytest.raises(DecisionRejected, match="r1"):
        await conv.deny(wf, "r1", arguments_hash=pending.arguments_hash, wait=True)

    await harness.wait_assistant_text(wf, "done (directed)")
    rows = harness.ledger_rows("refund")
    assert [r["call_id"] for r in rows] == ["r1"]
    assert rows[0]["key"] == f"{wf}/r1"
    described = await harness.client.get_workflow_handle(wf).describe()
    assert described.typed_search_attributes.get(PENDING_COUNT) == 0


async def test_bad_decisions_by_signal_are_recorded_as_rejected(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(
        turns([("w1", "get_weather", {"city": "Rome"}), ("r1", "refund", REFUND)])
    )
    pending = await harness.wait_approval(wf, "r1")
    await harness.wait_outputs(wf, "w1")

    # Wrong hash for the pending call.
    await conv.approve(wf, "r1", arguments_hash=WRONG_HASH, decided_by="mallory")
    [bad] = await _rejected(harness, wf, "r1")
    assert "hash does not match" in bad.reason and bad.decided_by == "mallory"
    # A call that is not waiting for a decision (it already has its output).
    await conv.approve(wf, "w1", arguments_hash=call_digest("get_weather", "w1", {"city": "Rome"}))
    [not_waiting] = await _rejected(harness, wf, "w1")
    assert "not waiting for a decision" in not_waiting.reason
    # A call id the conversation has never seen: early decisions are off by
    # default, so it is rejected and recorded (nobody could have seen that call).
    await conv.approve(wf, "r404", arguments_hash=pending.arguments_hash)
    [unknown] = await _rejected(harness, wf, "r404")
    assert "unknown call id 'r404'" in unknown.reason and "early" in unknown.reason

    state = await conv.pending(wf)
    assert [a.call_id for a in state.approvals] == ["r1"]
    assert harness.ledger_rows("refund") == []
    assert "r1" not in outputs_by_id(await conv.history(wf))

    # The right decision, immediately followed by a contradicting second one:
    # the first wins, the second is rejected, the tool runs exactly once.
    await conv.approve(wf, "r1", arguments_hash=pending.arguments_hash, decided_by="ana")
    await conv.deny(wf, "r1", arguments_hash=pending.arguments_hash, decided_by="bob")
    second = await _rejected(harness, wf, "r1", n=2)
    assert second[-1].decided_by == "bob"
    items = await harness.wait_assistant_text(wf, "done (directed)")
    outputs = outputs_by_id(items)
    assert outputs["r1"].content == "refunded 500 on o1"
    assert [r["call_id"] for r in harness.ledger_rows("refund")] == ["r1"]
    assert is_reconciled(items)


async def test_denial_reaches_the_model_with_its_reason(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("r1", "refund", REFUND)]))
    pending = await harness.wait_approval(wf, "r1")
    await conv.deny(
        wf, "r1", arguments_hash=pending.arguments_hash, decided_by="ana", reason="amount too high"
    )
    items = await harness.wait_assistant_text(wf, "done (directed)")
    output = outputs_by_id(items)["r1"]
    assert output.is_error and output.failure_kind == "denied"
    reason = json.loads(output.content)["reason"]
    assert "amount too high" in reason and "ana" in reason
    requests = [r for r in harness.models["directed"].requests if r.workflow_id == wf]
    assert requests[-1].transcript[-1] == output  # the next turn saw the denial
    assert harness.ledger_rows("refund") == []


async def test_early_decision_is_kept_and_applied_only_when_the_conversation_accepts_them(
    harness: Harness,
) -> None:
    conv = harness.conversations
    options = ConversationOptions(accept_early_decisions=True)
    wf = await harness.start(options=options)  # idle: no message yet
    await harness.wait_state(wf, "idle")
    early_args = {"order": "o9", "amount": 900}
    forged_args = {"order": "o8", "amount": 800}
    # The decider saw the exact argument text the model is about to send.
    await conv.approve(
        wf,
        "r9",
        arguments_hash=call_digest("refund", "r9", json.dumps(early_args)),
        decided_by="ana",
    )
    # An early decision with the wrong hash is kept, then rejected when its
    # call arrives: fail closed, the call waits.
    await conv.approve(
        wf, "r8", arguments_hash=call_digest("refund", "r8", early_args), decided_by="eve"
    )
    assert (await conv.pending(wf)).rejected == []

    await conv.send(wf, turns([("r9", "refund", early_args), ("r8", "refund", forged_args)]))

    outputs = await harness.wait_outputs(wf, "r9")
    assert outputs["r9"].content == "refunded 900 on o9"
    pending = await harness.wait_approval(wf, "r8")
    [rejected] = await _rejected(harness, wf, "r8")
    assert rejected.decided_by == "eve" and "hash does not match" in rejected.reason
    assert [r["call_id"] for r in harness.ledger_rows("refund")] == ["r9"]

    await conv.deny(wf, "r8", arguments_hash=pending.arguments_hash, reason="not this one")
    items = await harness.wait_assistant_text(wf, "done (directed)")
    assert outputs_by_id(items)["r8"].failure_kind == "denied"
    assert [r["call_id"] for r in harness.ledger_rows("refund")] == ["r9"]


async def test_approval_deadline_passing_gives_expired(time_harness: Harness) -> None:
    conv = time_harness.conversations
    options = ConversationOptions(
        approval_deadline=2 * 24 * 3600, idle_timeout=3600, search_attributes=True
    )
    wf = await time_harness.start(turns([("r1", "refund", REFUND)]), options=options)
    pending = await time_harness.wait_approval(wf, "r1")
    assert (pending.deadline - pending.requested_at).total_seconds() == 2 * 24 * 3600

    began = time.monotonic()
    # Waiting for the result lets the test server skip time: the 2-day
    # deadline passes, the model answers, the 1-hour idle timeout ends it.
    result = await time_harness.result(wf)
    assert time.monotonic() - began < 15
    assert result.status == "idle_timeout" and result.output == "done (directed)"

    items = await conv.history(wf)  # replayed by the running worker
    assert is_reconciled(items)
    output = outputs_by_id(items)["r1"]
    assert output.is_error and output.failure_kind == "expired"
    assert "2 days" in json.loads(output.content)["reason"]
    assert isinstance(items[-2], ToolCallOutput)  # the model turn after saw it
    assert time_harness.ledger_rows("refund") == []
