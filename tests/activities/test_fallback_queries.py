"""The bound on the queries a process's activities send to their runs (`FallbackQueries`).

An activity queries its run only when its worker holds neither the run nor
what an earlier activity read (tests/activities/test_live_runs.py shows that
one worker never does). These pin the bound for the rest (another worker ran
the previous turn, the run was evicted): at most `limit` in flight, the rest
wait their turn, an optional one (`followed`) is skipped while all are taken,
and the open-call read goes through the bound.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from durable_tools.activities import tool_activity
from durable_tools.activities.activity_base import (
    FALLBACK_QUERIES,
    QUERIES_SENT,
    TOOL_CALL_QUERY,
    FallbackQueries,
)
from durable_tools.results import ToolCall


async def test_at_most_limit_queries_are_in_flight_and_the_rest_wait() -> None:
    bound = FallbackQueries(limit=3)
    in_flight = peak = 0
    release = asyncio.Event()
    sent = QUERIES_SENT["probe"]

    async def query() -> None:
        nonlocal in_flight, peak
        async with bound.slot("probe"):
            in_flight += 1
            peak = max(peak, in_flight)
            await release.wait()
            in_flight -= 1

    tasks = [asyncio.create_task(query()) for _ in range(10)]
    while in_flight < 3:  # the first three hold their slots
        await asyncio.sleep(0)
    for _ in range(20):  # the rest had every chance to start, and did not
        await asyncio.sleep(0)
    assert (in_flight, bound.waited) == (3, 7)
    assert bound.busy() and bound.skipped == 1
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 3 and in_flight == 0
    assert QUERIES_SENT["probe"] - sent == 10
    assert not bound.busy() and bound.skipped == 1


async def test_each_event_loop_has_its_own_slots() -> None:
    """A worker's loop and a test's loop never share a semaphore bound to the other."""
    bound = FallbackQueries(limit=1)
    async with bound.slot("probe"):
        assert bound.busy()

        def elsewhere() -> bool:
            async def probe() -> bool:
                async with bound.slot("probe"):
                    return True

            return asyncio.run(probe())

        assert await asyncio.to_thread(elsewhere)


class _Handle:
    def __init__(self) -> None:
        self.in_flight = self.peak = 0

    async def query(self, name: str, call_id: str, **_: Any) -> ToolCall:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return ToolCall(call_id=call_id, name="refund", arguments="{}")


class _Client:
    def __init__(self, handle: _Handle) -> None:
        self.handle = handle

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return self.handle


async def test_open_call_reads_share_the_process_bound() -> None:
    handle = _Handle()
    env = ActivityEnvironment(client=cast(Client, _Client(handle)))
    read = tool_activity._read_open_call  # pyright: ignore[reportPrivateUsage]
    calls = 3 * FALLBACK_QUERIES.limit
    sent = QUERIES_SENT[TOOL_CALL_QUERY]
    found = await asyncio.gather(*(env.run(read, "wf", f"c{k}") for k in range(calls)))
    assert [call.call_id for call in found if call] == [f"c{k}" for k in range(calls)]
    assert handle.peak == FALLBACK_QUERIES.limit
    assert QUERIES_SENT[TOOL_CALL_QUERY] - sent == calls
