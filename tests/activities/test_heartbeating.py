"""`heartbeating`: heartbeats while a block runs, and nothing left for the garbage collector.

Every model and tool activity runs inside it, so a reference cycle there
made each activity's context (its info, events, outbound objects) cyclic
garbage that only a full collection freed (issue 26, item 4: measured, about
450 such objects per conversation of five tool turns).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from durable_tools.activities import activity_base
from durable_tools.activities.activity_base import heartbeating

TIMEOUT = 0.3
"""The heartbeat timeout given to the activity (s); heartbeats come every third of it."""


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic collection during the test, so only reference counting frees objects."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _environment(heartbeats: list[tuple[Any, ...]]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=TIMEOUT))
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    return env


@activity.defn
async def _beating(details: list[Any]) -> None:
    async with heartbeating(details):
        # The loop runs due timers in deadline order: the first heartbeat (at
        # a third of the timeout) always fires before this sleep ends.
        await asyncio.sleep(TIMEOUT)


async def test_heartbeats_carry_the_details_while_the_block_runs() -> None:
    heartbeats: list[tuple[Any, ...]] = []
    await _environment(heartbeats).run(_beating, ["turn 3"])
    assert heartbeats
    assert all(beat == ("turn 3",) for beat in heartbeats)
    count = len(heartbeats)
    await asyncio.sleep(TIMEOUT)  # none after the block ended
    assert len(heartbeats) == count


async def test_no_heartbeat_without_a_heartbeat_timeout() -> None:
    heartbeats: list[tuple[Any, ...]] = []
    env = _environment(heartbeats)
    env.info = dataclasses.replace(env.info, heartbeat_timeout=None)
    await env.run(_beating, ["x"])
    assert heartbeats == []


@pytest.mark.usefixtures("collector_off")
async def test_leaves_no_cyclic_garbage() -> None:
    await _environment([]).run(_beating, ["x"])
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        left = [o for o in gc.garbage if getattr(o, "__module__", None) == activity_base.__name__]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
    assert left == []
