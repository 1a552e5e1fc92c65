"""The worker's upkeep: ended conversations' memories go, freed memory goes back once traffic falls.

`HeapReturn` (durable_tools/worker/heap_return.py) against a registry of its
own and counting stand-ins for the activities' `let_go` and for
`malloc_trim`: when it returns memory (runs ended, at most half the peak
held), when it does not (steady load, nothing ended), and that a failing
check never stops it. bench/soak.py measures what it gives back.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref

import pytest

from durable_tools.live_runs import LiveRuns
from durable_tools.worker import allocator
from durable_tools.worker.heap_return import (
    HeapReturn,
    freeze_startup_objects,
    malloc_trim,
    return_freed,
)


class _Run:
    """A stand-in for a registered `AgentWorkflow` run (no cycles: gone once unreferenced)."""


class _Counting:
    def __init__(self) -> None:
        self.released = 0
        self.let_go_calls = 0
        self.trims = 0
        self.order: list[str] = []

    def collect(self) -> None:
        self.order.append("collect")

    def let_go(self) -> int:
        self.let_go_calls += 1
        released, self.released = self.released, 0
        return released

    def trim(self) -> None:
        self.trims += 1
        self.order.append("trim")


def _runs(count: int) -> tuple[LiveRuns, list[_Run]]:
    runs, held = LiveRuns(), [_Run() for _ in range(count)]
    for k, run in enumerate(held):
        runs.register(f"wf{k}", "r1", run)  # pyright: ignore[reportArgumentType]
    return runs, held


async def test_memory_goes_back_once_half_the_peak_has_ended() -> None:
    runs, held = _runs(10)
    counting = _Counting()
    upkeep = HeapReturn(counting.let_go, runs=runs, trim=counting.trim, collect=counting.collect)
    assert not await upkeep.check()  # nothing ended: a steady worker keeps its heap
    del held[:4]
    counting.released = 4
    assert not await upkeep.check()  # 6 of a peak of 10 still held
    del held[:1]
    counting.released = 1
    assert await upkeep.check()  # 5 of 10: half gone
    assert (counting.trims, upkeep.returns) == (1, 1)
    assert not await upkeep.check()  # nothing released since
    del held[:]
    counting.released = 5
    assert await upkeep.check()  # the drain: 0 of the new peak of 5
    assert counting.trims == 2 and counting.let_go_calls == 5
    # Each return collects the ended runs' cycles first: pages freed after a trim stay.
    assert counting.order == ["collect", "trim"] * 2


async def test_ended_runs_waiting_for_collection_do_not_count_as_held() -> None:
    """Runs that ended are freed by a later collection; the drain returns memory without one."""
    runs, held = _runs(6)
    counting = _Counting()
    upkeep = HeapReturn(counting.let_go, runs=runs, trim=counting.trim, collect=counting.collect)
    assert not await upkeep.check()  # peak: 6 open
    for k in range(6):  # every conversation ends; its run is still referenced (uncollected)
        runs.ended(f"wf{k}", "r1", continued=k % 2 == 0)
    counting.released = 6
    assert len(runs) == 6 and runs.open() == 0
    assert await upkeep.check()  # 0 of 6 open: collect, then hand pages back
    assert counting.order == ["collect", "trim"]
    assert len(held) == 6


async def test_a_worker_under_steady_load_never_trims() -> None:
    runs, held = _runs(8)
    counting = _Counting()
    upkeep = HeapReturn(counting.let_go, runs=runs, trim=counting.trim)
    for k in range(50):  # each run that ends is followed by a new one
        held.pop(0)
        new = _Run()
        runs.register(f"new{k}", "r1", new)  # pyright: ignore[reportArgumentType]
        held.append(new)
        counting.released = 1
        assert not await upkeep.check()
    assert counting.trims == 0 and counting.let_go_calls == 50


async def test_without_a_trim_it_still_lets_go() -> None:
    runs, held = _runs(2)
    counting = _Counting()
    upkeep = HeapReturn(counting.let_go, runs=runs, trim=None)
    del held[:]
    counting.released = 2
    assert not await upkeep.check()
    assert counting.let_go_calls == 1 and upkeep.returns == 0


async def test_a_failing_check_is_logged_and_the_upkeep_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0
    checked = asyncio.Event()

    def let_go() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a cache could not let go")
        checked.set()
        return 0

    upkeep = HeapReturn(let_go, runs=LiveRuns(), trim=None, interval=0.001)
    async with upkeep.running():
        await checked.wait()
    assert calls >= 2
    assert "could not return freed memory" in caplog.text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_glibc_trim_is_found_and_runs() -> None:
    assert malloc_trim is not None
    malloc_trim()
    # This process runs on the interpreter's allocator: the default hands back by glibc.
    assert allocator.in_use() == "system" and return_freed is malloc_trim


def test_decoded_records_leave_their_ids_out_of_pydantics_string_cache() -> None:
    """Issue 26, item 4: a turn's ids are not kept by pydantic-core's process-wide cache.

    Decoded twice through the plugin's payload converter, a model request
    gives two copies of its run id (nothing kept it between the two); a
    model with pydantic's defaults gives the cached one both times.
    """
    from pydantic import BaseModel
    from temporalio.contrib.pydantic import pydantic_data_converter

    from durable_tools._wire import ModelTurnRequest, ToolActivityInput

    class Defaults(BaseModel):
        run_id: str

    converter = pydantic_data_converter.payload_converter
    run_id = "01a21dd4-36c7-7f1b-b4bf-13d5fd98d1df"
    for model, value in (
        (ModelTurnRequest, ModelTurnRequest(workflow_id="w", run_id=run_id, turn=1, upto=1)),
        (Defaults, Defaults(run_id=run_id)),
    ):
        payload = converter.to_payload(value)
        first, second = (converter.from_payload(payload, model) for _ in range(2))
        assert first.run_id == second.run_id == run_id
        assert (first.run_id is second.run_id) == (model is Defaults), model.__name__
    payload = converter.to_payload(
        ToolActivityInput(toolkit="k", workflow_id="w", idempotency_key=f"{run_id}/c1")
    )
    first, second = (converter.from_payload(payload, ToolActivityInput) for _ in range(2))
    assert first.idempotency_key is not second.idempotency_key


def test_startup_objects_are_frozen_after_a_collection() -> None:
    class Node:
        pass

    kept = Node()
    cycle = Node()
    cycle.self = cycle  # pyright: ignore[reportAttributeAccessIssue]
    garbage = weakref.ref(cycle)
    del cycle
    try:
        frozen = freeze_startup_objects()
        assert frozen == gc.get_freeze_count() > 0
        assert garbage() is None  # collected first, so never frozen
        # What lived on is in the permanent generation: no collection scans it.
        assert not any(obj is kept for obj in gc.get_objects())
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
    assert any(obj is kept for obj in gc.get_objects())
