"""`ToolThreads` and `ToolContext` cancellation, without a server.

* sync runs of `@tool` and `dynamic_tool` run in the current `ToolThreads`
  (its threads are named `durable-tools-tool…`), never more at once than
  its size; without one, in the event loop's default executor;
* the size follows `configure` unless one was given;
* `ctx.cancelled`, `ctx.raise_if_cancelled()` and `ctx.cancellation`.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from durable_tools import dynamic_tool, tool
from durable_tools.tool_threads import DEFAULT_TOOL_THREADS, ToolThreads, run_sync
from durable_tools.tools import DEFAULT_HEARTBEAT_TIMEOUT, ToolContext


def _context(call_id: str = "c1") -> ToolContext:
    return ToolContext(call_id=call_id, tool="t", idempotency_key=f"wf/{call_id}")


def _ignore(_: object) -> None:
    return None


async def test_sync_runs_use_the_current_pool_and_never_exceed_its_size() -> None:
    lock, running, peak, names = threading.Lock(), [0], [0], set[str]()

    @tool
    def hold(i: int) -> int:
        """Hold a thread 50 ms.

        Args:
            i: Echoed.
        """
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            names.add(threading.current_thread().name)
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    threads = ToolThreads(3)
    try:
        with threads.use():
            async with asyncio.timeout(30):
                results = await asyncio.gather(
                    *(hold.run(hold.decode({"i": i}), _ignore, _context()) for i in range(30))
                )
    finally:
        threads.shutdown()
    assert results == list(range(30))
    assert 2 <= peak[0] <= 3, peak
    assert names and all(n.startswith("durable-tools-tool") for n in names), names


async def test_without_a_pool_sync_runs_use_the_default_executor() -> None:
    seen: list[str] = []
    run = dynamic_tool("where", run=lambda _: seen.append(threading.current_thread().name)).run
    async with asyncio.timeout(10):
        await run({}, _ignore, _context())
        assert await run_sync(lambda: 42) == 42
    assert seen and not seen[0].startswith("durable-tools-tool"), seen
    assert seen[0] != threading.current_thread().name


def test_the_size_follows_the_worker_unless_given() -> None:
    assert ToolThreads().size == DEFAULT_TOOL_THREADS == 100
    configured = ToolThreads()
    configured.configure(7)
    assert configured.size == 7
    configured.configure(None)
    assert configured.size == 7
    given = ToolThreads(3)
    given.configure(7)
    assert given.size == 3
    with pytest.raises(ValueError, match="size >= 1"):
        ToolThreads(0)


def test_tool_context_tells_a_sync_run_it_was_cancelled() -> None:
    ctx = _context()
    assert not ctx.cancelled
    ctx.raise_if_cancelled()  # nothing yet
    assert ctx.cancellation.wait(0.01) is False
    threading.Timer(0.05, ctx.cancellation.set).start()
    assert ctx.cancellation.wait(10)  # ends early on cancellation
    assert ctx.cancelled
    with pytest.raises(asyncio.CancelledError, match="'c1' of 't' was cancelled"):
        ctx.raise_if_cancelled()
    assert _context("c2").cancelled is False  # each context has its own event


def test_local_tools_heartbeat_by_default() -> None:
    @tool
    def plain() -> str:
        """Plain."""
        return "ok"

    assert plain.heartbeat_timeout == DEFAULT_HEARTBEAT_TIMEOUT == 30
    assert dynamic_tool("d", run=lambda _: None).heartbeat_timeout == 30
    assert dynamic_tool("off", run=lambda _: None, heartbeat_timeout=None).heartbeat_timeout is None
