"""Durability of the agent loop against real servers.

* An approval that arrives days later (time-skipping server), with the worker
  replaced in between, runs the tool exactly once.
* An approval signalled while no worker runs is applied when a worker returns.
* A worker killed with SIGKILL in the middle of a tool activity: the attempt is
  retried on a second worker process with the same idempotency key, and every
  call keeps exactly one output.
* A worker killed with SIGKILL during a slow model request: the model activity's
  heartbeats stop, and a second worker runs the turn after the heartbeat
  timeout, long before the model timeout (300 s).
* A worker killed with SIGKILL in the middle of a local tool's call (a Temporal
  local activity, `local=True`): its workflow task times out, a second worker
  runs the call again with the same idempotency key, every call keeps exactly
  one output, and the history replays.

Tools record what they do to a JSON-lines ledger (`tests/agent_support.py`),
which is how runs are counted, across processes too.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_support import (
    AGENT,
    LEDGER_ENV,
    LOCAL_AGENT,
    MCP_LOG_ENV,
    MODELS,
    TOOLKITS,
    read_ledger,
    turns,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from durable_tools.client import Conversations
from durable_tools.conversation import (
    AgentConfig,
    ConversationResult,
    ModelRetry,
    PendingApproval,
    PendingState,
)
from durable_tools.live_runs import LIVE_RUNS
from durable_tools.transcript import (
    AssistantMessage,
    ToolCallOutput,
    TranscriptItem,
    is_reconciled,
)
from durable_tools.worker.plugin import DurableToolsPlugin, sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

WAIT = 30.0
"""Upper bound of every wait in these tests (seconds)."""

STICKY_TIMEOUT = 1.0
"""Sticky schedule-to-start timeout of worker subprocesses (seconds).

When a worker dies, the workflow's next task goes to the dead worker's sticky
queue first and reaches the task queue only after this timeout (SDK default
10 s, measured here as a 10 s WorkflowTaskTimedOut gap)."""

QUERY_TIMEOUT = timedelta(seconds=5)
"""Deadline of one try of a query (see `_pending`)."""

T = TypeVar("T")

REFUND_SCRIPT = turns(
    [("r1", "refund", {"order": "o-42", "amount": 500})],
    [("f1", "finish", {"output": "refund handled"})],
)


# ----------------------------------------------------------------- helpers


def _client(env: WorkflowEnvironment) -> Client:
    """A client of `env` with its own plugin (a worker built on it is a fresh one)."""
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    return Client(**{**env.client.config(), "plugins": [plugin]})


async def _eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = WAIT
) -> T:
    """Poll `probe` until it returns something other than None (bounded)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = await probe()
                if value is not None:
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


async def _pending(conv: Conversations, workflow_id: str) -> PendingState:
    """`Conversations.pending`, each try bounded by `QUERY_TIMEOUT`, retried up to `WAIT`.

    A query is a task for a worker. The SDK interrupts its long polls when a
    worker shuts down, and a task the server hands to such a poll in that
    moment can be lost. Once in ~350 runs the first query after worker A
    stopped hung for 30 s (probably that; not confirmed), so a try that times
    out is retried. A query that fails is not retried.
    """
    handle = conv.client.get_workflow_handle(workflow_id)

    async def probe() -> PendingState | None:
        try:
            return await handle.query(
                "pending", result_type=PendingState, rpc_timeout=QUERY_TIMEOUT
            )
        except RPCError as exc:
            # The test server answers DEADLINE_EXCEEDED; the SDK's own
            # deadline surfaces as CANCELLED ("Timeout expired").
            if exc.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise
            return None

    return await _eventually(probe, f"an answer to the `pending` query of {workflow_id}")


async def _pending_approval(conv: Conversations, workflow_id: str) -> PendingApproval:
    async def probe() -> PendingApproval | None:
        approvals = (await _pending(conv, workflow_id)).approvals
        return approvals[0] if approvals else None

    return await _eventually(probe, f"an approval pending in {workflow_id}")


async def _result(conv: Conversations, workflow_id: str) -> ConversationResult:
    async with asyncio.timeout(WAIT):
        return await conv.result(workflow_id)


async def _activity_starts(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str, int]]:
    """(activity type, worker identity, attempt) of every started activity."""
    scheduled: dict[int, str] = {}
    starts: list[tuple[str, str, int]] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            starts.append((scheduled[attrs.scheduled_event_id], attrs.identity, attrs.attempt))
    return starts


async def _event_types(handle: WorkflowHandle[Any, Any]) -> list[EventType.ValueType]:
    return [event.event_type async for event in handle.fetch_history_events()]


def _outputs_per_call(transcript: list[TranscriptItem]) -> dict[str, int]:
    """How many outputs each call of the transcript has (0 for none)."""
    counts = {
        call.call_id: 0
        for item in transcript
        if isinstance(item, AssistantMessage)
        for call in item.tool_calls
    }
    for item in transcript:
        if isinstance(item, ToolCallOutput):
            counts[item.call_id] = counts.get(item.call_id, 0) + 1
    return counts


def _output(transcript: list[TranscriptItem], call_id: str) -> ToolCallOutput:
    (found,) = [i for i in transcript if isinstance(i, ToolCallOutput) and i.call_id == call_id]
    return found


def _assert_reconciled(transcript: list[TranscriptItem]) -> None:
    assert is_reconciled(transcript), transcript
    counts = _outputs_per_call(transcript)
    assert counts and set(counts.values()) == {1}, counts


# ------------------------------------------------- approval 3 days later


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
    client_a = _client(time_env)
    conv = Conversations(client_a, task_queue=task_queue)
    async with Worker(client_a, task_queue=task_queue, identity="worker-a", max_cached_workflows=0):
        handle = await conv.start(workflow_id, agent=AGENT, message=REFUND_SCRIPT)
        approval = await _pending_approval(conv, workflow_id)
    assert approval.call_id == "r1"
    assert approval.deadline - approval.requested_at == timedelta(days=7)
    assert read_ledger(ledger) == []

    # Worker B: a new worker (new client, new plugin) on the same task queue.
    client_b = _client(time_env)
    conv = Conversations(client_b, task_queue=task_queue)
    async with Worker(client_b, task_queue=task_queue, identity="worker-b"):
        before = await time_env.get_current_time()
        async with asyncio.timeout(WAIT):
            await time_env.sleep(timedelta(days=3))
        assert await time_env.get_current_time() - before >= timedelta(days=3)
        # Still waiting: 3 days is inside the 7-day deadline.
        assert [a.call_id for a in (await _pending(conv, workflow_id)).approvals] == ["r1"]
        assert read_ledger(ledger) == []

        await conv.approve(
            workflow_id, "r1", arguments_hash=approval.arguments_hash, decided_by="ana"
        )
        result = await _result(conv, workflow_id)
        transcript = await conv.history(workflow_id)
        status = await conv.status(workflow_id)

    assert result.status == "finished"
    assert result.output == "refund handled"
    assert [e["key"] for e in read_ledger(ledger)] == [f"{workflow_id}/r1"]
    _assert_reconciled(transcript)
    refund = _output(transcript, "r1")
    assert not refund.is_error
    assert "refunded 500 on o-42" in refund.content
    assert status.reconciled and status.pending_approvals == 0

    # The tool ran on worker B, once, 3 days after the conversation started.
    tool_starts = [s for s in await _activity_starts(handle) if s[0] == "tool.refund"]
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

    client_a = _client(dev_env)
    conv = Conversations(client_a, task_queue=task_queue)
    worker_a = Worker(client_a, task_queue=task_queue, identity="worker-a")
    async with worker_a:
        handle = await conv.start(workflow_id, agent=AGENT, message=REFUND_SCRIPT)
        approval = await _pending_approval(conv, workflow_id)
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
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED in await _event_types(handle)
    assert read_ledger(ledger) == []

    client_b = _client(dev_env)
    conv = Conversations(client_b, task_queue=task_queue)
    async with Worker(client_b, task_queue=task_queue, identity="worker-b"):
        result = await _result(conv, workflow_id)
        transcript = await conv.history(workflow_id)
        rejected = (await _pending(conv, workflow_id)).rejected

    assert result.status == "finished"
    assert result.output == "refund handled"
    assert rejected == []
    assert [e["key"] for e in read_ledger(ledger)] == [f"{workflow_id}/r1"]
    _assert_reconciled(transcript)
    assert not _output(transcript, "r1").is_error
    tool_starts = [s for s in await _activity_starts(handle) if s[0] == "tool.refund"]
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
    client_a = _client(dev_env)
    conv = Conversations(client_a, task_queue=task_queue)
    async with Worker(client_a, task_queue=task_queue, identity="worker-a"):
        await conv.start(workflow_id, agent=AGENT, message=REFUND_SCRIPT)
        approval = await _pending_approval(conv, workflow_id)
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
    client_b = _client(dev_env)
    conv = Conversations(client_b, task_queue=task_queue)
    async with Worker(client_b, task_queue=task_queue, identity="worker-b"):
        result = await _result(conv, workflow_id)
        transcript = await conv.history(workflow_id)

    assert timed_out == ["r1", "r1"]
    assert result.status == "finished" and result.output == "refund handled"
    assert not _output(transcript, "r1").is_error
    assert [e["key"] for e in read_ledger(ledger)] == [f"{workflow_id}/r1"]


# ------------------------------------------------ SIGKILL mid-activity


class _WorkerProcess:
    """A worker subprocess (`python tests/agent_support.py ADDRESS NAMESPACE QUEUE`)."""

    def __init__(
        self,
        env: WorkflowEnvironment,
        task_queue: str,
        ledger: Path,
        log: Path,
        *,
        mcp_log: Path | None = None,
    ):
        self.log = log
        config = env.client.service_client.config
        environ = {
            **os.environ,
            **({MCP_LOG_ENV: str(mcp_log)} if mcp_log is not None else {}),
            LEDGER_ENV: str(ledger),
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(TESTS / "agent_support.py"),
                    config.target_host,
                    env.client.namespace,
                    task_queue,
                    str(STICKY_TIMEOUT),
                ],
                cwd=REPO,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def ready(self, timeout: float = WAIT) -> None:
        async def probe() -> bool | None:
            if "worker-ready" in self.output():
                return True
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited with {self.proc.returncode}:\n{self.output()}")
            return None

        await _eventually(probe, f"worker {self.pid} to be ready", timeout)

    def kill(self) -> None:
        """SIGKILL (if still running) and reap the process (bounded)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


async def test_worker_killed_mid_tool_retries_on_another_worker_with_the_same_key(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    workflow_id = f"sigkill-{uuid.uuid4()}"
    conv = Conversations(_client(dev_env), task_queue=task_queue)
    script = turns(
        [("s1", "slow_heartbeat", {"seconds": 3})],
        [("f1", "finish", {"output": "slow done"})],
    )
    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-1.log")
        workers.append(first)
        await first.ready()
        handle = await conv.start(workflow_id, agent=AGENT, message=script)

        async def attempt_started() -> bool | None:
            return any(e.get("attempt") == 1 for e in read_ledger(ledger)) or None

        await _eventually(attempt_started, "the first attempt of `slow_heartbeat`")
        first.kill()
        assert first.proc.returncode == -signal.SIGKILL

        second = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-2.log")
        workers.append(second)
        await second.ready()
        result = await _result(conv, workflow_id)
        transcript = await conv.history(workflow_id)
    finally:
        for worker in workers:
            worker.kill()

    assert result.status == "finished"
    assert result.output == "slow done"
    _assert_reconciled(transcript)
    slow = _output(transcript, "s1")
    assert not slow.is_error, slow
    assert "slept 3" in slow.content

    entries = read_ledger(ledger)
    starts = [e for e in entries if "attempt" in e]
    assert [(e["key"], e["attempt"], e["pid"]) for e in starts] == [
        (f"{workflow_id}/s1", 1, first.pid),
        (f"{workflow_id}/s1", 2, second.pid),
    ]
    assert [e["pid"] for e in entries if e.get("done")] == [second.pid]
    tool_starts = [s for s in await _activity_starts(handle) if s[0] == "tool.slow_heartbeat"]
    assert [attempt for _, _, attempt in tool_starts] == [2]  # the server records the last one


async def test_worker_killed_mid_local_tool_runs_it_again_on_another_worker(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """A local activity runs in its workflow task: the kill loses both.

    Nothing of the call is in history until its marker, so the workflow task
    times out (10 s, Temporal's default) and the next worker replays the
    turn and runs the call again, from its first attempt: at least once,
    which is why a local tool must be idempotent.
    """
    ledger = tmp_path / "ledger.jsonl"
    workflow_id = f"sigkill-local-{uuid.uuid4()}"
    conv = Conversations(_client(dev_env), task_queue=task_queue)
    script = turns(
        [("l1", "slow_local", {"seconds": 3}), ("l2", "lookup_local", {"city": "Oslo"})],
        [("f1", "finish", {"output": "local done"})],
    )
    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-1.log")
        workers.append(first)
        await first.ready()
        handle = await conv.start(workflow_id, agent=LOCAL_AGENT, message=script)

        async def call_started() -> bool | None:
            return any(e.get("tool") == "slow_local" for e in read_ledger(ledger)) or None

        await _eventually(call_started, "the local call of `slow_local`")
        first.kill()
        assert first.proc.returncode == -signal.SIGKILL

        second = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-2.log")
        workers.append(second)
        await second.ready()
        # The workflow task timeout (10 s) passes before the second worker
        # gets the turn, then the call itself (3 s).
        async with asyncio.timeout(WAIT + 10):
            result = await conv.result(workflow_id)
        transcript = await conv.history(workflow_id)
    finally:
        for worker in workers:
            worker.kill()

    assert result.status == "finished"
    assert result.output == "local done"
    _assert_reconciled(transcript)
    slow = _output(transcript, "l1")
    assert not slow.is_error and "slept 3" in slow.content, slow
    assert not _output(transcript, "l2").is_error

    entries = [e for e in read_ledger(ledger) if e.get("tool") == "slow_local"]
    starts = [(e["key"], e["pid"]) for e in entries if "attempt" in e]
    assert starts == [(f"{workflow_id}/l1", first.pid), (f"{workflow_id}/l1", second.pid)]
    assert [e["pid"] for e in entries if e.get("done")] == [second.pid]
    events = [event async for event in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT in [e.event_type for e in events]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == ["model.turn", "model.turn"]  # the tools ran as local activities
    markers = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert len(markers) == 2  # one per call: the lost run left nothing behind

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    replayed = await replayer.replay_workflow(
        await handle.fetch_history(), raise_on_replay_failure=False
    )
    assert replayed.replay_failure is None, repr(replayed.replay_failure)


async def test_worker_killed_mid_mcp_call_gives_interrupted_never_a_second_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """At-most-once: a non-idempotent MCP call whose worker dies is not sent again."""
    ledger, mcp_log = tmp_path / "ledger.jsonl", tmp_path / "mcp.jsonl"
    workflow_id = f"sigkill-mcp-{uuid.uuid4()}"
    conv = Conversations(_client(dev_env), task_queue=task_queue)
    script = turns(
        [("w1", "notes__slow_record", {"note": "once", "seconds": 600})],
        [("f1", "finish", {"output": "finished"})],
    )

    def calls() -> list[dict[str, Any]]:
        if not mcp_log.exists():
            return []
        events = [json.loads(line) for line in mcp_log.read_text().splitlines() if line]
        return [e for e in events if e["event"] == "call"]

    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(
            dev_env, task_queue, ledger, tmp_path / "worker-1.log", mcp_log=mcp_log
        )
        workers.append(first)
        await first.ready()
        await conv.start(workflow_id, agent=AGENT, message=script)

        async def call_reached_server() -> bool | None:
            return bool(calls()) or None

        await _eventually(call_reached_server, "the MCP call reaching the server")
        first.kill()
        second = _WorkerProcess(
            dev_env, task_queue, ledger, tmp_path / "worker-2.log", mcp_log=mcp_log
        )
        workers.append(second)
        await second.ready()
        result = await _result(conv, workflow_id)
        transcript = await conv.history(workflow_id)
    finally:
        for worker in workers:
            worker.kill()

    assert result.status == "finished"
    _assert_reconciled(transcript)
    lost = _output(transcript, "w1")
    assert lost.is_error and lost.failure_kind == "interrupted", lost
    assert "not idempotent" in lost.content
    assert [c["tool"] for c in calls()] == ["slow_record"]  # sent once, never again


async def test_worker_killed_mid_model_call_is_noticed_by_its_heartbeat(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    workflow_id = f"sigkill-model-{uuid.uuid4()}"
    conv = Conversations(_client(dev_env), task_queue=task_queue)
    # A 5 s heartbeat timeout keeps the test short; the default is 30 s.
    agent = AgentConfig(
        model="slow-model", toolkit="tests", model_retry=ModelRetry(heartbeat_timeout=5)
    )
    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-1.log")
        workers.append(first)
        await first.ready()
        handle = await conv.start(workflow_id, agent=agent, message="4")

        async def model_started() -> bool | None:
            return any(e.get("model") == "slow" for e in read_ledger(ledger)) or None

        await _eventually(model_started, "the first attempt of the model turn")
        killed_at = time.monotonic()
        first.kill()
        second = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-2.log")
        workers.append(second)
        await second.ready()

        async def answered() -> list[TranscriptItem] | None:
            items = await conv.history(workflow_id)
            texts = [i.text for i in items if isinstance(i, AssistantMessage)]
            return items if "slow answer after 4 s" in texts else None

        await _eventually(answered, "the model turn on the second worker", timeout=60)
        took = time.monotonic() - killed_at
    finally:
        for worker in workers:
            worker.kill()

    assert took < 60, took  # the model timeout is 300 s
    starts = [(e["pid"], e.get("done", False)) for e in read_ledger(ledger)]
    assert starts == [(first.pid, False), (second.pid, False), (second.pid, True)]
    model_starts = [s for s in await _activity_starts(handle) if s[0] == "model.turn"]
    assert [attempt for _, _, attempt in model_starts] == [2]
