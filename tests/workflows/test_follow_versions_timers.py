"""Timers that follow new worker versions: a sleep, an idle deadline, a first approval
the client waits on, and what arrives before a moved run's first task (issue 22, item 3).

See `test_follow_versions.py` for why waits move; the parts both use are in
`follow_support.py`.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, timedelta
from typing import Any

import pytest
from agent_support import AGENT, MODELS, directed, turns
from follow_support import (
    carried_input,
    carried_state,
    checked_runs,
    moved_to,
    runs_of,
    signals_of,
    tagged_models,
    task_time,
    timer_end,
    timers_of,
    version_worker,
    versions_of,
)
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import VERSIONED_TEST_TIMEOUT, eventually, outputs_by_id, set_current_version

from durable_tools.approvals import Decision
from durable_tools.client import Conversations
from durable_tools.conversation import Answer, ConversationOptions, ConversationResult
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage
from durable_tools.workflows.agent_workflow import AgentWorkflow

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)


async def test_a_sleep_that_moves_ends_at_its_original_wake_time(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-sleep-{uuid.uuid4()}"
    seconds = 5
    script = turns([("s1", "sleep", {"seconds": seconds})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1)

    async with (
        version_worker(client, task_queue, v1, tagged_models("v1")),
        version_worker(client, task_queue, v2, tagged_models("v2")),
    ):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def sleeping() -> bool:
            return (await conversations.status(workflow_id)).state == "sleeping"

        await eventually(sleeping, what="the sleep on v1")
        await set_current_version(dev_env, deployment, "v2")
        result = await asyncio.wait_for(handle.result(), 30)
        history = await conversations.history(workflow_id)

    assert outputs_by_id(history)["s1"].content == f"slept {seconds} s"
    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    summary = f"sleep {seconds} s"
    # The sleep's timer is cut into 1 s checks (it follows versions).
    v1_slices = [t for t in timers_of(v1_run) if t.summary == summary]
    wake_at = v1_slices[0].set_at + timedelta(seconds=seconds)
    assert all(timer_end(t) < wake_at for t in v1_slices)  # it moved mid-sleep
    (carried,) = carried_state(v1_run).turn.calls  # type: ignore[union-attr]
    assert carried.wake_at is not None and abs(carried.wake_at - wake_at) < timedelta(
        milliseconds=1
    )
    # Not restarted: the v2 run sleeps what was left, to the same wake time.
    *_, rest = [t for t in timers_of(v2_run) if t.summary == summary]
    assert abs(timer_end(rest) - wake_at) < timedelta(milliseconds=1)
    assert rest.fired_at is not None and rest.fired_at >= wake_at
    # The next model turn: after the wake, and before a sleep restarted at the move would end.
    by_id = {e.event_id: e for e in v2_run.events}
    (next_turn,) = [
        task_time(
            by_id, e.activity_task_scheduled_event_attributes.workflow_task_completed_event_id
        )
        for e in v2_run.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "model.turn"
    ]
    moved_at = v2_run.events[0].event_time.ToDatetime(UTC)
    assert wake_at <= next_turn < moved_at + timedelta(seconds=seconds)


async def test_an_idle_conversation_moves_and_keeps_its_idle_deadline(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-idle-{uuid.uuid4()}"
    idle = 20
    options = ConversationOptions(idle_timeout=idle, version_check_interval=1)

    async with version_worker(client, task_queue, v1, tagged_models("v1")):
        await set_current_version(dev_env, deployment, "v1")
        await conversations.start(workflow_id, agent=AGENT, message="hello", options=options)
        first = await asyncio.wait_for(conversations.wait_turn(workflow_id), 30)
        assert (first.state, first.reply) == ("idle", "v1: echo: hello")
        async with version_worker(client, task_queue, v2, tagged_models("v2")):
            await set_current_version(dev_env, deployment, "v2")
            await moved_to(client, workflow_id, "v2")  # by the timer: nothing was sent
            await conversations.send(workflow_id, "again")
            second = await asyncio.wait_for(conversations.wait_turn(workflow_id, after_turns=1), 30)
            assert (second.state, second.reply) == ("idle", "v2: echo: again")
            await client.get_workflow_handle(workflow_id).terminate("test over")

    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    assert signals_of(v1_run) == [] and signals_of(v2_run) == ["send"]
    summary = "idle: waiting for the next user message"
    v1_slices = [t for t in timers_of(v1_run) if t.summary == summary]
    # The idle wait began after the reply to "hello" and ends `idle` s later.
    deadline = v1_slices[0].set_at + timedelta(seconds=idle)
    assert all(timer_end(t) < deadline for t in v1_slices)
    # The v2 run's first idle wait ends when the v1 run's would have (not `idle` from the move).
    carried = carried_input(v1_run).state
    assert carried is not None and carried.idle_until is not None
    assert abs(carried.idle_until - deadline) < timedelta(milliseconds=1)


async def test_start_and_wait_and_wait_turn_follow_a_first_approval_to_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """v2 becomes current while v1's model writes the first turn (a refund that needs
    approval): the run moves at that approval's wait in the task that registers it.
    `start_and_wait` returns the approval, a `wait_turn` for a later turn that waited
    in v1 is handed over to v2 (state `continued`, followed), and `wait_turn` asks v2."""
    client = dev_env.client
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-start-and-wait-{uuid.uuid4()}"
    script = turns([("c1", "refund", {"order": "A-1", "amount": 5})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=None)
    thinking, go_on = asyncio.Event(), asyncio.Event()

    async def gated(request: ModelRequest) -> AssistantMessage:
        thinking.set()
        await asyncio.wait_for(go_on.wait(), 30)
        return directed(request)

    async with (
        version_worker(client, task_queue, v1, {**MODELS, "directed": ScriptedModel(gated)}),
        version_worker(client, task_queue, v2, tagged_models("v2")),
    ):
        await set_current_version(dev_env, deployment, "v1")
        first = asyncio.create_task(
            conversations.start_and_wait(workflow_id, agent=AGENT, message=script, options=options)
        )
        await asyncio.wait_for(thinking.wait(), 30)
        later = asyncio.create_task(conversations.wait_turn(workflow_id, after_turns=1))

        async def both_accepted() -> bool:
            (run,) = await runs_of(client, workflow_id)
            accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            return sum(e.event_type == accepted for e in run.events) == 2

        await eventually(both_accepted, what="both await_turn updates waiting on v1")
        await set_current_version(dev_env, deployment, "v2")
        go_on.set()
        outcome = await asyncio.wait_for(first, 30)
        assert outcome.state == "waiting" and outcome.reply is None
        (approval,) = outcome.pending.approvals
        assert approval.call_id == "c1"
        v2_run = await moved_to(client, workflow_id, "v2")
        again = await asyncio.wait_for(conversations.wait_turn(workflow_id), 30)
        assert again.run_id == v2_run.run_id
        assert again.state == "waiting" and again.pending.approvals == [approval]
        assert not later.done()  # handed over to v2, where it waits for turn 2
        await conversations.approve(
            workflow_id, "c1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        reply = await asyncio.wait_for(later, 30)
        assert (reply.state, reply.reply, reply.run_id) == (
            "idle",
            "v2: done (directed)",
            v2_run.run_id,
        )
        handle = client.get_workflow_handle(workflow_id, result_type=ConversationResult)
        result = await asyncio.wait_for(handle.result(), 30)

    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    assert outcome.run_id in (v1_run.run_id, v2_run.run_id)
    assert signals_of(v1_run) == [] and signals_of(v2_run) == ["decide"]
    refunds = [
        e
        for e in v2_run.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.refund"
    ]
    assert len(refunds) == 1


async def test_what_arrives_before_the_moved_runs_first_task_reaches_its_waits(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """A decision, an answer and a resume sent after the v1 run moved but before the v2
    run's first workflow task (no v2 worker polls meanwhile) are handled in the same
    activation as the carried state: they apply to the carried waits."""
    client = dev_env.client
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-window-{uuid.uuid4()}"
    script = turns(
        [
            ("c1", "refund", {"order": "A-1", "amount": 5}),
            ("q1", "ask", {"question": "Refund order A-1?"}),
            ("p1", "pause", {"reason": "waiting for stock"}),
        ]
    )
    options = ConversationOptions(idle_timeout=2, version_check_interval=None)

    async with version_worker(client, task_queue, v1, tagged_models("v1")):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def waiting() -> Any:
            pending = await conversations.pending(workflow_id)
            return (
                pending if pending.approvals and pending.interactions and pending.paused else None
            )

        pending = await eventually(waiting, what="the three waits on v1")
        (approval,), (question,) = pending.approvals, pending.interactions
        async with version_worker(client, task_queue, v2, tagged_models("v2")):
            await set_current_version(dev_env, deployment, "v2")
        # v2 is current and none of its workers polls. A signal the conversation ignores
        # (`retry` outside `model_failed`) gives the v1 run a workflow task: it moves.
        await client.get_workflow_handle(workflow_id).signal("retry")

        async def moved() -> bool:
            return len(await runs_of(client, workflow_id)) == 2

        await eventually(moved, what="the v1 run continued as new")
        await conversations.approve(
            workflow_id, "c1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        await conversations.answer(workflow_id, "q1", "yes", arguments_hash=question.arguments_hash)
        await conversations.resume(workflow_id, "stock arrived", resumed_by="ana")
        async with version_worker(client, task_queue, v2, tagged_models("v2")):
            result = await asyncio.wait_for(handle.result(), 30)
            history = await conversations.history(workflow_id)
            assert not (await conversations.pending(workflow_id)).rejected

    outputs = outputs_by_id(history)
    assert outputs["c1"].content == "refunded 5 on A-1"
    assert outputs["q1"].content == "yes"
    assert outputs["p1"].content == "stock arrived"
    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    assert signals_of(v1_run) == ["retry"] and signals_of(v2_run) == ["decide", "answer", "resume"]
    # All three arrived before the v2 run's first workflow task.
    first_task = next(
        e.event_id
        for e in v2_run.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    )
    signaled = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    assert all(e.event_id < first_task for e in v2_run.events if e.event_type == signaled)
    # The `decide_now` / `answer_now` validators, which a first activation also runs
    # before the loop, read the same state: a run built from the carried input has it.
    restored = AgentWorkflow(carried_input(v1_run))
    decision = Decision(call_id="c1", approved=True, arguments_hash=approval.arguments_hash)
    answer = Answer(call_id="q1", value="yes", arguments_hash=question.arguments_hash)
    assert restored._decision_problem(decision) is None  # pyright: ignore[reportPrivateUsage]
    assert restored._answer_problem(answer) is None  # pyright: ignore[reportPrivateUsage]
    assert restored.pending().approvals == [approval]
    assert restored.pending().interactions == [question]
