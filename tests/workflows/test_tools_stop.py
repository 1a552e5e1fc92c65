"""Tools can be stopped: heartbeats by default, cancellation, timeouts, a bounded pool.

On the dev server, with tools defined here (they note what happens to them
in `JOURNAL`, in this process, where the worker runs):

* every local tool heartbeats by default: its activity is scheduled with a
  30 s heartbeat timeout though the tool sets none;
* a cancelled conversation's async tool gets `CancelledError` within its
  heartbeat timeout (Temporal delivers a cancellation in the answer to a
  heartbeat; the tool activity heartbeats every third of the timeout);
* a cancelled conversation's sync tool sees `ctx.cancelled` and returns;
* an attempt that outlives its timeout is cancelled before its retry starts;
* sync tools run in the worker's bounded pool: 100 calls at once on a pool
  of 4 never run more than 4 at a time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from agent_support import turns
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools import RetryPolicy, Toolkit, tool
from durable_tools.conversation import AgentConfig
from durable_tools.tools import DEFAULT_HEARTBEAT_TIMEOUT, ToolContext

HEARTBEAT = 3.0
"""The heartbeat timeout of the tools cancelled here, seconds (short, to keep the tests short)."""

ROUND_TRIP = 3.0
"""Slack for the cancel request to reach the server and the worker, seconds."""


class Journal:
    """What the tools noted: (call id, what, attempt, `time.monotonic()`), from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[tuple[str, str, int, float]] = []

    def note(self, ctx: ToolContext, what: str) -> None:
        with self._lock:
            self._rows.append((ctx.call_id, what, ctx.attempt, time.monotonic()))

    def rows(self, call_id: str) -> list[tuple[str, int, float]]:
        with self._lock:
            return [(what, attempt, at) for c, what, attempt, at in self._rows if c == call_id]

    def at(self, call_id: str, what: str, attempt: int = 1) -> float | None:
        return next(
            (t for w, a, t in self.rows(call_id) if (w, a) == (what, attempt)),
            None,
        )


JOURNAL = Journal()


@tool(heartbeat_timeout=HEARTBEAT, timeout=120, retry=1)
async def wait_async(seconds: float, ctx: ToolContext) -> str:
    """Sleep, noting a cancellation.

    Args:
        seconds: How long.
    """
    JOURNAL.note(ctx, "started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        JOURNAL.note(ctx, "cancelled")
        raise
    JOURNAL.note(ctx, "finished")
    return "waited"


@tool(heartbeat_timeout=HEARTBEAT, timeout=120, retry=1)
def wait_sync(seconds: float, ctx: ToolContext) -> str:
    """Wait in a thread, stopping when the call is cancelled.

    Args:
        seconds: How long.
    """
    JOURNAL.note(ctx, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled:
            JOURNAL.note(ctx, "saw cancellation")
            return "stopped"
        time.sleep(0.05)
    JOURNAL.note(ctx, "finished")
    return "waited"


@tool(timeout=2, retry=RetryPolicy(max_attempts=2, initial_interval=0.1, maximum_interval=0.1))
async def overrun(seconds: float, ctx: ToolContext) -> str:
    """Sleep past the 2 s timeout, noting a cancellation.

    Args:
        seconds: How long.
    """
    JOURNAL.note(ctx, "started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        JOURNAL.note(ctx, "cancelled")
        raise
    JOURNAL.note(ctx, "finished")
    return "waited"


class Gauge:
    """How many calls run at once, and the most that ever did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


GAUGE = Gauge()


@tool
def busy(i: int) -> int:
    """Hold a thread for 0.1 s.

    Args:
        i: Echoed.
    """
    GAUGE.enter()
    try:
        time.sleep(0.1)
    finally:
        GAUGE.leave()
    return i


@tool
async def quick() -> str:
    """Answer at once (its options are the defaults)."""
    return "ok"


KIT = Toolkit(wait_async, wait_sync, overrun, busy, quick, label="stops")
AGENT = AgentConfig(name="main", model="directed", toolkit="stops")


async def _cancel_when_started(h: Harness, call_id: str, tool_name: str) -> tuple[str, float]:
    workflow_id = await h.start(turns([(call_id, tool_name, {"seconds": 60})]), agent=AGENT)

    async def started() -> bool:
        return JOURNAL.at(call_id, "started") is not None

    await eventually(started, what=f"{tool_name} to start")
    await h.conversations.cancel(workflow_id)
    return workflow_id, time.monotonic()


async def test_every_local_tool_heartbeats_by_default(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"stops": KIT}) as h:
        workflow_id = await h.start(turns([("q1", "quick", {})]), agent=AGENT)
        await h.wait_outputs(workflow_id, "q1")
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    (scheduled,) = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.quick"
    ]
    assert scheduled.heartbeat_timeout.ToSeconds() == DEFAULT_HEARTBEAT_TIMEOUT == 30


async def test_a_cancelled_conversations_async_tool_stops_within_its_heartbeat_timeout(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"stops": KIT}) as h:
        _, cancelled_at = await _cancel_when_started(h, "a1", "wait_async")

        async def stopped() -> float | None:
            return JOURNAL.at("a1", "cancelled")

        stopped_at = await eventually(
            stopped, what="the tool's CancelledError", timeout=HEARTBEAT + ROUND_TRIP
        )
    assert stopped_at >= cancelled_at
    assert [what for what, _, _ in JOURNAL.rows("a1")] == ["started", "cancelled"]


async def test_a_cancelled_conversations_sync_tool_that_checks_ctx_cancelled_stops(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"stops": KIT}) as h:
        _, cancelled_at = await _cancel_when_started(h, "s1", "wait_sync")

        async def stopped() -> float | None:
            return JOURNAL.at("s1", "saw cancellation")

        stopped_at = await eventually(
            stopped, what="the sync tool to see ctx.cancelled", timeout=HEARTBEAT + ROUND_TRIP
        )
    assert stopped_at >= cancelled_at
    assert [what for what, _, _ in JOURNAL.rows("s1")] == ["started", "saw cancellation"]


async def test_an_attempt_past_its_timeout_is_cancelled_before_its_retry_starts(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"stops": KIT}) as h:
        workflow_id = await h.start(turns([("t1", "overrun", {"seconds": 30})]), agent=AGENT)
        outputs = await h.wait_outputs(workflow_id, "t1", timeout=40)
    # Temporal's record stays a timeout (the attempt did not report a failure of its own).
    assert outputs["t1"].failure_kind == "timed_out", outputs["t1"]
    first_cancelled = JOURNAL.at("t1", "cancelled", attempt=1)
    second_started = JOURNAL.at("t1", "started", attempt=2)
    assert first_cancelled is not None and second_started is not None, JOURNAL.rows("t1")
    assert first_cancelled < second_started, JOURNAL.rows("t1")
    assert "finished" not in [what for what, _, _ in JOURNAL.rows("t1")]


async def test_sync_tools_share_a_bounded_pool_under_100_concurrent_calls(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    calls = [(f"b{i}", "busy", {"i": i}) for i in range(100)]
    async with running(
        dev_env, task_queue, tmp_path / "ledger", toolkits={"stops": KIT}, tool_threads=4
    ) as h:
        assert h.plugin.agent_activities.tool_threads.size == 4
        workflow_id = await h.start(turns(calls), agent=AGENT)
        outputs = await h.wait_outputs(workflow_id, *(c for c, _, _ in calls), timeout=90)
    assert all(not o.is_error for o in outputs.values())
    assert sorted(int(o.content) for o in outputs.values()) == list(range(100))
    # 100 calls were in flight at once (one turn); at most 4 ran, and more than one did.
    assert 2 <= GAUGE.peak <= 4, GAUGE.peak
