"""What `scale.py` reads from finished histories: tool calls answered once, bytes, replay.

Ours and bare record the same two kinds of activity, so one reading serves
both: each `model.turn` result names the turn's tool calls (bare's is an
`AssistantMessage`, ours a `ModelTurn` holding one as `message`), and each
`tool.echo` input names its call (bare's a `ToolCall`, ours a
`ToolActivityInput` holding a `reference` or a `call`). A call is answered by
the terminal event (completed, failed, timed out, cancelled) of a `tool.echo`
activity scheduled for it: exactly one per call, or the call was lost (none)
or duplicated (more).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_tools.worker.plugin import sandbox_runner

E = EventType
_TERMINAL = {
    E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    E.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    E.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}
_CLOSED = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed out",
    E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
}


@dataclass
class Checked:
    """The histories of one phase's conversations, read."""

    conversations: int = 0
    closed: Counter[str] = field(default_factory=Counter[str])  # by how, "running" if open
    calls: int = 0  # tool calls the model made
    answered: int = 0  # of them, answered exactly once
    lost: int = 0  # in a closed conversation, never answered
    unanswered_open: int = 0  # in a conversation still running (not lost yet)
    duplicated: int = 0  # answered more than once
    unknown: int = 0  # tool activities for a call no model turn made
    tool_timeouts: int = 0  # tool activities that ended timed out (final)
    model_timeouts: int = 0
    bytes: int = 0  # all events, completed conversations only
    events: int = 0
    completed_turns: int = 0  # tool turns of completed conversations
    sample: list[WorkflowHistory] = field(default_factory=list[WorkflowHistory])
    # Where the time goes, from event timestamps: total seconds and count per stage,
    # e.g. "workflow task wait" (scheduled to started), "model.turn run" (started to closed).
    stages: dict[str, list[float]] = field(default_factory=dict[str, list[float]])

    def add_stage(self, stage: str, seconds: float) -> None:
        """Count `seconds` (clamped at 0) toward `stage`."""
        total = self.stages.setdefault(stage, [0.0, 0.0])
        total[0] += max(seconds, 0.0)
        total[1] += 1

    def stage_ms(self) -> dict[str, float]:
        """Each stage's mean duration in milliseconds."""
        return {k: 1000 * t / n for k, (t, n) in self.stages.items() if n}


def _json(payloads: Any) -> Any:
    items = list(payloads.payloads)
    return json.loads(items[0].data) if items else None


def _call_ids(result: Any) -> list[str]:
    message: Any = result.get("message", result) if isinstance(result, dict) else {}
    calls: list[Any] = message.get("tool_calls") or []
    # `finish` is a signal tool: the loop answers it, no activity runs.
    return [str(c["call_id"]) for c in calls if c.get("name") != "finish"]


def _call_id(request: Any) -> str | None:
    if not isinstance(request, dict):
        return None
    found: Any = request
    if "call_id" not in found:
        found = found.get("reference") or found.get("call") or {}
    call_id: Any = found.get("call_id")
    return None if call_id is None else str(call_id)


def _seconds(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


def _time_stages(events: Sequence[HistoryEvent], checked: Checked) -> None:
    """Add one run's stage durations: each task's wait to start and its run.

    A workflow task waits from scheduled to started and runs from started to
    completed; an activity likewise, per activity type (its started event
    carries the time the worker took it, even when written at completion).
    """
    at: dict[int, float] = {}
    names: dict[int, str] = {}
    started_of: dict[int, int] = {}  # activity scheduled id -> its started event id
    for event in events:
        kind, now = event.event_type, _seconds(event)
        at[event.event_id] = now
        if kind == E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            scheduled = event.workflow_task_started_event_attributes.scheduled_event_id
            if scheduled in at:
                checked.add_stage("workflow task wait", now - at[scheduled])
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            started = event.workflow_task_completed_event_attributes.started_event_id
            if started in at:
                checked.add_stage("workflow task run", now - at[started])
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            names[event.event_id] = attrs.activity_type.name
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            scheduled = event.activity_task_started_event_attributes.scheduled_event_id
            started_of[scheduled] = event.event_id
            if scheduled in at:
                name = names.get(scheduled, "?")
                checked.add_stage(f"{name} wait", now - at[scheduled])
        elif kind in _TERMINAL:
            attrs = getattr(event, _TERMINAL[kind])
            started = started_of.get(attrs.scheduled_event_id)
            if started is not None:
                name = names.get(attrs.scheduled_event_id, "?")
                checked.add_stage(f"{name} run", now - at[started])


def check_runs(runs: Sequence[Sequence[HistoryEvent]], checked: Checked, turns: int) -> None:
    """Add one conversation (all its runs, in order) to `checked`."""
    made: list[str] = []
    answers: Counter[str] = Counter()
    how = "running"
    size = count = 0
    for events in runs:
        _time_stages(events, checked)
        scheduled: dict[int, tuple[str, str | None]] = {}
        for event in events:
            size += event.ByteSize()
            count += 1
            kind = event.event_type
            if kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                name = attrs.activity_type.name
                call = _call_id(_json(attrs.input)) if name.startswith("tool.") else None
                scheduled[event.event_id] = (name, call)
            elif kind in _TERMINAL:
                attrs = getattr(event, _TERMINAL[kind])
                name, call = scheduled.get(attrs.scheduled_event_id, ("?", None))
                if name == "model.turn":
                    if kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                        made += _call_ids(_json(attrs.result))
                    checked.model_timeouts += kind == E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
                elif call is not None:
                    answers[call] += 1
                    checked.tool_timeouts += kind == E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
            elif kind in _CLOSED:
                how = _CLOSED[kind]
    checked.conversations += 1
    checked.closed[how] += 1
    checked.calls += len(made)
    for call in made:
        n = answers.pop(call, 0)
        if n == 1:
            checked.answered += 1
        elif n > 1:
            checked.duplicated += 1
        elif how == "running":
            checked.unanswered_open += 1
        else:
            checked.lost += 1
    checked.unknown += sum(answers.values())
    if how == "completed":
        checked.bytes += size
        checked.events += count
        checked.completed_turns += turns


async def _runs(client: Client, workflow_id: str, run_id: str | None) -> list[WorkflowHistory]:
    runs: list[WorkflowHistory] = []
    next_run = run_id
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=next_run).fetch_history()
        runs.append(history)
        last = history.events[-1]
        if last.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return runs
        next_run = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def check_histories(
    client: Client,
    first_runs: dict[str, str | None],
    turns: int,
    *,
    sample: int,
    concurrency: int = 16,
) -> Checked:
    """Read every conversation's histories (`first_runs`: workflow id to its first run id).

    Keeps the runs of the first `sample` completed conversations for `replay_rate`.
    """
    checked = Checked()
    gate = asyncio.Semaphore(concurrency)

    async def one(workflow_id: str, run_id: str | None) -> None:
        async with gate:
            runs = await _runs(client, workflow_id, run_id)
        before = checked.closed["completed"]
        check_runs([r.events for r in runs], checked, turns)
        if checked.closed["completed"] > before and len(checked.sample) < sample:
            checked.sample += runs

    await asyncio.gather(*(one(w, r) for w, r in first_runs.items()))
    return checked


async def replay_rate(histories: Sequence[WorkflowHistory], workflows: Sequence[type]) -> float:
    """Events replayed per CPU second of this process (after one history to warm up).

    Raises:
        RuntimeError: A history did not replay.
    """
    replayer = Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    await replayer.replay_workflow(histories[0])  # the sandbox's first imports
    events = sum(len(h.events) for h in histories)
    cpu = time.process_time()

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories:
            yield history

    results = await replayer.replay_workflows(each(), raise_on_replay_failure=False)
    cpu = time.process_time() - cpu
    if results.replay_failures:
        first = next(iter(results.replay_failures.items()))
        raise RuntimeError(f"{len(results.replay_failures)} histories did not replay: {first}")
    return events / cpu
