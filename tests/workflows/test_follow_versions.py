"""Waiting conversations follow new worker versions (issue 22, item 3).

Runs are pinned to the version they started on (Worker Versioning). Before,
a run moved to the current version only when it continued as new after a
model turn, so a conversation waiting (after a model failure, for an
approval, in a pause) stayed on the version it started waiting on: the
deploy that fixed a model failure could never reach it, and `retry` ran the
broken code again. Now every durable wait notices a new target version (at
a signal, or at the `version_check_interval` timer) and continues as new
onto it, carrying what waits.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from agent_support import AGENT, MODELS, TOOLKITS, directed, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.common import WorkerDeploymentVersion
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from workflow_helpers import eventually, outputs_by_id, set_current_version

from durable_tools._wire import CarriedState, ConversationInput
from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.approvals import Decision
from durable_tools.client import Conversations
from durable_tools.conversation import Answer, ConversationOptions, ConversationResult
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow

CLI = str(Path(sys.executable).parent / "durable-tools")


def _broken(request: ModelRequest) -> AssistantMessage:
    """v1's model adapter: a bug that fails every turn (not retryable)."""
    raise ApplicationError("v1 bug: the adapter drops the tools", non_retryable=True)


def _worker(
    client: Client, task_queue: str, version: WorkerDeploymentVersion, models: Mapping[str, Any]
) -> Worker:
    acts = AgentActivities(TOOLKITS, dict(models))
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[acts.model_turn, acts.tool_call],
        workflow_runner=sandbox_runner(),
        deployment_config=deployment_config(version),
        max_cached_workflows=0,
    )


class _Run(NamedTuple):
    build: str  # the build ids of its completed workflow tasks, comma-separated
    run_id: str
    events: list[Any]
    history: WorkflowHistory


async def _runs(client: Client, workflow_id: str) -> list[_Run]:
    """Every run of the conversation, first run first.

    Walked back from the current run through each run's `continued_execution_run_id`
    (history, not visibility: a run that just started is never missed).
    """
    runs: list[_Run] = []
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = list(history.events)
        started = events[0].workflow_execution_started_event_attributes
        builds = {
            e.workflow_task_completed_event_attributes.deployment_version.build_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        }
        runs.append(_Run(",".join(sorted(builds)), run_id, events, history))
        if not started.continued_execution_run_id:
            return runs[::-1]
        run_id = started.continued_execution_run_id


def _no_failed_tasks(runs: list[_Run]) -> None:
    for run in runs:
        failed = [
            e for e in run.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert not failed, failed


async def _replays(runs: list[_Run]) -> None:
    """Each run's history replays on today's AgentWorkflow (the worker's sandbox)."""
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    for run in runs:
        result = await replayer.replay_workflow(run.history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (run.build, result.replay_failure)


async def _checked_runs(client: Client, workflow_id: str, builds: list[str]) -> list[_Run]:
    """The runs, on `builds` in order; no workflow task failed; every history replays."""
    runs = await _runs(client, workflow_id)
    assert [run.build for run in runs] == builds
    _no_failed_tasks(runs)
    await _replays(runs)
    return runs


async def _moved_to(client: Client, workflow_id: str, build: str) -> _Run:
    """Wait until the conversation's current run has completed a workflow task on `build`."""

    async def probe() -> _Run | None:
        current = (await _runs(client, workflow_id))[-1]
        return current if current.build == build else None

    return await eventually(probe, what=f"the conversation's run on {build}", timeout=30)


def _versions(*builds: str) -> tuple[str, list[WorkerDeploymentVersion]]:
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    return deployment, [
        WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in builds
    ]


def _tagged(tag: str) -> dict[str, Any]:
    """The shared models, with `directed`'s text answers prefixed by `tag` (which worker)."""

    def answer(request: ModelRequest) -> AssistantMessage:
        message = directed(request)
        return (
            message.model_copy(update={"text": f"{tag}: {message.text}"})
            if message.text
            else message
        )

    return {**MODELS, "directed": ScriptedModel(answer)}


class _Timer(NamedTuple):
    summary: str
    duration: timedelta
    set_at: datetime  # the workflow time of the task that started it (`workflow.now()`)
    fired_at: datetime | None


def _timers(run: _Run) -> list[_Timer]:
    """The run's timers in order, with the workflow time each was started at."""
    by_id = {e.event_id: e for e in run.events}
    fired = {
        e.timer_fired_event_attributes.started_event_id: e.event_time.ToDatetime(UTC)
        for e in run.events
        if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
    }
    converter = pydantic_data_converter.payload_converter
    timers: list[_Timer] = []
    for e in run.events:
        if e.event_type != EventType.EVENT_TYPE_TIMER_STARTED:
            continue
        attributes = e.timer_started_event_attributes
        timers.append(
            _Timer(
                summary=converter.from_payload(e.user_metadata.summary, str),
                duration=attributes.start_to_fire_timeout.ToTimedelta(),
                set_at=_task_time(by_id, attributes.workflow_task_completed_event_id),
                fired_at=fired.get(e.event_id),
            )
        )
    return timers


def _state(run: _Run) -> CarriedState:
    """The state a run that continued as new carried to the next run."""
    state = _carried(run).state
    assert state is not None
    return state


def _ends(timer: _Timer) -> datetime:
    return timer.set_at + timer.duration


def _task_time(by_id: Mapping[int, Any], completed_event_id: int) -> datetime:
    """`workflow.now()` of the task that completed as event `completed_event_id`."""
    completed = by_id[completed_event_id].workflow_task_completed_event_attributes
    return by_id[completed.started_event_id].event_time.ToDatetime(UTC)


def _signals(run: _Run) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in run.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]


def _carried(run: _Run) -> ConversationInput:
    """What a run that continued as new handed to the next run."""
    last = run.events[-1]
    assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    payloads = last.workflow_execution_continued_as_new_event_attributes.input.payloads
    return pydantic_data_converter.payload_converter.from_payload(payloads[0], ConversationInput)


async def test_retry_after_a_model_failure_runs_on_the_version_that_fixes_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v1")
    v2 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-failed-{uuid.uuid4()}"
    broken = {**MODELS, "directed": ScriptedModel(_broken)}

    async with _worker(client, task_queue, v1, broken):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id,
            agent=AGENT,
            message="hello",
            options=ConversationOptions(idle_timeout=2),
        )

        async def failed() -> Any:
            return (await conversations.pending(workflow_id)).model_failed

        failure = await eventually(failed, what="the model failure on v1")
        assert "v1 bug" in failure.message
        async with _worker(client, task_queue, v2, MODELS):
            await set_current_version(dev_env, deployment, "v2")
            process = await asyncio.create_subprocess_exec(
                CLI,
                *("retry", workflow_id),
                *("--address", client.service_client.config.target_host),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, (out, err)
            result = await asyncio.wait_for(handle.result(), 60)

    assert result.status == "idle_timeout"
    assert result.output == "echo: hello"  # v2's model answered the retried turn
    await _checked_runs(client, workflow_id, ["v1", "v2"])


async def test_an_approval_waits_across_two_version_changes_and_runs_on_the_last(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    versions = [
        WorkerDeploymentVersion(deployment_name=deployment, build_id=f"v{n}") for n in (1, 2, 3)
    ]
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-approval-{uuid.uuid4()}"
    script = turns([("c1", "refund", {"order": "A-1", "amount": 5})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1, approval_deadline=3600)

    async with _worker(client, task_queue, versions[0], MODELS):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def waiting() -> Any:
            return (await conversations.pending(workflow_id)).approvals

        (approval,) = await eventually(waiting, what="the approval on v1")
        async with _worker(client, task_queue, versions[1], MODELS):
            await set_current_version(dev_env, deployment, "v2")

            await _moved_to(client, workflow_id, "v2")
            async with _worker(client, task_queue, versions[2], MODELS):
                await set_current_version(dev_env, deployment, "v3")
                await _moved_to(client, workflow_id, "v3")
                (still,) = (await conversations.pending(workflow_id)).approvals
                # The same pending approval: same digest, same deadline.
                assert still.arguments_hash == approval.arguments_hash
                assert still.requested_at == approval.requested_at
                assert still.deadline == approval.deadline
                await conversations.approve(
                    workflow_id,
                    approval.call_id,
                    arguments_hash=approval.arguments_hash,
                    decided_by="ana",
                )
                result = await asyncio.wait_for(handle.result(), 60)
                history = await conversations.history(workflow_id)

    assert result.output == "done (directed)"
    assert outputs_by_id(history)["c1"].failure_kind is None
    runs = await _checked_runs(client, workflow_id, ["v1", "v2", "v3"])
    # The refund ran once, in the v3 run.
    scheduled = [
        [
            e
            for e in run.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.refund"
        ]
        for run in runs
    ]
    assert [len(s) for s in scheduled] == [0, 0, 1]


async def test_a_question_moves_by_the_timer_alone_and_its_answer_is_taken_on_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment, (v1, v2) = _versions("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-question-{uuid.uuid4()}"
    script = turns([("q1", "ask", {"question": "Refund order A-1?"})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1, approval_deadline=3600)

    async with _worker(client, task_queue, v1, _tagged("v1")):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def asked() -> Any:
            return (await conversations.pending(workflow_id)).interactions

        (question,) = await eventually(asked, what="the question on v1")
        async with _worker(client, task_queue, v2, _tagged("v2")):
            await set_current_version(dev_env, deployment, "v2")
            # No signal, no update: the version-check timer alone moves the wait.
            await _moved_to(client, workflow_id, "v2")
            (still,) = (await conversations.pending(workflow_id)).interactions
            assert still == question  # same requested_at, deadline, digest and schema
            await conversations.answer(
                workflow_id, "q1", "yes", arguments_hash=question.arguments_hash
            )
            result = await asyncio.wait_for(handle.result(), 30)
            history = await conversations.history(workflow_id)
            assert not (await conversations.pending(workflow_id)).rejected

    assert result.output == "v2: done (directed)"  # the turn after the answer ran on v2
    assert outputs_by_id(history)["q1"].content == "yes"
    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    assert _signals(v1_run) == [] and _signals(v2_run) == ["answer"]
    # The answer deadline's timer is cut into 1 s checks; v2 waits for the same deadline.
    v1_slices = [t for t in _timers(v1_run) if t.summary.startswith("answer deadline")]
    v2_slices = [t for t in _timers(v2_run) if t.summary.startswith("answer deadline")]
    assert {t.duration for t in v1_slices + v2_slices} == {timedelta(seconds=1)}
    end = v1_slices[0].set_at + timedelta(seconds=3600)
    (carried,) = _state(v1_run).turn.calls  # type: ignore[union-attr]
    assert carried.interaction is not None
    assert abs(carried.interaction.deadline - end) < timedelta(milliseconds=1)
    assert abs(end - question.deadline) < timedelta(milliseconds=1)


async def test_a_pause_moves_and_a_resume_afterwards_resumes_it_on_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment, (v1, v2) = _versions("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-pause-{uuid.uuid4()}"
    script = turns([("p1", "pause", {"reason": "waiting for stock"})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1)

    async with _worker(client, task_queue, v1, _tagged("v1")):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def paused() -> Any:
            return (await conversations.pending(workflow_id)).paused

        assert await eventually(paused, what="the pause on v1") == "waiting for stock"
        async with _worker(client, task_queue, v2, _tagged("v2")):
            await set_current_version(dev_env, deployment, "v2")
            await _moved_to(client, workflow_id, "v2")
            assert (await conversations.status(workflow_id)).state == "paused"
            assert (await conversations.pending(workflow_id)).paused == "waiting for stock"
            await conversations.resume(workflow_id, "stock arrived", resumed_by="ana")
            result = await asyncio.wait_for(handle.result(), 30)
            history = await conversations.history(workflow_id)

    assert outputs_by_id(history)["p1"].content == "stock arrived"
    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    assert _signals(v1_run) == [] and _signals(v2_run) == ["resume"]


async def test_a_resume_in_the_task_that_notices_the_new_version_is_carried_to_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """No version-check timer: the `resume` signal is what wakes the v1 run, and in that
    same workflow task the run sees the new version, so it moves with the resume."""
    client = dev_env.client
    deployment, (v1, v2) = _versions("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-resume-{uuid.uuid4()}"
    script = turns([("p1", "pause", {"reason": "waiting for stock"})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=None)

    async with (
        _worker(client, task_queue, v1, _tagged("v1")),
        _worker(client, task_queue, v2, _tagged("v2")),
    ):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def paused() -> Any:
            return (await conversations.pending(workflow_id)).paused

        await eventually(paused, what="the pause on v1")
        await set_current_version(dev_env, deployment, "v2")
        await conversations.resume(workflow_id, "stock arrived", resumed_by="ana")
        result = await asyncio.wait_for(handle.result(), 30)
        history = await conversations.history(workflow_id)

    assert outputs_by_id(history)["p1"].content == "stock arrived"
    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    assert _timers(v1_run) == []  # nothing but the signal woke it
    assert _signals(v1_run) == ["resume"] and _signals(v2_run) == []
    # The v1 run did not apply the resume: it handed the waiting pause over with it.
    carried = _carried(v1_run).state
    assert carried is not None and carried.turn is not None
    assert carried.turn.paused == "waiting for stock"
    assert carried.turn.resume is not None and carried.turn.resume.message == "stock arrived"
    assert [c.plan.call.call_id for c in carried.turn.calls] == ["p1"]


async def test_a_sleep_that_moves_ends_at_its_original_wake_time(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment, (v1, v2) = _versions("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-sleep-{uuid.uuid4()}"
    seconds = 5
    script = turns([("s1", "sleep", {"seconds": seconds})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1)

    async with (
        _worker(client, task_queue, v1, _tagged("v1")),
        _worker(client, task_queue, v2, _tagged("v2")),
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
    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    summary = f"sleep {seconds} s"
    # The sleep's timer is cut into 1 s checks (it follows versions).
    v1_slices = [t for t in _timers(v1_run) if t.summary == summary]
    wake_at = v1_slices[0].set_at + timedelta(seconds=seconds)
    assert all(_ends(t) < wake_at for t in v1_slices)  # it moved mid-sleep
    (carried,) = _state(v1_run).turn.calls  # type: ignore[union-attr]
    assert carried.wake_at is not None and abs(carried.wake_at - wake_at) < timedelta(
        milliseconds=1
    )
    # Not restarted: the v2 run sleeps what was left, to the same wake time.
    *_, rest = [t for t in _timers(v2_run) if t.summary == summary]
    assert abs(_ends(rest) - wake_at) < timedelta(milliseconds=1)
    assert rest.fired_at is not None and rest.fired_at >= wake_at
    # The next model turn: after the wake, and before a sleep restarted at the move would end.
    by_id = {e.event_id: e for e in v2_run.events}
    (next_turn,) = [
        _task_time(
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
    deployment, (v1, v2) = _versions("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-idle-{uuid.uuid4()}"
    idle = 20
    options = ConversationOptions(idle_timeout=idle, version_check_interval=1)

    async with _worker(client, task_queue, v1, _tagged("v1")):
        await set_current_version(dev_env, deployment, "v1")
        await conversations.start(workflow_id, agent=AGENT, message="hello", options=options)
        first = await asyncio.wait_for(conversations.wait_turn(workflow_id), 30)
        assert (first.state, first.reply) == ("idle", "v1: echo: hello")
        async with _worker(client, task_queue, v2, _tagged("v2")):
            await set_current_version(dev_env, deployment, "v2")
            await _moved_to(client, workflow_id, "v2")  # by the timer: nothing was sent
            await conversations.send(workflow_id, "again")
            second = await asyncio.wait_for(conversations.wait_turn(workflow_id, after_turns=1), 30)
            assert (second.state, second.reply) == ("idle", "v2: echo: again")
            await client.get_workflow_handle(workflow_id).terminate("test over")

    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    assert _signals(v1_run) == [] and _signals(v2_run) == ["send"]
    summary = "idle: waiting for the next user message"
    v1_slices = [t for t in _timers(v1_run) if t.summary == summary]
    # The idle wait began after the reply to "hello" and ends `idle` s later.
    deadline = v1_slices[0].set_at + timedelta(seconds=idle)
    assert all(_ends(t) < deadline for t in v1_slices)
    # The v2 run's first idle wait ends when the v1 run's would have (not `idle` from the move).
    carried = _carried(v1_run).state
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
    deployment, (v1, v2) = _versions("v1", "v2")
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
        _worker(client, task_queue, v1, {**MODELS, "directed": ScriptedModel(gated)}),
        _worker(client, task_queue, v2, _tagged("v2")),
    ):
        await set_current_version(dev_env, deployment, "v1")
        first = asyncio.create_task(
            conversations.start_and_wait(workflow_id, agent=AGENT, message=script, options=options)
        )
        await asyncio.wait_for(thinking.wait(), 30)
        later = asyncio.create_task(conversations.wait_turn(workflow_id, after_turns=1))

        async def both_accepted() -> bool:
            (run,) = await _runs(client, workflow_id)
            accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            return sum(e.event_type == accepted for e in run.events) == 2

        await eventually(both_accepted, what="both await_turn updates waiting on v1")
        await set_current_version(dev_env, deployment, "v2")
        go_on.set()
        outcome = await asyncio.wait_for(first, 30)
        assert outcome.state == "waiting" and outcome.reply is None
        (approval,) = outcome.pending.approvals
        assert approval.call_id == "c1"
        v2_run = await _moved_to(client, workflow_id, "v2")
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
    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    assert outcome.run_id in (v1_run.run_id, v2_run.run_id)
    assert _signals(v1_run) == [] and _signals(v2_run) == ["decide"]
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
    deployment, (v1, v2) = _versions("v1", "v2")
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

    async with _worker(client, task_queue, v1, _tagged("v1")):
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
        async with _worker(client, task_queue, v2, _tagged("v2")):
            await set_current_version(dev_env, deployment, "v2")
        # v2 is current and none of its workers polls. A signal the conversation ignores
        # (`retry` outside `model_failed`) gives the v1 run a workflow task: it moves.
        await client.get_workflow_handle(workflow_id).signal("retry")

        async def moved() -> bool:
            return len(await _runs(client, workflow_id)) == 2

        await eventually(moved, what="the v1 run continued as new")
        await conversations.approve(
            workflow_id, "c1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        await conversations.answer(workflow_id, "q1", "yes", arguments_hash=question.arguments_hash)
        await conversations.resume(workflow_id, "stock arrived", resumed_by="ana")
        async with _worker(client, task_queue, v2, _tagged("v2")):
            result = await asyncio.wait_for(handle.result(), 30)
            history = await conversations.history(workflow_id)
            assert not (await conversations.pending(workflow_id)).rejected

    outputs = outputs_by_id(history)
    assert outputs["c1"].content == "refunded 5 on A-1"
    assert outputs["q1"].content == "yes"
    assert outputs["p1"].content == "stock arrived"
    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await _checked_runs(client, workflow_id, ["v1", "v2"])
    assert _signals(v1_run) == ["retry"] and _signals(v2_run) == ["decide", "answer", "resume"]
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
    restored = AgentWorkflow(_carried(v1_run))
    decision = Decision(call_id="c1", approved=True, arguments_hash=approval.arguments_hash)
    answer = Answer(call_id="q1", value="yes", arguments_hash=question.arguments_hash)
    assert restored._decision_problem(decision) is None  # pyright: ignore[reportPrivateUsage]
    assert restored._answer_problem(answer) is None  # pyright: ignore[reportPrivateUsage]
    assert restored.pending().approvals == [approval]
    assert restored.pending().interactions == [question]
