"""Tools declared `local=True` run as Temporal local activities (issue 26, item 5).

Against a real Temporal dev server: a local tool's call is recorded as one
`MarkerRecorded` event (`core_local_activity`), never `ActivityTaskScheduled`,
and its conversation's history is shorter than the same conversation with an
ordinary tool; its retries and timeout apply as for an ordinary tool activity
and its failures read as the same `Failure`; it publishes no event by signal
(a signal to its own workflow would wait for the task the local activity runs
in); a call gated by an approval runs as a local activity once approved, on
the time-skipping server too (an approval two days later). Every
history replays (a local activity's failure replayed from its marker must give
the model the `Failure` it gave live). The worker-kill test is in
test_worker_kills.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_support import LEDGER_ENV, LOCAL_AGENT, turns
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from workflow_helpers import Harness, outputs_by_id, quiet, running

from durable_tools._wire import LOCAL_RESULT_BYTES
from durable_tools.transcript import TranscriptItem, is_reconciled
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow

DONE = "done (directed)"
"""The directed model's text once its script has run out."""


@pytest.fixture
async def harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(dev_env, task_queue, ledger) as h:
        yield h


async def _events(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


def _scheduled(events: list[HistoryEvent]) -> list[str]:
    """Activity types of the history's `ActivityTaskScheduled` events."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def _markers(events: list[HistoryEvent]) -> list[HistoryEvent]:
    """The history's local-activity markers (`core_local_activity`)."""
    return [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]


def _local_activities(events: list[HistoryEvent]) -> list[str]:
    """Activity types of the history's local-activity markers."""
    return [
        json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        for e in _markers(events)
    ]


async def _replays(handle: WorkflowHandle[Any, Any]) -> None:
    """The run's history replays against today's workflow, in the worker's sandbox."""
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    result = await replayer.replay_workflow(
        await handle.fetch_history(), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, repr(result.replay_failure)


async def _run(harness: Harness, script: str) -> tuple[str, list[TranscriptItem]]:
    workflow_id = await harness.start(script, agent=LOCAL_AGENT)
    items = await harness.wait_assistant_text(workflow_id, DONE)
    assert is_reconciled(items), items
    return workflow_id, items


async def test_a_local_tool_call_is_one_marker_not_an_activity(harness: Harness) -> None:
    local_id, local_items = await _run(harness, turns([("l1", "lookup_local", {"city": "Oslo"})]))
    plain_id, _ = await _run(harness, turns([("w1", "get_weather", {"city": "Oslo"})]))

    output = outputs_by_id(local_items)["l1"]
    assert not output.is_error and json.loads(output.content) == {"city": "Oslo", "temp_c": 19}
    assert [(r["key"], r["attempt"]) for r in harness.ledger_rows("lookup_local")] == [
        (f"{local_id}/l1", 1)
    ]
    local = await _events(harness.handles[local_id])
    plain = await _events(harness.handles[plain_id])
    assert _scheduled(local) == ["model.turn", "model.turn"]
    assert _local_activities(local) == ["tool.lookup_local"]
    assert _scheduled(plain) == ["model.turn", "tool.get_weather", "model.turn"]
    assert _local_activities(plain) == []
    # The activity's 3 events (scheduled, started, completed) against one
    # marker. Workflow task events are left out of the count: under load a
    # slow workflow task heartbeats or two complete together, which moves
    # them either way (a fresh-clone run once saw 26 against 24).
    tasks = {
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    }
    kept = [len([e for e in h if e.event_type not in tasks]) for h in (plain, local)]
    assert kept[0] - kept[1] == 2, kept
    (marker,) = _markers(local)
    summary = pydantic_data_converter.payload_converter.from_payload(marker.user_metadata.summary)
    assert summary == "lookup_local(city='Oslo')"
    await _replays(harness.handles[local_id])


async def test_retries_and_timeouts_apply_and_fail_as_for_an_activity(harness: Harness) -> None:
    script = turns(
        [
            ("t1", "twice_failing_local", {}),
            ("f1", "failing_local", {}),
            ("s1", "stuck_local", {"seconds": 30}),
            ("s2", "stuck_remote", {"seconds": 30}),  # an ordinary activity, 1 s too
            ("b1", "big_local", {"n_bytes": LOCAL_RESULT_BYTES}),
        ]
    )
    workflow_id, items = await _run(harness, script)
    outputs = outputs_by_id(items)

    # retry=3: two failed attempts, then the answer, in one local activity.
    assert not outputs["t1"].is_error and outputs["t1"].content == "ok on attempt 3"
    assert [r["attempt"] for r in harness.ledger_rows("twice_failing_local")] == [1, 2, 3]
    # Retries spent: the error type and the attempts, as for an activity.
    assert outputs["f1"].failure_kind == "execution_error"
    assert "LookupError: no such record after 2 attempts" in outputs["f1"].content
    # A timeout reads as the timeout of an ordinary activity does.
    assert outputs["s1"].failure_kind == outputs["s2"].failure_kind == "timed_out"
    assert outputs["s1"].content == outputs["s2"].content.replace("stuck_remote", "stuck_local")
    assert "did not finish within 1 s" in outputs["s1"].content
    # Local results are bounded by LOCAL_RESULT_BYTES (the string's quotes pass it).
    assert outputs["b1"].failure_kind == "output_too_large"
    assert f"over the limit of {LOCAL_RESULT_BYTES} bytes" in outputs["b1"].content

    events = await _events(harness.handles[workflow_id])
    assert sorted(_local_activities(events)) == [
        "tool.big_local",
        "tool.failing_local",
        "tool.stuck_local",
        "tool.twice_failing_local",
    ]
    assert [t for t in _scheduled(events) if t.startswith("tool.")] == ["tool.stuck_remote"]
    await _replays(harness.handles[workflow_id])


async def test_a_local_tool_publishes_no_events_and_does_not_heartbeat(harness: Harness) -> None:
    """Past `STARTED_DELAY` (1 s) an activity publishes its start and progress by signal;
    a local one must not: the signal would wait for the task it runs in."""
    workflow_id, items = await _run(harness, turns([("p1", "slow_local", {"seconds": 2})]))
    assert outputs_by_id(items)["p1"].content == "slept 2.0"
    events = await _events(harness.handles[workflow_id])
    assert _local_activities(events) == ["tool.slow_local"]
    signalled = [
        e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert signalled == []
    assert [r["attempt"] for r in harness.ledger_rows("slow_local") if "attempt" in r] == [1]
    await _replays(harness.handles[workflow_id])


async def test_an_approved_local_call_runs_as_a_local_activity_once(harness: Harness) -> None:
    workflow_id = await harness.start(
        turns([("a1", "approved_local", {"order": "o-7"})]), agent=LOCAL_AGENT
    )
    approval = await harness.wait_approval(workflow_id, "a1")
    assert harness.ledger_rows("approved_local") == []
    await harness.conversations.approve(
        workflow_id, "a1", arguments_hash=approval.arguments_hash, decided_by="ana"
    )
    items = await harness.wait_assistant_text(workflow_id, DONE)
    assert is_reconciled(items)
    assert outputs_by_id(items)["a1"].content == "order o-7 read"
    assert [r["key"] for r in harness.ledger_rows("approved_local")] == [f"{workflow_id}/a1"]
    events = await _events(harness.handles[workflow_id])
    assert _local_activities(events) == ["tool.approved_local"]
    assert [t for t in _scheduled(events) if t.startswith("tool.")] == []
    await _replays(harness.handles[workflow_id])


async def test_local_tools_run_on_the_time_skipping_server_too(
    time_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where `AgentTestEnvironment` users test their agents; an approval days later."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(time_env, task_queue, ledger) as harness:
        script = turns(
            [("a1", "approved_local", {"order": "o-9"}), ("t1", "twice_failing_local", {})]
        )
        workflow_id = await harness.start(script, agent=LOCAL_AGENT)
        approval = await harness.wait_approval(workflow_id, "a1")
        # The skip starts and ends with the run settled (t1's local activity
        # done, no workflow task with the worker): the time-skipping server
        # refuses a completion that cancels a timer which fired during the
        # task ("invalid history builder state for action",
        # temporalio/sdk-java#3088) and never sends the task again. A CI run
        # skipped while t1 was retrying and the run stalled.
        await harness.wait_outputs(workflow_id, "t1")
        await quiet(harness.handles[workflow_id])
        await time_env.sleep(timedelta(days=2))
        await quiet(harness.handles[workflow_id])
        await harness.conversations.approve(
            workflow_id, "a1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        items = await harness.wait_assistant_text(workflow_id, DONE)
        events = await _events(harness.handles[workflow_id])
    outputs = outputs_by_id(items)
    assert outputs["a1"].content == "order o-9 read"
    assert outputs["t1"].content == "ok on attempt 3"
    assert sorted(_local_activities(events)) == ["tool.approved_local", "tool.twice_failing_local"]
    await _replays(harness.handles[workflow_id])
