"""Interaction tools and signal tools in the durable loop, against real Temporal servers.

`ask` waits for a person's answer, validated against its answer schema;
`sleep`, `pause`, `handoff` and `finish` are carried out by the workflow; a new
user message supersedes whatever waits.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from agent_support import SPECIALIST, turns
from conftest import PENDING_KINDS
from temporalio.client import WorkflowExecutionStatus
from workflow_helpers import Harness, eventually, outputs_by_id

from durable_tools.approvals import call_digest
from durable_tools.conversation import ConversationOptions
from durable_tools.errors import DecisionRejected
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage, is_reconciled

QUESTION = {"question": "Shall I refund order o1?"}
DAY = 24 * 3600


async def test_answer_by_update_is_validated_against_the_answer_schema(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("q1", "ask", QUESTION)]))
    pending = await harness.wait_interaction(wf, "q1")
    assert pending.answer_schema == {"type": "string", "enum": ["yes", "no"]}
    assert pending.arguments_hash == call_digest("ask", "q1", json.dumps(QUESTION))
    assert (await conv.status(wf)).pending_interactions == 1

    with pytest.raises(DecisionRejected, match="answer schema"):
        await conv.answer(wf, "q1", "maybe", arguments_hash=pending.arguments_hash, wait=True)
    with pytest.raises(DecisionRejected, match="hash does not match"):
        await conv.answer(
            wf, "q1", "yes", arguments_hash=call_digest("ask", "q1", {"q": 1}), wait=True
        )
    with pytest.raises(DecisionRejected, match="unknown call id"):
        await conv.answer(wf, "q404", "yes", arguments_hash=pending.arguments_hash, wait=True)
    assert [i.call_id for i in (await conv.pending(wf)).interactions] == ["q1"]
    assert "q1" not in outputs_by_id(await conv.history(wf))

    receipt = await conv.answer(
        wf, "q1", "yes", arguments_hash=pending.arguments_hash, answered_by="customer", wait=True
    )
    assert receipt is not None and receipt.call_id == "q1"
    items = await harness.wait_assistant_text(wf, "done (directed)")
    output = outputs_by_id(items)["q1"]
    assert not output.is_error and output.content == "yes"
    requests = [r for r in harness.models["directed"].requests if r.workflow_id == wf]
    assert requests[-1].transcript[-1] == output  # the model's next turn read the answer

    with pytest.raises(DecisionRejected, match="q1"):
        await conv.answer(wf, "q1", "no", arguments_hash=pending.arguments_hash, wait=True)
    assert outputs_by_id(await conv.history(wf))["q1"].content == "yes"


async def test_invalid_answer_by_signal_is_recorded_as_rejected(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("q1", "ask", QUESTION)]))
    pending = await harness.wait_interaction(wf, "q1")
    await conv.answer(wf, "q1", 42, arguments_hash=pending.arguments_hash, answered_by="bot")

    async def rejected() -> bool:
        return any(r.call_id == "q1" for r in (await conv.pending(wf)).rejected)

    await eventually(rejected, what="the invalid answer in pending().rejected")
    state = await conv.pending(wf)
    assert [i.call_id for i in state.interactions] == ["q1"]
    assert "answer schema" in state.rejected[0].reason and state.rejected[0].decided_by == "bot"

    await conv.answer(wf, "q1", "no", arguments_hash=pending.arguments_hash)
    items = await harness.wait_assistant_text(wf, "done (directed)")
    assert outputs_by_id(items)["q1"].content == "no"


async def test_sleep_for_three_days_completes_at_once_with_time_skipping(
    time_harness: Harness,
) -> None:
    conv = time_harness.conversations
    options = ConversationOptions(idle_timeout=3600, search_attributes=True)
    began = time.monotonic()
    wf = await time_harness.start(
        turns([("z1", "sleep", {"seconds": 3 * DAY, "reason": "check again later"})]),
        options=options,
    )
    result = await time_harness.result(wf)
    assert time.monotonic() - began < 15
    assert result.status == "idle_timeout" and result.output == "done (directed)"

    items = await conv.history(wf)
    output = outputs_by_id(items)["z1"]
    assert not output.is_error and output.content == "slept 3 days"
    assert is_reconciled(items)
    described = await time_harness.client.get_workflow_handle(wf).describe()
    assert described.close_time is not None
    # Workflow time really advanced 3 days (plus the 1-hour idle timeout).
    assert described.close_time - described.start_time >= timedelta(days=3, hours=1)


async def test_new_message_wakes_a_sleep_early(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("z1", "sleep", {"seconds": DAY})]))
    await harness.wait_state(wf, "sleeping")
    await conv.send(wf, "wake up")
    items = await harness.wait_assistant_text(wf, "echo: wake up")
    assert outputs_by_id(items)["z1"].content == "woken early by a new user message"
    assert is_reconciled(items)


async def test_pause_waits_for_resume(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("p1", "pause", {"reason": "waiting for the invoice"})]))
    await harness.wait_state(wf, "paused")
    assert (await conv.pending(wf)).paused == "waiting for the invoice"
    described = await harness.client.get_workflow_handle(wf).describe()
    assert described.typed_search_attributes.get(PENDING_KINDS) == ["pause"]
    assert "p1" not in outputs_by_id(await conv.history(wf))

    await conv.resume(wf, "invoice attached", resumed_by="ana")
    items = await harness.wait_assistant_text(wf, "done (directed)")
    output = outputs_by_id(items)["p1"]
    assert not output.is_error and output.content == "invoice attached"
    assert (await conv.pending(wf)).paused is None
    described = await harness.client.get_workflow_handle(wf).describe()
    assert not described.typed_search_attributes.get(PENDING_KINDS)  # an empty list unsets it


async def test_handoff_switches_the_agent(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(
        turns([("h1", "handoff", {"agent": "specialist", "reason": "refund expert"})]),
        handoffs=[SPECIALIST],
    )
    items = await harness.wait_assistant_text(wf, "done (specialist-model)")
    assert outputs_by_id(items)["h1"].content == "handed off to specialist"
    status = await conv.status(wf)
    assert status.agent == "specialist" and status.turns == 2

    await conv.send(wf, "hello specialist")
    await harness.wait_assistant_text(wf, "echo: hello specialist")
    main = [r for r in harness.models["directed"].requests if r.workflow_id == wf]
    special = [r for r in harness.models["specialist-model"].requests if r.workflow_id == wf]
    assert len(main) == 1 and len(special) == 2
    assert all(r.instructions == "You are the specialist." for r in special)
    assert (await conv.status(wf)).agent == "specialist"
    # The Web UI names each turn's agent: after the handoff, the specialist.
    history = await harness.client.get_workflow_handle(wf).fetch_history()
    converter = harness.client.data_converter.payload_converter
    summaries = [
        converter.from_payload(e.user_metadata.summary, str)
        if e.user_metadata.HasField("summary")
        else None
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "model.turn"
    ]
    assert summaries == [
        "main: directed, turn 1",
        "specialist: specialist-model, turn 2",
        "specialist: specialist-model, turn 3",
    ]


async def test_finish_ends_the_conversation_with_its_output(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(
        turns(
            [
                ("w1", "get_weather", {"city": "Lima"}),
                ("f1", "finish", {"output": {"answer": 42, "city": "Lima"}}),
            ]
        )
    )
    result = await harness.result(wf)
    assert result.status == "finished"
    assert result.output == {"answer": 42, "city": "Lima"}
    assert result.turns == 1
    assert await harness.execution_status(wf) == WorkflowExecutionStatus.COMPLETED

    status = await conv.status(wf)  # replayed on the closed workflow
    assert status.state == "finished" and status.reconciled
    outputs = outputs_by_id(await conv.history(wf))
    assert outputs["f1"].content == "finished"
    assert json.loads(outputs["w1"].content)["city"] == "Lima"
    # The model was asked exactly once: finishing ends the loop.
    assert len([r for r in harness.models["directed"].requests if r.workflow_id == wf]) == 1


async def test_send_while_an_approval_is_pending_cancels_it(harness: Harness) -> None:
    conv = harness.conversations
    wf = await harness.start(turns([("r1", "refund", {"order": "o1", "amount": 500})]))
    pending = await harness.wait_approval(wf, "r1")

    await conv.send(wf, "never mind, keep the order")
    items = await harness.wait_assistant_text(wf, "echo: never mind, keep the order")
    output = outputs_by_id(items)["r1"]
    assert output.is_error and output.failure_kind == "cancelled"
    assert is_reconciled(items)
    # Order the provider requires: call, its output, then the new message.
    assert [type(i).__name__ for i in items] == [
        "UserMessage",
        "AssistantMessage",
        "ToolCallOutput",
        "UserMessage",
        "AssistantMessage",
    ]
    assert isinstance(items[3], UserMessage) and items[3].text == "never mind, keep the order"
    requests = [r for r in harness.models["directed"].requests if r.workflow_id == wf]
    last = requests[-1].transcript
    assert isinstance(last[-1], UserMessage) and isinstance(last[-2], ToolCallOutput)
    assert isinstance(last[-3], AssistantMessage)

    # The cancelled approval can no longer be approved.
    assert (await conv.pending(wf)).approvals == []
    with pytest.raises(DecisionRejected):
        await conv.approve(wf, "r1", arguments_hash=pending.arguments_hash, wait=True)
    assert harness.ledger_rows("refund") == []


async def test_a_pause_with_a_deadline_ends_by_itself(harness: Harness) -> None:
    """`pause_tool(max_seconds=2)`: nobody resumes, the call's output says so."""
    conv = harness.conversations
    wf = await harness.start(turns([("h1", "hold", {"reason": "waiting for the invoice"})]))
    # (Not asserted while paused: 2 s can pass before a loaded machine looks.)
    items = await harness.wait_assistant_text(wf, "done (directed)")
    output = outputs_by_id(items)["h1"]
    assert not output.is_error
    assert output.content == "nobody resumed the conversation within 2 s"
    assert (await conv.pending(wf)).paused is None


async def test_a_pause_beside_sleeps_settles_as_paused(harness: Harness) -> None:
    """Calls of one turn wait side by side: when the sleeps end, the turn is paused."""
    conv = harness.conversations
    script = turns(
        [
            ("s1", "sleep", {"seconds": 1}),
            ("p1", "pause", {"reason": "waiting for the invoice"}),
            ("s2", "sleep", {"seconds": 1}),
        ]
    )
    wf = await harness.start(script)
    outcome = await conv.wait_turn(wf)  # hung before: the last sleep left state "sleeping"
    assert outcome.pending.paused == "waiting for the invoice"

    async def slept() -> bool:
        outputs = outputs_by_id(await conv.history(wf))
        return "s1" in outputs and "s2" in outputs

    await eventually(slept, what="both sleeps over")
    assert (await conv.status(wf)).state == "paused"
    await conv.resume(wf, "invoice attached")
    items = await harness.wait_assistant_text(wf, "done (directed)")
    assert outputs_by_id(items)["p1"].content == "invoice attached"
