"""Durability of the agent loop against real servers.

* An approval that arrives days later (time-skipping server), with the worker
  replaced in between, runs the tool exactly once.
* An approval signalled while no worker runs is applied when a worker returns.
* An approved call survives a timed-out read of its arguments.

Workers killed with SIGKILL are in `test_worker_kills.py`.

Tools record what they do to a JSON-lines ledger (`tests/agent_support.py`),
which is how runs are counted, across processes too.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_support import (
    AGENT,
    LEDGER_ENV,
    read_ledger,
)
from durability_support import (
    REFUND_SCRIPT,
    WAIT,
    activity_starts,
    assert_reconciled,
    event_types,
    output_of,
    pending_approval,
    pending_state,
    result_of,
    time_client,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.live_runs import LIVE_RUNS


async def test_approval_three_days_later_on_a_fresh_worker_runs_the_tool_once(
    time_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    workflow_id = f"late-approval-{uuid.uuid4()}"

    # Worker A: runs the first turn up to the pending approval, then stops.
    # `max_cached_workflows=0`: the test server would keep routing the
    # workflow's tasks to a stopped worker's sticky queue (see conftest).
    client_a = time_client(time_env)
    conv = Conversations(client_a, task_queue=task_queue)
    async with Worker(client_a, task_queue=task_queue, identity="worker-a", max_cached_workflows=0):
        handle = await conv.start(workflow_id, agent=AGENT, message=REFUND_SCRIPT)
        approval = await pending_approval(conv, workflow_id)
    assert approval.call_id == "r1"
    assert approval.deadline - approval.requested_at == timedelta(days=7)
    assert read_ledger(ledger) == []

    # Worker B: a new worker (new client, new plugin) on the same task queue.
    client_b = time_client(time_env)
    conv = Conversations(client_b, task_queue=task_queue)
    async with Worker(client_b, task_queue=task_queue, identity="worker-b"):
        before = await time_env.get_current_time()
        async with asyncio.timeout(WAIT):
            await time_env.sleep(timedelta(days=3))
        assert await time_env.get_current_time() - before >= timedelta(days=3)
        # Still waiting: 3 days is inside the 7-day deadline.
        assert [a.call_id for a in (await pending_state(conv, workflow_id)).approvals] == ["r1"]
        assert read_ledger(ledger) == []

        await conv.approve(
            workflow_id, "r1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        result = await result_of(conv, workflow_id)
        transcript = await conv.history(workflow_id)
        status = await conv.status(workflow_id)

    assert result.status == "finished"
    assert result.output == "refund handled"
    assert [e["key"] for e in read_ledger(ledger)] == [f"{workflow_id}/r1"]
    assert_reconciled(transcript)
    refund = output_of(transcript, "r1")
    assert not refund.is_error
    assert "refunded 500 on o-42" in refund.content
    assert status.reconciled and status.pending_approvals == 0

    # The tool ran on worker B, once, 3 days after the conversation started.
    tool_starts = [s for s in await activity_starts(handle) if s[0] == "tool.refund"]
    assert tool_starts == [("tool.refund", "worker-b", 1)]
    events = [event async for event in handle.fetch_history_events()]
    started_at = events[0].event_time.ToDatetime()
    (scheduled,) = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.refund"
    ]
    assert scheduled.event_time.ToDatetime() - started_at >= timedelta(days=3)


# ---------------------------------------------- approval with no worker


async def test_approval_signalled_while_no_worker_runs_is_applied_when_one_returns(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    workflow_id = f"offline-approval-{uuid.uuid4()}"

    client_a = time_client(dev_env)
    conv = Conversations(client_a, task_queue=task_queue)
    worker_a = Worker(client_a, task_queue=task_queue, identity="worker-a")
    async with worker_a:
        handle = await conv.start(workflow_id, agent=AGENT, message=REFUND_SCRIPT)
        approval = await pending_approval(conv, workflow_id)
    # `async with` awaited the shutdown; make sure nothing polls any more.
    assert not worker_a.is_running
    assert worker_a.is_shutdown
    # Worker A cached the workflow and dropped it at shutdown without an
    # eviction; collecting it closes its suspended coroutines (GeneratorExit),
    # which runs the workflow's `finally` blocks outside any workflow event
    # loop. They must not raise (an unraisable exception fails this test).
    del worker_a
    gc.collect()
    assert read_ledger(ledger) == []

    # No worker runs: the signal is stored by the server all the same.
    await conv.approve(
        workflow_id, approval.call_id, arguments_hash=approval.arguments_hash, decided_by="ana"
    )
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED in await event_types(handle)
    assert read_ledger(ledger) == []

    client_b = time_client(dev_env)
    conv = Conversations(client_b, task_queue=task_queue)
    async with Worker(client_b, task_queue=task_queue, identity="worker-b"):
        result = await result_of(conv, workflow_id)
        transcript = await conv.history(workflow_id)
        rejected = (await pending_state(conv, workflow_id)).rejected

    assert result.status == "finished"
    assert result.output == "refund handled"
    assert rejected == []
    assert [e["key"] for e in read_ledger(ledger)] == [f"{workflow_id}/r1"]
    assert_reconciled(transcript)
    assert not output_of(transcript, "r1").is_error
    tool_starts = [s for s in await activity_starts(handle) if s[0] == "tool.refund"]
    assert tool_starts == [("tool.refund", "worker-b", 1)]


async def test_an_approved_call_survives_a_timed_out_read_of_its_arguments(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that did not plan the call reads it with the `tool_call` query.

    That read runs before the tool: when it times out (a busy worker replaying
    a long history to answer it), the approved call, which runs at most once,
    must not end with a failure though the tool never started.
    """
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    workflow_id = f"query-timeout-{uuid.uuid4()}"
    client_a = time_client(dev_env)
    conv = Conversations(client_a, task_queue=task_queue)
    async with Worker(client_a, task_queue=task_queue, identity="worker-a"):
        await conv.start(workflow_id, agent=AGENT, message=REFUND_SCRIPT)
        approval = await pending_approval(conv, workflow_id)
    await conv.approve(
        workflow_id, approval.call_id, arguments_hash=approval.arguments_hash, decided_by="ana"
    )

    timed_out: list[str] = []
    query = WorkflowHandle.query

    async def flaky_query(
        self: WorkflowHandle[Any, Any], name: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if name == "tool_call" and len(timed_out) < 2:
            timed_out.append(str(args[0]))
            raise RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")
        return await query(self, name, *args, **kwargs)

    monkeypatch.setattr(WorkflowHandle, "query", flaky_query)
    # Worker B stands for another process: it cannot read worker A's run in
    # process (durable_tools.live_runs), so it queries.
    monkeypatch.setattr(LIVE_RUNS, "get", lambda *_: None)
    client_b = time_client(dev_env)
    conv = Conversations(client_b, task_queue=task_queue)
    async with Worker(client_b, task_queue=task_queue, identity="worker-b"):
        result = await result_of(conv, workflow_id)
        transcript = await conv.history(workflow_id)

    assert timed_out == ["r1", "r1"]
    assert result.status == "finished" and result.output == "refund handled"
    assert not output_of(transcript, "r1").is_error
    assert [e["key"] for e in read_ledger(ledger)] == [f"{workflow_id}/r1"]


# ------------------------------------------------ SIGKILL mid-activity
