"""Giving memory back once conversations end: the worker's upkeep between activities.

A worker's activities let go of what they keep for a conversation when its
run ends, at their next activity (`ActivitiesBase.let_go`); and the memory
freed stays with the process: glibc's allocator keeps freed pages of its
heaps for later allocations instead of returning them. After 500
conversations drained, a worker's RSS stayed at 1.6x to 1.7x its start,
while its Python objects took 1.6 MB in all (issue 26, item 4; bare
Temporal's worker 1.3x to 1.6x).

`HeapReturn.run`, started by `DurableToolsPlugin.run_worker` beside the
worker, checks every `interval` seconds:

1. lets the activities drop what they keep for ended conversations (so the
   last conversations before a quiet spell go too, without waiting for
   another activity);
2. once runs have ended since the last return and the process holds at
   most half the open runs it held at its peak since then (`LIVE_RUNS`,
   runs that ended and wait for collection not counted), collects
   the cyclic garbage the ended runs left (`gc.collect()`: a run's objects
   are mostly cycles, freed only by a collection, and pages freed after the
   trim would stay with the process) and then hands the freed pages back
   (`malloc_trim(0)`, in a thread: about 1 ms per 100 MB of heap here; on
   jemalloc, `durable_tools.worker.allocator`, a purge of its arenas).

A worker under steady load holds as many runs as before and does not trim;
one whose traffic fell does, once. Where the C library is not glibc (musl,
macOS) and jemalloc is not loaded, step 2 does nothing. Neither trim hands
back a page or an arena that one live object still holds: how much comes
back after a burst depends on the allocator (`allocator.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Final

from durable_tools.live_runs import LIVE_RUNS, LiveRuns
from durable_tools.worker import allocator

__all__ = [
    "HEAP_RETURN_INTERVAL",
    "HeapReturn",
    "freeze_startup_objects",
    "malloc_trim",
    "return_freed",
]

HEAP_RETURN_INTERVAL: Final[float] = 5.0
"""Seconds between two checks (`HeapReturn.run`)."""

_log = logging.getLogger(__name__)


def _glibc_trim() -> Callable[[], None] | None:
    """The C library's `malloc_trim(0)` (glibc), or None where it has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim  # ctypes releases the GIL during the call
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int

    def trim_all() -> None:
        trim(0)  # 1: memory was released, 0: there was none to release

    return trim_all


malloc_trim: Final[Callable[[], None] | None] = _glibc_trim()
"""Hands the free pages of every malloc arena back to the system (None: not glibc)."""


def _return_freed() -> Callable[[], None] | None:
    """How this process hands freed pages back, or None where it cannot.

    jemalloc's purge where the process runs on it
    (`durable_tools.worker.allocator`), else glibc's `malloc_trim`.
    """
    if allocator.in_use() == "jemalloc":

        def purge() -> None:
            allocator.jemalloc_purge()

        return purge
    return malloc_trim


return_freed: Final[Callable[[], None] | None] = _return_freed()
"""Hands freed pages back to the system by this process's allocator (None: it cannot)."""


def freeze_startup_objects() -> int:
    """Collects, then moves every object left to the collector's permanent generation (`gc.freeze`).

    For a process that is only a worker (the `durable-tools worker`
    command), once it is ready: what it imported and built to start
    (modules, classes, pydantic schemas, the toolkits) lives as long as the
    process, and a full collection no longer scans it. Measured at 500
    conversations (`bench/scale.py`, both sides frozen): ours' 8 full
    collections took 1.22 s instead of 1.92 s, the same RSS. Not for a
    host that starts a worker among other work: an object frozen that later
    becomes cyclic garbage is never freed.

    Returns:
        The objects frozen (`gc.get_freeze_count()`).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class HeapReturn:
    """Returns freed memory once a worker's conversations have mostly ended (see the module).

    Args:
        let_go: Drops what the activities keep for conversations that
            ended or left (`ActivitiesBase.let_go`); returns how many runs'
            releases it read.
        runs: The registry of runs this process holds (default `LIVE_RUNS`).
        trim: Hands freed pages back (default `return_freed`: jemalloc's
            purge or glibc's `malloc_trim`; None: never).
        interval: Seconds between two checks (default 5).
        collect: Frees cyclic garbage before each trim (default `gc.collect`).

    Attributes:
        returns: Times the heap was handed back since the worker started.
    """

    def __init__(
        self,
        let_go: Callable[[], int],
        *,
        runs: LiveRuns = LIVE_RUNS,
        trim: Callable[[], None] | None = return_freed,
        interval: float = HEAP_RETURN_INTERVAL,
        collect: Callable[[], object] = gc.collect,
    ) -> None:
        self.let_go, self.runs, self.trim, self.interval = let_go, runs, trim, interval
        self.collect = collect
        self.returns = 0
        self._peak = 0
        self._released = 0

    async def check(self) -> bool:
        """One check: let go, and return the heap when due; whether it returned it."""
        self._released += self.let_go()
        held = self.runs.open()  # ended runs may wait for a collection to leave
        self._peak = max(self._peak, held)
        if self.trim is None or not self._released or held * 2 > self._peak:
            return False
        self.collect()  # on the loop: a collection needs the GIL throughout anyway
        allocator.flush_this_thread()  # the loop thread's jemalloc cache (none elsewhere)
        await asyncio.to_thread(self.trim)
        self.returns += 1
        self._peak, self._released = held, 0
        return True

    async def run(self) -> None:
        """Check every `interval` seconds until cancelled (a failed check is logged, not raised).

        On jemalloc, first gives the thread it runs on (the worker's event
        loop) a thread cache (`allocator.cache_this_thread`), emptied at
        each return.
        """
        allocator.cache_this_thread()
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception:  # upkeep never stops the worker
                _log.exception("could not return freed memory; trying again later")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncGenerator[HeapReturn]:
        """Run `run` in the background while the block runs."""
        task = asyncio.create_task(self.run(), name="durable-tools heap return")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
