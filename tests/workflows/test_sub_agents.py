"""Agents as tools: a call of an agent tool runs its sub-agent as a child conversation (dev server).

The `desk` agent's toolkit has `agent_tool("researcher")`; the `directed`
model reads the call's `message` as the researcher's own script, so one
parent message scripts both conversations. Each test checks what a user
would notice: the call's one output (the sub-agent's final output, or a
`Failure`), the child's workflow id in the parent's `pending`, the child
cancelled with its parent, the budget checked before the child starts, and
the child's spend counted in the parent's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import DESK, LEDGER_ENV, MODELS, TOOLKITS, metered, turns
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import Harness, eventually, running

from durable_tools._wire import ConversationInput
from durable_tools.agent_tools import MAX_SUB_AGENT_DEPTH, sub_agent_workflow_id

with workflow.unsafe.imports_passed_through():
    from durable_tools.client import Conversations
    from durable_tools.worker.plugin import DurableToolsPlugin

from durable_tools.agents import Agent
from durable_tools.budgets import Budget, ModelPrice
from durable_tools.conversation import AgentConfig, ConversationOptions, ConversationResult
from durable_tools.errors import ConfigurationError
from durable_tools.teams import TEAM
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import ToolCallOutput, Usage, is_reconciled
from durable_tools.workflows.embedded import run_agent

PRICE = ModelPrice(input_per_million=1.0, cached_input_per_million=0.5, output_per_million=2.0)
CALL_USD = (200 * 1.0 + 100 * 0.5 + 100 * 2.0) / 1_000_000
DESK_AGENT = AgentConfig(name="desk")


def _ask(task: str, call_id: str = "r1") -> str:
    """The parent's script: one call of the researcher with `task` as its message."""
    return turns([(call_id, "researcher", {"message": task})])


def _child(wf: str, call_id: str = "r1", turn: int = 1) -> str:
    return sub_agent_workflow_id(wf, turn, call_id)


@pytest.fixture
async def desk(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    agents = {
        "desk": Agent(model="metered", toolkit="desk"),
        "researcher": Agent(model="metered", toolkit="tests"),
    }
    async with running(
        dev_env,
        task_queue,
        ledger,
        models={"metered": ScriptedModel(metered)},
        agents=agents,
        prices={"metered": PRICE},
    ) as h:
        yield h


def _output(items: list[Any], call_id: str) -> ToolCallOutput:
    found = [i for i in items if isinstance(i, ToolCallOutput) and i.call_id == call_id]
    assert len(found) == 1, found  # exactly one output
    return found[0]


def test_an_agent_tool_of_an_undeclared_agent_fails_at_construction() -> None:
    from durable_tools.agents import check_agents

    with pytest.raises(ConfigurationError, match="runs agent 'researcher'"):
        check_agents(
            {"desk": Agent(model="m", toolkit="desk")},
            toolkits={"desk": DESK},
            models={},
            allow_offline_models=True,
        )


def test_the_descriptor_asks_for_a_message_and_the_child_id_is_stable() -> None:
    descriptor = DESK.tools["researcher"].descriptor()
    assert descriptor.kind == "signal"
    assert descriptor.parameters["required"] == ["message"]
    assert _child("conv-1", "call_1", 3) == "conv-1/sub-agent/3/call_1"
    odd = _child("conv-1", "id with spaces/and slashes", 2)
    assert odd.startswith("conv-1/sub-agent/2/h") and " " not in odd
    assert odd == _child("conv-1", "id with spaces/and slashes", 2)


async def test_the_sub_agents_final_output_is_the_calls_result(desk: Harness) -> None:
    h = desk
    child_script = turns([("w1", "get_weather", {"city": "Oslo"})])
    wf = await h.start(_ask(child_script), agent=DESK_AGENT)
    items = await h.wait_assistant_text(wf, "done (metered)")
    output = _output(items, "r1")
    assert not output.is_error and output.content == "done (metered)"
    assert is_reconciled(items)
    # The child ran its own tool call in its own transcript.
    child = _child(wf)
    child_items = await h.conversations.history(child)
    assert _output(child_items, "w1").content.startswith('{"city"')
    assert await h.execution_status(child) == WorkflowExecutionStatus.COMPLETED
    # Its spend joins the parent's: two parent turns and two child turns.
    status = await h.conversations.status(wf)
    assert status.cost_usd == pytest.approx(4 * CALL_USD)
    assert status.usage == {
        "metered": Usage(input_tokens=1200, output_tokens=400, cached_input_tokens=400)
    }


async def test_a_sub_agent_that_hits_its_turn_limit_is_a_failure_the_model_reads(
    desk: Harness,
) -> None:
    h = desk
    looping = turns(*[[(f"w{k}", "get_weather", {"city": "Oslo"})] for k in range(5)])
    options = ConversationOptions(max_model_turns=3)
    wf = await h.start(_ask(looping), agent=DESK_AGENT, options=options)
    items = await h.wait_assistant_text(wf, "done (metered)")
    output = _output(items, "r1")
    assert output.is_error and output.failure_kind == "sub_agent_failed"
    assert "ended with turn_limit after 3 model turns" in output.content
    assert _child(wf) in output.content


async def test_a_sub_agents_structured_finish_output_is_the_result(desk: Harness) -> None:
    h = desk
    child_script = turns([("f1", "finish", {"output": {"answer": 42, "sources": ["a"]}})])
    wf = await h.start(_ask(child_script), agent=DESK_AGENT)
    items = await h.wait_assistant_text(wf, "done (metered)")
    output = _output(items, "r1")
    assert json.loads(output.content) == {"answer": 42, "sources": ["a"]}


async def test_a_sub_agent_cancelled_by_itself_is_a_failure_and_the_parent_goes_on(
    desk: Harness,
) -> None:
    h = desk
    child_script = turns([("f1", "refund", {"order": "o1", "amount": 5})])
    wf = await h.start(_ask(child_script), agent=DESK_AGENT)
    child = _child(wf)
    await h.wait_approval(child, "f1")
    await h.conversations.cancel(child, cancelled_by="ops")
    items = await h.wait_assistant_text(wf, "done (metered)")
    output = _output(items, "r1")
    assert output.failure_kind == "sub_agent_failed"
    assert f"sub-agent 'researcher' (workflow {child}) did not finish" in output.content
    status = await h.conversations.status(wf)
    assert status.state == "idle"
    # The child's one model call counts in the parent's spend, beside its own two.
    assert status.cost_usd == pytest.approx(3 * CALL_USD)
    assert status.budget is not None and status.budget.spent.tokens == 3 * 400


async def test_a_terminated_sub_agents_spend_still_counts_in_the_parents(desk: Harness) -> None:
    """A child with no result (terminated) is read by `sub_agent.spend-v1`: its
    model calls are not free for the parent's budget."""
    h = desk
    child_script = turns(
        [("w1", "get_weather", {"city": "Oslo"})], [("f1", "refund", {"order": "o1", "amount": 5})]
    )
    options = ConversationOptions(budget=Budget(max_tokens=100_000))
    wf = await h.start(_ask(child_script), agent=DESK_AGENT, options=options)
    child = _child(wf)
    await h.wait_approval(child, "f1")  # after two model calls
    await h.client.get_workflow_handle(child).terminate(reason="runaway")
    items = await h.wait_assistant_text(wf, "done (metered)")
    output = _output(items, "r1")
    assert output.failure_kind == "sub_agent_failed"
    assert "TerminatedError" in output.content and "not counted" not in output.content
    status = await h.conversations.status(wf)
    assert status.usage == {
        "metered": Usage(input_tokens=1200, output_tokens=400, cached_input_tokens=400)
    }
    assert status.cost_usd == pytest.approx(4 * CALL_USD)
    assert status.budget is not None and status.budget.spent.tokens == 4 * 400
    events = [e async for e in h.client.get_workflow_handle(wf).fetch_history_events()]
    reads = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "sub_agent.spend-v1"
    ]
    assert len(reads) == 1


async def test_sub_agents_nest_only_so_deep(desk: Harness) -> None:
    h = desk
    options = ConversationOptions(sub_agent_depth=MAX_SUB_AGENT_DEPTH)
    wf = await h.start(_ask("hello"), agent=DESK_AGENT, options=options)
    items = await h.wait_assistant_text(wf, "done (metered)")
    output = _output(items, "r1")
    assert output.failure_kind == "sub_agent_failed" and "levels deep" in output.content
    with pytest.raises(Exception, match="not found"):
        await h.client.get_workflow_handle(_child(wf)).describe()
    # One level less: the child starts, one level deeper than its parent.
    options = ConversationOptions(sub_agent_depth=MAX_SUB_AGENT_DEPTH - 1)
    wf = await h.start(_ask("hello"), agent=DESK_AGENT, options=options)
    items = await h.wait_assistant_text(wf, "done (metered)")
    assert _output(items, "r1").content == "echo: hello"
    history = await h.client.get_workflow_handle(_child(wf)).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    child_input = pydantic_data_converter.payload_converter.from_payload(
        started.input.payloads[0], ConversationInput
    )
    assert child_input.options.sub_agent_depth == MAX_SUB_AGENT_DEPTH
    assert child_input.options.finish_on_reply


async def test_hostile_arguments_are_an_input_validation_error_and_start_nothing(
    desk: Harness,
) -> None:
    h = desk
    script = turns(
        [
            ("r1", "researcher", {"msg": 3}),
            ("r2", "researcher", "not json"),
            ("r3", "researcher", {"message": ""}),
        ]
    )
    wf = await h.start(script, agent=DESK_AGENT)
    items = await h.wait_assistant_text(wf, "done (metered)")
    for call_id in ("r1", "r2", "r3"):
        output = _output(items, call_id)
        assert output.failure_kind == "input_validation_error", output
    for call_id in ("r1", "r2", "r3"):
        with pytest.raises(Exception, match="not found"):
            await h.client.get_workflow_handle(_child(wf, call_id)).describe()


async def test_approvals_of_the_sub_agent_are_reachable_and_a_parent_cancel_cancels_it(
    desk: Harness,
) -> None:
    h = desk
    child_script = turns(
        [("f1", "refund", {"order": "o1", "amount": 5})],
        [("f2", "refund", {"order": "o2", "amount": 7})],
    )
    wf = await h.start(_ask(child_script), agent=DESK_AGENT, team="support")
    child = _child(wf)

    async def running_sub_agent() -> bool:
        pending = await h.conversations.pending(wf)
        return [s.workflow_id for s in pending.sub_agents] == [child]

    await eventually(running_sub_agent, what="the sub-agent in the parent's pending")
    # A person approves in the child, by the child's workflow id.
    approval = await h.wait_approval(child, "f1")
    described = await h.client.get_workflow_handle(child).describe()
    assert described.typed_search_attributes.get(TEAM) == "support"  # the parent's team
    assert described.parent_id == wf
    await h.conversations.approve(
        child, "f1", arguments_hash=approval.arguments_hash, decided_by="ana"
    )
    await h.wait_approval(child, "f2")
    await h.conversations.cancel(wf, cancelled_by="ops")
    with pytest.raises(WorkflowFailureError) as raised:
        await h.result(wf)
    assert isinstance(raised.value.cause, CancelledError)

    async def child_cancelled() -> bool:
        return await h.execution_status(child) == WorkflowExecutionStatus.CANCELED

    await eventually(child_cancelled, what="the child cancelled with its parent")
    items = await h.conversations.history(wf)
    output = _output(items, "r1")
    # It started (the child's refund ran): `interrupted`, never `cancelled` (invariant 1).
    assert output.failure_kind == "interrupted" and output.sent_by == "ops"
    assert child in output.content
    assert is_reconciled(items)
    child_items = await h.conversations.history(child)
    assert _output(child_items, "f1").content == "refunded 5 on o1"
    assert _output(child_items, "f2").failure_kind == "cancelled"


async def test_the_budget_stops_the_sub_agent_before_it_starts_and_a_raise_resumes_it(
    desk: Harness,
) -> None:
    h = desk
    child_script = turns([("w1", "get_weather", {"city": "Oslo"})])
    options = ConversationOptions(budget=Budget(max_tokens=500))
    wf = await h.start(_ask(child_script), agent=DESK_AGENT, options=options)
    await h.wait_state(wf, "budget_exceeded")
    pending = await h.conversations.pending(wf)
    assert pending.budget_exceeded is not None
    assert "400 tokens spent + ~400 for the next call > limit 500 tokens" in (
        pending.budget_exceeded.message
    )
    assert pending.sub_agents == []
    assert pending.budget_exceeded.call_id == "r1"
    assert pending.budget_exceeded.what_waits() == "sub-agent call 'r1' (turn 1)"
    with pytest.raises(Exception, match="not found"):  # nothing started
        await h.client.get_workflow_handle(_child(wf)).describe()
    await h.conversations.raise_budget(wf, max_tokens=10_000, requested_by="ops")
    items = await h.wait_assistant_text(wf, "done (metered)")
    assert _output(items, "r1").content == "done (metered)"
    # The child got what was left of the parent's budget.
    child_status = await h.conversations.status(_child(wf))
    assert child_status.budget is not None
    assert child_status.budget.conversation == Budget(max_tokens=9600)
    status = await h.conversations.status(wf)
    assert status.budget is not None
    assert status.budget.spent.tokens == 4 * 400  # its own two calls and the child's two
    assert status.budget.spent.last_tokens == 400  # the next call's estimate: its own last
    assert status.cost_usd == pytest.approx(4 * CALL_USD)


async def test_a_conversation_with_finish_on_reply_ends_with_the_reply(desk: Harness) -> None:
    h = desk
    options = ConversationOptions(finish_on_reply=True)
    wf = await h.start(json.dumps("hi"), agent=AgentConfig(name="researcher"), options=options)
    result: ConversationResult = await h.result(wf)
    assert result.status == "finished" and result.output == 'echo: "hi"'


def test_the_recorded_history_starts_one_child_after_the_raise() -> None:
    """`histories/sub_agents.json` (record_histories.py): what replay holds the loop to."""
    from temporalio.api.enums.v1 import EventType, ParentClosePolicy
    from temporalio.client import WorkflowHistory
    from temporalio.contrib.pydantic import pydantic_data_converter

    path = Path(__file__).resolve().parent / "histories" / "sub_agents.json"
    history = WorkflowHistory.from_json("sub_agents", path.read_text())
    steps: list[str] = []
    started: list[Any] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            steps.append(event.workflow_execution_signaled_event_attributes.signal_name)
        elif event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            started.append(event.start_child_workflow_execution_initiated_event_attributes)
            steps.append("child")
        elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            attributes = event.child_workflow_execution_completed_event_attributes
            (payload,) = attributes.result.payloads
            result = pydantic_data_converter.payload_converter.from_payload(
                payload, ConversationResult
            )
            assert result.status == "finished" and result.turns == 3
            steps.append("child_completed")
    assert [s for s in steps if s in ("raise_budget", "child", "child_completed")] == [
        "raise_budget",
        "child",
        "child_completed",
    ]
    (child,) = started  # one child, for r1 only (r2's arguments were refused)
    assert child.workflow_id == sub_agent_workflow_id("sub_agents", 1, "r1")
    assert child.workflow_type.name == "AgentWorkflow"
    assert child.parent_close_policy == ParentClosePolicy.PARENT_CLOSE_POLICY_REQUEST_CANCEL


async def test_the_parent_does_not_continue_as_new_while_its_child_runs(desk: Harness) -> None:
    h = desk
    child_script = turns(
        [("f1", "refund", {"order": "o1", "amount": 5})],
        [("w1", "get_weather", {"city": "Oslo"})],
    )
    # Both continue as new after every model turn: the child too (it gets the options).
    options = ConversationOptions(continue_as_new_after_turns=1)
    wf = await h.start(_ask(child_script), agent=DESK_AGENT, options=options)
    child = _child(wf)
    approval = await h.wait_approval(child, "f1")
    status = await h.conversations.status(wf)
    assert status.runs == 1 and status.state == "tools"
    await h.conversations.approve(child, "f1", arguments_hash=approval.arguments_hash)
    items = await h.wait_assistant_text(wf, "done (metered)")
    assert _output(items, "r1").content == "done (metered)"
    assert (await h.conversations.status(child)).runs >= 2  # the child's chain's result
    assert (await h.conversations.status(wf)).runs >= 2  # the parent moved on afterwards


async def test_a_parent_cancelled_while_the_budget_stops_the_call_starts_nothing(
    desk: Harness,
) -> None:
    h = desk
    options = ConversationOptions(budget=Budget(max_tokens=500))
    wf = await h.start(_ask("hello"), agent=DESK_AGENT, options=options)
    await h.wait_state(wf, "budget_exceeded")
    await h.conversations.cancel(wf)
    with pytest.raises(WorkflowFailureError):
        await h.result(wf)
    output = _output(await h.conversations.history(wf), "r1")
    assert output.failure_kind == "cancelled" and "before this call started" in output.content
    with pytest.raises(Exception, match="not found"):
        await h.client.get_workflow_handle(_child(wf)).describe()


def test_durable_tools_pending_names_the_sub_agents_workflow() -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from durable_tools.conversation import PendingState, RunningSubAgent
    from durable_tools.worker.render import render_pending

    running = RunningSubAgent(
        call_id="r1",
        tool="researcher",
        agent="researcher",
        workflow_id="conv-1/sub-agent/1/r1",
        started_at=datetime(2026, 11, 26, tzinfo=UTC),
    )
    console = Console(width=400, record=True)
    console.print(render_pending(PendingState(sub_agents=[running])))
    text = console.export_text()
    assert "nothing pending" not in text
    assert "durable-tools pending conv-1/sub-agent/1/r1" in text


@workflow.defn
class TriageWorkflow:
    """A user's workflow running the loop inside itself (`run_agent`), with an agent tool."""

    @workflow.run
    async def run(self, message: str) -> Any:
        desk = AgentConfig(name="desk", model="directed", toolkit="desk")
        researcher = AgentConfig(name="researcher", model="directed", toolkit="tests")
        result = await run_agent(
            desk,
            message=message,
            handoffs=[researcher],
            namespace="triage",
            options=ConversationOptions(finish_on_reply=True),
        )
        return result.output


async def test_an_embedded_loop_runs_its_sub_agent_under_its_namespace(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    config = dev_env.client.config()
    config["plugins"] = [DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)]
    client = Client(**config)
    wid = f"triage-{uuid.uuid4()}"
    child_script = turns([("w1", "get_weather", {"city": "Oslo"})])
    async with Worker(client, task_queue=task_queue, workflows=[TriageWorkflow]):
        handle = await client.start_workflow(
            TriageWorkflow.run, _ask(child_script), id=wid, task_queue=task_queue
        )
        assert await asyncio.wait_for(handle.result(), 30) == "done (directed)"
        child = sub_agent_workflow_id(f"{wid}/triage", 1, "r1")
        description = await client.get_workflow_handle(child).describe()
        assert description.parent_id == wid
        items = await Conversations(client, task_queue=task_queue).history(child)
        assert _output(items, "w1").content.startswith('{"city"')


async def test_a_new_worker_takes_over_a_parent_whose_child_waits_and_starts_no_second_child(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    agents = {
        "desk": Agent(model="metered", toolkit="desk"),
        "researcher": Agent(model="metered", toolkit="tests"),
    }
    models = {"metered": ScriptedModel(metered)}
    child_script = turns([("f1", "refund", {"order": "o1", "amount": 5})])
    async with running(dev_env, task_queue, ledger, models=models, agents=agents) as first:
        wf = await first.start(_ask(child_script), agent=DESK_AGENT)
        first.started.remove(wf)  # it outlives this worker
        child = _child(wf)
        approval = await first.wait_approval(child, "f1")
    # The first worker is gone (its cache with it); a new one replays both histories.
    async with running(dev_env, task_queue, ledger, models=models, agents=agents) as second:
        second.started.append(wf)
        await second.conversations.approve(
            child, "f1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        items = await second.wait_assistant_text(wf, "done (metered)")
        assert _output(items, "r1").content == "done (metered)"
    history = await dev_env.client.get_workflow_handle(wf).fetch_history()
    starts = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]
    assert len(starts) == 1
    assert not [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
