"""MCP Tasks (the `io.modelcontextprotocol/tasks` extension) as durable polls, on the dev server.

The test server's `survey` (tests/mcp/task_extension.py, on the `mcp` SDK's
`Extension` API) runs only as a task: it works in four steps, with a
progress notification and a `statusMessage` on each poll, and asks whose
survey it is halfway. Through a conversation:

* the task runs longer than the tool activity's timeout, while the loop
  polls it with timers and short `tasks/get` activities; its question is a
  question of the call, answered through the client API and sent with
  `tasks/update`; the completed task's result is the call's one output; the
  task body runs once; progress reaches the event stream; the history
  replays in the strict sandbox;
* a cancelled conversation sends exactly one `tasks/cancel`; the call is
  `interrupted`;
* a task past its TTL ends the call `expired` (and is cancelled once);
* a new user message while the task asks ends the call `interrupted` and
  cancels the task once;
* hostile task answers (bogus ids, absurd poll intervals, unknown statuses)
  are `Failure`s the model reads, and no workflow task fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp_support import TASK_ACTIVITY_TIMEOUT as ACTIVITY_TIMEOUT
from mcp_support import task_test_server as server
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import ConversationOptions, PendingInteraction
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import StrictAgentWorkflow


def turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps({"turns": [[list(c) for c in calls]]})


def logged(log: Path, event: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event]


async def question(h: Harness, workflow_id: str, call_id: str) -> PendingInteraction:
    async def probe() -> PendingInteraction | None:
        pending = await h.conversations.pending(workflow_id)
        return next((i for i in pending.interactions if i.call_id == call_id), None)

    return await eventually(probe, what="the task's question", timeout=60)


async def failed_workflow_tasks(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The messages of the run's failed workflow tasks, but for the server's own retry.

    An event that arrives while a task completes the run (a poll's result as
    the cancelled conversation closes) makes Temporal refuse that completion
    (`UNHANDLED_COMMAND`) and hand the task out again with the event in it:
    the server's doing, not the workflow's (tests/workflows/test_schedules.py
    allows it for the same reason).
    """
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    failed: list[str] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            attributes = event.workflow_task_failed_event_attributes
            if attributes.cause != unhandled:
                failed.append(str(attributes.failure.message))
    return failed


async def test_a_task_longer_than_its_activity_with_progress_and_a_question(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    seconds = ACTIVITY_TIMEOUT + 2.0
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server(log)]) as h:
        workflow_id = await h.start(
            turns(("p", "notes__survey", {"topic": "tides", "seconds": seconds}))
        )
        asked = await question(h, workflow_id, "p")
        assert asked.input_request is not None
        assert asked.input_request.message == "Who is the survey for?"
        assert asked.answer_schema is not None and asked.answer_schema["required"] == ["name"]
        await h.conversations.answer(
            workflow_id, "p", {"name": "Ada"}, arguments_hash=asked.arguments_hash, wait=True
        )
        outputs = await h.wait_outputs(workflow_id, "p", timeout=90)
        events, _ = await h.conversations.retained_events(workflow_id)
        handle = h.client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        failed = await failed_workflow_tasks(handle)
    assert not outputs["p"].is_error, outputs["p"].content
    assert "survey of tides for Ada (accept)" in outputs["p"].content
    # The task's body ran once, with the call's idempotency key; one update, many polls.
    calls = logged(log, "call")
    assert [c["key"] for c in calls] == [f"{workflow_id}/p"]
    assert [u["keys"] for u in logged(log, "task_update")] == [[f"who-{calls[0]['task_id']}"]]
    assert len(logged(log, "task_get")) >= 4
    assert logged(log, "task_cancel") == []
    # Every activity of the call was short: none ran for the task's length.
    durations: list[float] = []
    scheduled: dict[int, Any] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            scheduled[event.event_id] = event.event_time.ToDatetime()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            started = event.activity_task_completed_event_attributes.started_event_id
            durations.append((event.event_time.ToDatetime() - scheduled[started]).total_seconds())
    assert durations and max(durations) < ACTIVITY_TIMEOUT
    progress = [e.text or "" for e in events if e.kind == "tool_progress" and e.call_id == "p"]
    assert any("runs as task" in t for t in progress)
    assert any("step" in t for t in progress), progress
    assert [e.outcome for e in events if e.kind == "question_answered"] == ["accept"]
    assert failed == []
    replayed = await Replayer(
        workflows=[StrictAgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(strict=True),
    ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_cancelling_the_conversation_sends_one_tasks_cancel(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server(log)]) as h:
        workflow_id = await h.start(turns(("p", "notes__survey", {"topic": "x", "seconds": 600})))

        async def polled() -> bool:
            return len(logged(log, "task_get")) >= 2

        await eventually(polled, what="two polls", timeout=60)
        await h.conversations.cancel(workflow_id, cancelled_by="ops")
        outputs = await h.wait_outputs(workflow_id, "p")
        failed = await failed_workflow_tasks(h.client.get_workflow_handle(workflow_id))
    assert outputs["p"].is_error and '"interrupted"' in outputs["p"].content
    task_id = logged(log, "task_created")[0]["task_id"]
    assert [c["task_id"] for c in logged(log, "task_cancel")] == [task_id]
    assert logged(log, "task_done") == []
    assert failed == []


async def test_a_task_past_its_ttl_ends_the_call_expired(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    args = {"topic": "x", "seconds": 600, "ttl_ms": 2500}
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server(log)]) as h:
        workflow_id = await h.start(turns(("p", "notes__survey", args)))
        outputs = await h.wait_outputs(workflow_id, "p", timeout=60)
    assert outputs["p"].is_error and '"expired"' in outputs["p"].content
    assert "time to live" in outputs["p"].content
    assert len(logged(log, "task_cancel")) == 1


async def test_a_new_message_while_the_task_asks_interrupts_the_call_and_cancels_the_task(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server(log)]) as h:
        workflow_id = await h.start(
            turns(("p", "notes__survey", {"topic": "x", "seconds": 4})),
            options=ConversationOptions(messages_supersede="anyone", search_attributes=True),
        )
        await question(h, workflow_id, "p")
        await h.conversations.send(workflow_id, "never mind", sent_by="dee")
        outputs = await h.wait_outputs(workflow_id, "p", timeout=60)
        events, _ = await h.conversations.retained_events(workflow_id)
    assert json.loads(outputs["p"].content)["error"] == "interrupted"
    finished = [e.outcome for e in events if e.kind == "tool_call_finished" and e.call_id == "p"]
    assert finished == ["interrupted"]
    assert len(logged(log, "task_cancel")) == 1
    assert logged(log, "task_update") == []


HOSTILE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # A task id that is no string, then one of a megabyte.
    "a": ({"taskId": 7, "status": "working"}, {}),
    "b": ({"taskId": "x" * 100_000, "status": "working"}, {}),
    # A poll about another task; an unknown status; a completed task without a result.
    "c": ({"taskId": "t-c", "status": "working"}, {"taskId": "t-other", "status": "working"}),
    "d": ({"taskId": "t-d", "status": "working", "pollIntervalMs": -5}, {"taskId": "t-d"}),
    "e": (
        {"taskId": "t-e", "status": "working", "pollIntervalMs": "soon"},
        {"taskId": "t-e", "status": "completed", "pollIntervalMs": 1e308},
    ),
    # Failed with an error, and lone surrogates in its message.
    "f": (
        {"taskId": "t-f", "status": "working", "pollIntervalMs": 0},
        {"taskId": "t-f", "status": "failed", "error": {"code": 1, "message": "no way"}},
    ),
}


async def test_hostile_task_answers_are_failures_the_model_reads(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    calls = [
        (key, "notes__raw_task", {"create": create, "get": get})
        for key, (create, get) in HOSTILE.items()
    ]
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server(log)]) as h:
        workflow_id = await h.start(turns(*calls))
        outputs = await h.wait_outputs(workflow_id, *HOSTILE, timeout=90)
        failed = await failed_workflow_tasks(h.client.get_workflow_handle(workflow_id))
    assert failed == []
    for key in HOSTILE:
        assert outputs[key].is_error, (key, outputs[key].content)
    assert "task id" in outputs["a"].content and "task id" in outputs["b"].content
    assert "another task" in outputs["c"].content
    assert "status" in outputs["d"].content
    assert "without a result" in outputs["e"].content
    assert "the task failed: no" in outputs["f"].content
