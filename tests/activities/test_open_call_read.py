"""The tool activity's read of an unplanned call (`tool_call` query): which errors it retries.

The dev-server test (tests/workflows/test_durability.py) shows an approved call
surviving timed-out reads; these pin the bounds: a transient status is tried
`_QUERY_TRIES` times, any other status fails at once.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from durable_tools.activities import tool_activity as agent_activities
from durable_tools.activities.activity_base import QUERIES_SENT, TOOL_CALL_QUERY
from durable_tools.results import ToolCall


class _Handle:
    def __init__(self, errors: list[RPCStatusCode]) -> None:
        self.errors = errors
        self.queries = 0

    async def query(self, name: str, call_id: str, **_: Any) -> ToolCall:
        self.queries += 1
        if self.errors:
            raise RPCError("no answer", self.errors.pop(0), b"")
        return ToolCall(call_id=call_id, name="refund", arguments="{}")


class _Client:
    def __init__(self, handle: _Handle) -> None:
        self.handle = handle

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return self.handle


async def _read(handle: _Handle) -> ToolCall | None:
    env = ActivityEnvironment(client=cast(Client, _Client(handle)))
    return await env.run(agent_activities._read_open_call, "wf", "r1")  # pyright: ignore[reportPrivateUsage]


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(agent_activities.asyncio, "sleep", sleep)
    return waits


async def test_transient_statuses_are_tried_again_with_a_doubling_wait(
    _no_waiting: list[float],
) -> None:
    transient = [
        RPCStatusCode.CANCELLED,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
    ]
    handle = _Handle(transient)
    sent = QUERIES_SENT[TOOL_CALL_QUERY]
    found = await _read(handle)
    assert found is not None and found.call_id == "r1"
    assert handle.queries == 4
    # The process-wide count a benchmark reads counts every try.
    assert QUERIES_SENT[TOOL_CALL_QUERY] - sent == 4
    assert _no_waiting == [0.2, 0.4, 0.8]


async def test_a_transient_status_gives_up_after_the_last_try() -> None:
    tries = agent_activities._QUERY_TRIES  # pyright: ignore[reportPrivateUsage]
    handle = _Handle([RPCStatusCode.CANCELLED] * (tries + 3))
    with pytest.raises(RPCError):
        await _read(handle)
    assert handle.queries == tries


@pytest.mark.parametrize(
    "status",
    [RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.PERMISSION_DENIED],
)
async def test_any_other_status_fails_at_once(status: RPCStatusCode) -> None:
    handle = _Handle([status])
    with pytest.raises(RPCError):
        await _read(handle)
    assert handle.queries == 1
