"""Shared parts of the tests of waits that follow new worker versions (issue 22, item 3).

Workers pinned to a Worker Deployment version, the runs of a conversation with
their histories, the checks every such test makes (no failed workflow task,
each run replays), and readers of the timers, signals and carried state a run
recorded. Used by `test_follow_versions.py` and `test_follow_versions_timers.py`.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from agent_support import MODELS, TOOLKITS, directed
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.common import WorkerDeploymentVersion
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker
from workflow_helpers import eventually

from durable_tools._wire import CarriedState, ConversationInput
from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.worker.runner import deployment_config
from durable_tools.workflows.agent_workflow import AgentWorkflow

CLI = str(Path(sys.executable).parent / "durable-tools")


def broken_model(request: ModelRequest) -> AssistantMessage:
    """v1's model adapter: a bug that fails every turn (not retryable)."""
    raise ApplicationError("v1 bug: the adapter drops the tools", non_retryable=True)


def version_worker(
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


class Run(NamedTuple):
    build: str  # the build ids of its completed workflow tasks, comma-separated
    run_id: str
    events: list[Any]
    history: WorkflowHistory


async def runs_of(client: Client, workflow_id: str) -> list[Run]:
    """Every run of the conversation, first run first.

    Walked back from the current run through each run's `continued_execution_run_id`
    (history, not visibility: a run that just started is never missed).
    """
    runs: list[Run] = []
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
        runs.append(Run(",".join(sorted(builds)), run_id, events, history))
        if not started.continued_execution_run_id:
            return runs[::-1]
        run_id = started.continued_execution_run_id


def no_failed_tasks(runs: list[Run]) -> None:
    for run in runs:
        failed = [
            e for e in run.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert not failed, failed


async def replays(runs: list[Run]) -> None:
    """Each run's history replays on today's AgentWorkflow (the worker's sandbox)."""
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    for run in runs:
        result = await replayer.replay_workflow(run.history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (run.build, result.replay_failure)


async def checked_runs(client: Client, workflow_id: str, builds: list[str]) -> list[Run]:
    """The runs, on `builds` in order; no workflow task failed; every history replays."""
    runs = await runs_of(client, workflow_id)
    assert [run.build for run in runs] == builds
    no_failed_tasks(runs)
    await replays(runs)
    return runs


async def moved_to(client: Client, workflow_id: str, build: str) -> Run:
    """Wait until the conversation's current run has completed a workflow task on `build`."""

    async def probe() -> Run | None:
        current = (await runs_of(client, workflow_id))[-1]
        return current if current.build == build else None

    found = await eventually(probe, what=f"the conversation's run on {build}", timeout=30)
    assert found is not None  # eventually returns only a truthy answer
    return found


def versions_of(*builds: str) -> tuple[str, list[WorkerDeploymentVersion]]:
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    return deployment, [
        WorkerDeploymentVersion(deployment_name=deployment, build_id=b) for b in builds
    ]


def tagged_models(tag: str) -> dict[str, Any]:
    """The shared models, with `directed`'s text answers prefixed by `tag` (which worker)."""

    def answer(request: ModelRequest) -> AssistantMessage:
        message = directed(request)
        return (
            message.model_copy(update={"text": f"{tag}: {message.text}"})
            if message.text
            else message
        )

    return {**MODELS, "directed": ScriptedModel(answer)}


class Timer(NamedTuple):
    summary: str
    duration: timedelta
    set_at: datetime  # the workflow time of the task that started it (`workflow.now()`)
    fired_at: datetime | None


def timers_of(run: Run) -> list[Timer]:
    """The run's timers in order, with the workflow time each was started at."""
    by_id = {e.event_id: e for e in run.events}
    fired = {
        e.timer_fired_event_attributes.started_event_id: e.event_time.ToDatetime(UTC)
        for e in run.events
        if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
    }
    converter = pydantic_data_converter.payload_converter
    timers: list[Timer] = []
    for e in run.events:
        if e.event_type != EventType.EVENT_TYPE_TIMER_STARTED:
            continue
        attributes = e.timer_started_event_attributes
        timers.append(
            Timer(
                summary=converter.from_payload(e.user_metadata.summary, str),
                duration=attributes.start_to_fire_timeout.ToTimedelta(),
                set_at=task_time(by_id, attributes.workflow_task_completed_event_id),
                fired_at=fired.get(e.event_id),
            )
        )
    return timers


def carried_state(run: Run) -> CarriedState:
    """The state a run that continued as new carried to the next run."""
    state = carried_input(run).state
    assert state is not None
    return state


def timer_end(timer: Timer) -> datetime:
    return timer.set_at + timer.duration


def task_time(by_id: Mapping[int, Any], completed_event_id: int) -> datetime:
    """`workflow.now()` of the task that completed as event `completed_event_id`."""
    completed = by_id[completed_event_id].workflow_task_completed_event_attributes
    return by_id[completed.started_event_id].event_time.ToDatetime(UTC)


def signals_of(run: Run) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in run.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]


def carried_input(run: Run) -> ConversationInput:
    """What a run that continued as new handed to the next run."""
    last = run.events[-1]
    assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    payloads = last.workflow_execution_continued_as_new_event_attributes.input.payloads
    return pydantic_data_converter.payload_converter.from_payload(payloads[0], ConversationInput)
