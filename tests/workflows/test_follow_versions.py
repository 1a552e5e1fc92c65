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
import uuid
from datetime import timedelta
from typing import Any

import pytest
from agent_support import AGENT, MODELS, turns
from follow_support import (
    CLI,
    broken_model,
    carried_input,
    carried_state,
    checked_runs,
    moved_to,
    signals_of,
    tagged_models,
    timers_of,
    version_worker,
    versions_of,
)
from temporalio.api.enums.v1 import EventType
from temporalio.common import WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import (
    VERSIONED_TEST_TIMEOUT,
    eventually,
    outputs_by_id,
    quiet,
    set_current_version,
)

from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.testing import ScriptedModel

# Each test sets the current version up to twice (workflow_helpers.set_current_version).
pytestmark = pytest.mark.timeout(VERSIONED_TEST_TIMEOUT)


async def test_retry_after_a_model_failure_runs_on_the_version_that_fixes_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    v1 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v1")
    v2 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-failed-{uuid.uuid4()}"
    broken = {**MODELS, "directed": ScriptedModel(broken_model)}

    async with version_worker(client, task_queue, v1, broken):
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
        async with version_worker(client, task_queue, v2, MODELS):
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
    await checked_runs(client, workflow_id, ["v1", "v2"])


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

    async with version_worker(client, task_queue, versions[0], MODELS):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def waiting() -> Any:
            return (await conversations.pending(workflow_id)).approvals

        await eventually(waiting, what="the approval on v1")
        await quiet(handle)  # committed: see the question's test below
        (approval,) = await waiting()
        async with version_worker(client, task_queue, versions[1], MODELS):
            await set_current_version(dev_env, deployment, "v2")

            await moved_to(client, workflow_id, "v2")
            async with version_worker(client, task_queue, versions[2], MODELS):
                await set_current_version(dev_env, deployment, "v3")
                await moved_to(client, workflow_id, "v3")
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
    runs = await checked_runs(client, workflow_id, ["v1", "v2", "v3"])
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
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-question-{uuid.uuid4()}"
    script = turns([("q1", "ask", {"question": "Refund order A-1?"})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1, approval_deadline=3600)

    async with version_worker(client, task_queue, v1, tagged_models("v1")):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def asked() -> Any:
            return (await conversations.pending(workflow_id)).interactions

        await eventually(asked, what="the question on v1")
        # Read once the task that asked is committed: a query can see the state
        # of a task that then timed out under load and ran again (a new
        # `workflow.now()`, so another requested_at and deadline).
        await quiet(handle)
        (question,) = await asked()
        async with version_worker(client, task_queue, v2, tagged_models("v2")):
            await set_current_version(dev_env, deployment, "v2")
            # No signal, no update: the version-check timer alone moves the wait.
            await moved_to(client, workflow_id, "v2")
            (still,) = (await conversations.pending(workflow_id)).interactions
            # The same requested_at, deadline, digest and schema (as dicts: a
            # failure names the field that differs).
            assert still.model_dump(mode="json") == question.model_dump(mode="json")
            await conversations.answer(
                workflow_id, "q1", "yes", arguments_hash=question.arguments_hash
            )
            result = await asyncio.wait_for(handle.result(), 30)
            history = await conversations.history(workflow_id)
            assert not (await conversations.pending(workflow_id)).rejected

    assert result.output == "v2: done (directed)"  # the turn after the answer ran on v2
    assert outputs_by_id(history)["q1"].content == "yes"
    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    assert signals_of(v1_run) == [] and signals_of(v2_run) == ["answer"]
    # The answer deadline's timer is cut into 1 s checks; v2 waits for the same deadline.
    v1_slices = [t for t in timers_of(v1_run) if t.summary.startswith("answer deadline")]
    v2_slices = [t for t in timers_of(v2_run) if t.summary.startswith("answer deadline")]
    assert {t.duration for t in v1_slices + v2_slices} == {timedelta(seconds=1)}
    end = v1_slices[0].set_at + timedelta(seconds=3600)
    (carried,) = carried_state(v1_run).turn.calls  # type: ignore[union-attr]
    assert carried.interaction is not None
    assert abs(carried.interaction.deadline - end) < timedelta(milliseconds=1)
    assert abs(end - question.deadline) < timedelta(milliseconds=1)


async def test_a_pause_moves_and_a_resume_afterwards_resumes_it_on_the_new_version(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-pause-{uuid.uuid4()}"
    script = turns([("p1", "pause", {"reason": "waiting for stock"})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=1)

    async with version_worker(client, task_queue, v1, tagged_models("v1")):
        await set_current_version(dev_env, deployment, "v1")
        handle = await conversations.start(
            workflow_id, agent=AGENT, message=script, options=options
        )

        async def paused() -> Any:
            return (await conversations.pending(workflow_id)).paused

        assert await eventually(paused, what="the pause on v1") == "waiting for stock"
        async with version_worker(client, task_queue, v2, tagged_models("v2")):
            await set_current_version(dev_env, deployment, "v2")
            await moved_to(client, workflow_id, "v2")
            assert (await conversations.status(workflow_id)).state == "paused"
            assert (await conversations.pending(workflow_id)).paused == "waiting for stock"
            await conversations.resume(workflow_id, "stock arrived", resumed_by="ana")
            result = await asyncio.wait_for(handle.result(), 30)
            history = await conversations.history(workflow_id)

    assert outputs_by_id(history)["p1"].content == "stock arrived"
    assert result.output == "v2: done (directed)"
    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    assert signals_of(v1_run) == [] and signals_of(v2_run) == ["resume"]


async def test_a_resume_in_the_task_that_notices_the_new_version_is_carried_to_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """No version-check timer: the `resume` signal is what wakes the v1 run, and in that
    same workflow task the run sees the new version, so it moves with the resume."""
    client = dev_env.client
    deployment, (v1, v2) = versions_of("v1", "v2")
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"follow-resume-{uuid.uuid4()}"
    script = turns([("p1", "pause", {"reason": "waiting for stock"})])
    options = ConversationOptions(idle_timeout=2, version_check_interval=None)

    async with (
        version_worker(client, task_queue, v1, tagged_models("v1")),
        version_worker(client, task_queue, v2, tagged_models("v2")),
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
    v1_run, v2_run = await checked_runs(client, workflow_id, ["v1", "v2"])
    assert timers_of(v1_run) == []  # nothing but the signal woke it
    assert signals_of(v1_run) == ["resume"] and signals_of(v2_run) == []
    # The v1 run did not apply the resume: it handed the waiting pause over with it.
    carried = carried_input(v1_run).state
    assert carried is not None and carried.turn is not None
    assert carried.turn.paused == "waiting for stock"
    assert carried.turn.resume is not None and carried.turn.resume.message == "stock arrived"
    assert [c.plan.call.call_id for c in carried.turn.calls] == ["p1"]
