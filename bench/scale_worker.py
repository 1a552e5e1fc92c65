"""The worker process of `scale.py`: ours or bare on one task queue, and a control port.

`scale.py` starts one (or `--workers K`) of these per measured phase, so the
worker's CPU (/proc/<pid>/stat) and memory (/proc/<pid>/status) are its own,
not the bench client's. It serves one side:

- `ours`: durable-tools' worker as an application builds it (`App` and
  `DurableToolsPlugin`, as `long_conversation.py` does), with `echo`, which
  counts its executions by idempotency key (`"{workflow_id}/{call_id}"`);
- `bare`: `bare_loop.py`'s `BareConversation` with its model activity and an
  `echo` activity that counts the same way.

Ours runs on the allocator `durable-tools worker` picks (`--allocator`,
default `auto`: jemalloc where the system has it, `allocator.py`); bare on
the interpreter's own, as a plain Temporal worker does. Both use the SDK's
default worker limits and the same interceptor, which
counts activity attempts that raised, by type. Once polling, it writes to
`--ready-file` the port of a TCP server on 127.0.0.1 that answers one JSON line per
command line, `stats` (the counters), `gc` (`gc.collect()`, then the
counters) or `garbage` (what a collection frees, and the reference cycles
that kept it: `garbage_cycles.py`); with `--tracemalloc`, `mark` (a snapshot) and `top` (the sites
that grew most since). SIGTERM or SIGINT stops it.

Debug aids for memory after a burst (issue 26, item 4; environment variables):

- `SCALE_WORKER_POOLS=FILE`: at the first `gc` or `mark`, records the
  pymalloc pools in use; at each later one appends to FILE (one JSON line)
  the objects by type and what lives in the pools carved since, by arena
  (`heap_probe.py`; with `--tracemalloc`, where each block was allocated);
- `SCALE_WORKER_CENSUS=FILE`: at each `gc` or `mark`, appends to FILE (one
  JSON line) the objects by type and jemalloc's small size classes in use
  (regions and slabs: what the pages that stay active after a burst hold);
- `SCALE_WORKER_OBJECTS=FILE`: every 10 s, appends to FILE.ours or FILE.bare (a JSON line)
  the objects the collector tracks, in all and by type (what a cached
  conversation costs each collection to walk), then collects and records the
  cyclic garbage it found, by type (its collections count in the `gc` figures).
- `SCALE_WORKER_CACHE_STRINGS=keys` (or `none`): pydantic's `cache_strings`
  for every model (its cache of decoded JSON strings keeps values otherwise);
- `SCALE_WORKER_CLEAR_TYPE_CACHE=1`: empties CPython's type attribute cache
  (which holds the names it looked up) before each `gc`;
- `SCALE_WORKER_PLAIN_EXECUTOR=1`: ours runs workflow tasks on a plain
  `ThreadPoolExecutor` (the SDK's), not the plugin's
  `allocator.ThreadCacheExecutor`, to measure what the thread caches do;
- `SCALE_WORKER_GC_FREEZE=1`, `SCALE_WORKER_GC_THRESHOLD=N[,N1[,N2]]`: before
  the worker starts, bare's `gc.freeze()` (what was imported is never scanned
  again; ours always freezes, as the `durable-tools worker` command does:
  `heap_return.freeze_startup_objects`) and `gc.set_threshold(N, N1, N2)`
  (N1, N2 default 10), to measure
  what the collector costs (the details print each generation's collections
  and seconds; docs/operations.md, "The garbage collector").

Usage (by `scale.py`):
    python bench/scale_worker.py --address 127.0.0.1:7233 --task-queue q --side ours \
        --ready-file /tmp/port
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, TextIO

if os.environ.get("SCALE_WORKER_CACHE_STRINGS"):  # an experiment: see the module
    from pydantic import BaseModel as _BaseModel

    # every model defined from here on (all of durable_tools') inherits it
    _BaseModel.model_config["cache_strings"] = os.environ["SCALE_WORKER_CACHE_STRINGS"]  # pyright: ignore[reportGeneralTypeIssues]

from bare_loop import BareActivities, BareConversation, BareEchoArgs
from garbage_cycles import collect_garbage, cyclic_garbage
from heap_probe import PoolScan, object_counts
from long_conversation import Looping
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from durable_tools import AssistantMessage, ToolCall, ToolContext, Toolkit, finish_tool, tool
from durable_tools.activities.activity_base import FALLBACK_QUERIES, QUERIES_SENT
from durable_tools.live_runs import LIVE_RUNS
from durable_tools.models.base import ModelRequest
from durable_tools.worker.allocator import in_use  # noqa: E402 (after the experiment's switch)
from durable_tools.worker.app import App
from durable_tools.worker.heap_return import freeze_startup_objects
from durable_tools.worker.plugin import DurableToolsPlugin, sandbox_runner

EXECUTION_LOG: list[TextIO] = []
"""Where each `echo` execution's key goes, one line each (`--ready-file` with `.executions`).

A file and not a counter in the process, so the worker keeps nothing per
tool call for the bench: its RSS after the drain is the worker's own."""
FAILURES: Counter[str] = Counter()
"""Activity attempts that raised, by `activity type: error type`."""
WARNINGS: Counter[str] = Counter()
"""Warning (and worse) log records of the SDK, by the start of their message."""
GC_SECONDS: defaultdict[str, float] = defaultdict(float)
"""Collections by generation (`gen0`...), the CPU seconds they took (`gen0 s`...: the
collecting thread's, so a preempted collection does not count the wait) and the
cyclic garbage they freed (`gen0 freed`...): `gc.callbacks`."""
_gc_started = [0.0]


def _time_collections(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_started[0] = time.thread_time()
        return
    generation = f"gen{info['generation']}"
    GC_SECONDS[generation] += 1
    GC_SECONDS[f"{generation} s"] += time.thread_time() - _gc_started[0]
    GC_SECONDS[f"{generation} freed"] += info["collected"]


gc.callbacks.append(_time_collections)

LAST_EXECUTION = [0.0]
"""When `echo` last ran (`time.time()`)."""


def _executed(key: str) -> None:
    for log in EXECUTION_LOG:
        log.write(key + "\n")  # line-buffered: whole lines reach the file as they run


@tool(retry=1)
async def echo(size: int, turn: int, ctx: ToolContext) -> str:
    """Returns `size` bytes of text (long_conversation.py's `echo`, counted).

    Args:
        size: Bytes.
        turn: Turn number, echoed.
        ctx: The call's context (its idempotency key names the call).
    """
    _executed(ctx.idempotency_key)
    LAST_EXECUTION[0] = time.time()
    return f"{turn}:" + "y" * size


@activity.defn(name="tool.echo")
async def bare_echo(call: ToolCall) -> str:
    """bare_loop.py's `echo`, counted by the same key."""
    _executed(f"{activity.info().workflow_id}/{call.call_id}")
    LAST_EXECUTION[0] = time.time()
    args = BareEchoArgs.model_validate_json(call.arguments)
    return f"{args.turn}:" + "y" * args.size


class Finishing(Looping):
    """`Looping`, but the last turn calls `finish` instead of answering "done".

    A conversation that answers in text stays open for the next message and
    closes only at its idle timeout (a timer, one more workflow task); bare's
    workflow returns after its last model turn. Ending with the `finish`
    signal tool (answered by the loop, no activity) is the durable loop's
    way to end there too.
    """

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Turns 1..turns: `echo`; then `finish`."""
        if request.turn - 1 < self.turns:
            return await super().__call__(request)
        return self.END

    END: ClassVar[AssistantMessage] = AssistantMessage(
        tool_calls=(ToolCall(call_id="end", name="finish", arguments='{"output": "done"}'),)
    )
    """The last turn's answer: one `finish` call."""


class FanOut:
    """Calls `echo` `calls` times in turn 1, then answers "done" (the fan-out turn).

    With `finish` (ours), turn 2 calls `finish` instead, as `Finishing` does:
    a "done" would keep ours' conversation open until its idle timeout, and
    the fan-out's window (start to result) would count that wait and its
    timer, which bare's workflow, returning there, does not have.
    """

    def __init__(self, calls: int, size: int, *, finish: bool = False) -> None:
        self.calls, self.size, self.finish = calls, size, finish

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Turn 1: the calls; then "done" (or `finish`)."""
        if request.turn > 1:
            if self.finish:
                return Finishing.END
            return AssistantMessage(text="done")
        return AssistantMessage(
            tool_calls=tuple(
                ToolCall(
                    call_id=f"c{k}",
                    name="echo",
                    arguments=json.dumps({"size": self.size, "turn": k}),
                )
                for k in range(self.calls)
            )
        )


class _Counting(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CountingActivity(next)


class _CountingActivity(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except BaseException as exc:
            kind = type(exc).__name__
            if isinstance(exc, ApplicationError) and exc.type:
                kind = f"{kind}({exc.type})"
            FAILURES[f"{activity.info().activity_type}: {kind}"] += 1
            raise


class _WarningCount(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        WARNINGS[f"{record.name}: {record.getMessage()[:60]}"] += 1


HEAP_PROBE = os.environ.get("SCALE_WORKER_POOLS")
"""A file for `heap_probe.py`'s findings (a debug aid): marks the pools in use
at the first `gc` or `mark` command, then appends one JSON line per later one:
Python objects by type and what lives in the pools carved since the mark."""
POOL_SCAN = PoolScan()


def _probe_heap() -> None:
    """Mark, or append what survived since the mark (`HEAP_PROBE`)."""
    census = os.environ.get("SCALE_WORKER_CENSUS")
    if census:
        line = {"objects": object_counts(300), "bins": _jemalloc_bins(), "strings": _strings()}
        with open(census, "a") as out:  # noqa: PTH123 (a bench's probe)
            out.write(json.dumps(line) + "\n")
    if not HEAP_PROBE:
        return
    if POOL_SCAN.marked is None:
        POOL_SCAN.mark()
        return
    line = {"objects": object_counts(), "pools": POOL_SCAN.survivors()}
    with open(HEAP_PROBE, "a") as out:  # noqa: PTH123 (a bench's probe)
        out.write(json.dumps(line) + "\n")


async def _sample_objects(path: Path, every: float = 10.0) -> None:
    """Append the collector's tracked objects, by type, every `every` seconds."""
    start = time.monotonic()
    while True:
        await asyncio.sleep(every)
        line: dict[str, Any] = {"t": round(time.monotonic() - start)}
        line["tracked"] = len(gc.get_objects())
        line["by type"] = object_counts(60)
        garbage = collect_garbage()  # what a collection now frees: cyclic garbage
        line["garbage"] = dict(Counter(type(o).__name__ for o in garbage).most_common(60))
        del garbage
        with path.open("a") as out:
            out.write(json.dumps(line) + "\n")


def _strings() -> dict[str, Any]:
    """Strings the collector's objects refer to, by length (to 64), with uuid-like samples."""
    seen: set[int] = set()
    lengths: Counter[int] = Counter()
    samples: list[str] = []
    for holder in gc.get_objects():
        for value in gc.get_referents(holder):
            if type(value) is str and id(value) not in seen and len(value) <= 64:
                seen.add(id(value))
                lengths[len(value)] += 1
                if len(value) == 36 and value.count("-") == 4 and len(samples) < 5:
                    samples.append(value)
    holders = sorted(
        (
            (sum(1 for v in gc.get_referents(o) if type(v) is str), type(o).__name__, id(o))
            for o in gc.get_objects()
            if isinstance(o, (dict, list, tuple, set))
        ),
        reverse=True,
    )[:25]
    import linecache  # noqa: PLC0415 (a probe)

    return {
        "by length": dict(sorted(lengths.items())),
        "uuid-like": samples,
        "holders": [list(h) for h in holders],
        "linecache": sorted(linecache.cache),
    }


def _jemalloc_bins() -> list[dict[str, int]]:
    """jemalloc's small size classes in use: regions, slabs (`malloc_stats_print`, JSON)."""
    try:
        stats_print = ctypes.CDLL(None).malloc_stats_print
    except (OSError, AttributeError):
        return []
    chunks: list[bytes] = []
    write = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)(
        lambda _, text: chunks.append(text)
    )
    stats_print.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
    stats_print(ctypes.cast(write, ctypes.c_void_p), None, b"Jdxleh")
    try:
        document = json.loads(b"".join(chunks))
    except ValueError:
        return []
    bins_info = document["jemalloc"].get("arenas", {}).get("bin", [])
    arenas = document["jemalloc"]["stats.arenas"]
    merged = (arenas.get("merged") or next(iter(arenas.values())))["bins"]
    return [
        {
            "size": info["size"],
            "nregs": info["nregs"],
            "slab_size": info["slab_size"],
            "curregs": used["curregs"],
            "curslabs": used["curslabs"],
        }
        for info, used in zip(bins_info, merged, strict=False)
        if used["curslabs"]
    ]


def _grown(since: tracemalloc.Snapshot, limit: int = 15) -> list[str]:
    """The allocation sites that grew most since `since` (`--tracemalloc`), as lines."""
    now = tracemalloc.take_snapshot()
    lines = [str(stat) for stat in now.compare_to(since, "lineno")[:limit]]
    for stat in now.compare_to(since, "traceback")[:2]:  # who made the two largest groups
        lines.append(f"{stat.size_diff / 1024:+.0f} KiB, {stat.count_diff:+d} objects, from:")
        lines += [f"  {frame.filename}:{frame.lineno}" for frame in stat.traceback]
    return lines


class _Mallinfo2(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 (ctypes' own declaration)
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


_STACKS = (8 << 20, 2 << 20)
"""Sizes of thread stacks' mappings (glibc's for Python threads, Rust's), give or take a guard."""


def _rss_by_mapping() -> dict[str, float]:
    """Resident MB per kind of mapping (/proc/self/smaps): main heap, anonymous, files."""
    kinds: Counter[str] = Counter()
    kind = "files"
    try:
        with open("/proc/self/smaps") as smaps:  # noqa: PTH123 (a bench's probe)
            for line in smaps:
                head = line.split()
                if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                    start, end = (int(x, 16) for x in head[0].split("-"))
                    name = head[5] if len(head) > 5 else ""
                    if name == "[heap]":
                        kind = "rss main heap"
                    elif name.startswith("/"):
                        kind = "rss files"
                    elif not name and start % (64 << 20) == 0:
                        kind = "rss anonymous: glibc thread arenas"
                    elif not name and any(abs(end - start - m) <= 1 << 16 for m in _STACKS):
                        kind = "rss anonymous: thread stacks"
                    elif not name:
                        kind = "rss anonymous: pymalloc and other"
                    else:
                        kind = "rss other"
                elif head[0] == "Rss:":
                    kinds[kind] += int(head[1])
        with open("/proc/self/status") as status:  # noqa: PTH123 (a bench's probe)
            threads = next(int(x.split()[1]) for x in status if x.startswith("Threads:"))
    except OSError:
        return {}
    return {k: round(v / 1024, 1) for k, v in sorted(kinds.items())} | {"threads": threads}


def _pymalloc() -> dict[str, float]:
    """Python's small-object allocator, MB: its arenas and what their blocks hold.

    An arena goes back to the system only when all its blocks are free, so
    arenas much larger than their blocks are fragmentation.
    """
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)  # `_debugmallocstats` writes to C's stderr
        try:
            sys._debugmallocstats()  # pyright: ignore[reportPrivateUsage]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found: dict[str, float] = {}
    for label, key in (
        ("pymalloc arenas", r"(\d+) arenas \* \d+ bytes/arena\s+=\s+([\d,]+)"),
        ("pymalloc in blocks", r"# bytes in allocated blocks\s+=\s+([\d,]+)"),
    ):
        match = re.search(key, text)
        if match:
            found[label] = round(int(match.groups()[-1].replace(",", "")) / 1024 / 1024, 1)
    return found


def heap() -> dict[str, float]:
    """Where the process's heap is, MB: glibc's in use, free but kept, mmapped; Python's blocks.

    Tells a heap that holds objects (in use) from one that holds holes
    (free but kept: fragmentation). Empty where glibc's `mallinfo2` is missing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    mb = 1024 * 1024
    return (
        {
            "malloc in use": round((info.uordblks + info.hblkhd) / mb, 1),
            "malloc free kept": round(info.fordblks / mb, 1),
            "mmapped": round(info.hblkhd / mb, 1),
            "python blocks (k)": round(sys.getallocatedblocks() / 1000, 1),
        }
        | _pymalloc()
        | _jemalloc()
        | _rss_by_mapping()
    )


def _jemalloc() -> dict[str, float]:
    """The figures of jemalloc (where it is the allocator), MB: allocated, active, resident..."""
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except (OSError, AttributeError):
        return {}
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    mallctl.argtypes += [ctypes.c_size_t]
    epoch = ctypes.c_uint64(1)
    mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.sizeof(epoch))

    def read(name: str) -> int:
        value, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
        mallctl(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0)
        return value.value

    mb, page = 1024 * 1024, 4096
    figures = {
        f"jemalloc {k}": round(read(f"stats.{k}") / mb, 1)
        for k in ("allocated", "active", "metadata", "resident", "mapped", "retained")
    }
    figures["jemalloc dirty"] = round(read("stats.arenas.4096.pdirty") * page / mb, 1)
    figures["jemalloc muzzy"] = round(read("stats.arenas.4096.pmuzzy") * page / mb, 1)
    figures["jemalloc background threads"] = read("stats.background_thread.num_threads")
    return figures


def stats(plugin: DurableToolsPlugin | None) -> dict[str, Any]:
    """The counters, as JSON-ready values."""
    cache = held = None
    if plugin is not None:
        activities = plugin.agent_activities
        cache = dataclasses.asdict(activities.transcripts.stats)
        held = {  # what the worker keeps for conversations now (bounded; emptied at run end)
            "live runs": len(LIVE_RUNS),
            "transcripts": len(activities.transcripts),
            "transcript bytes": activities.transcripts.bytes,
            "produced items": len(activities.produced),
            "produced bytes": activities.produced.bytes,
            "agent configs": len(activities._agent_configs),  # pyright: ignore[reportPrivateUsage]
            "planned calls": len(activities._planned),  # pyright: ignore[reportPrivateUsage]
        }
    return {
        "last_execution": LAST_EXECUTION[0],
        "failures": dict(FAILURES),
        "warnings": dict(WARNINGS),
        "queries": dict(QUERIES_SENT),
        "fallback": {"waited": FALLBACK_QUERIES.waited, "skipped": FALLBACK_QUERIES.skipped},
        "cache": cache,
        "held": held,
        "heap returns": plugin.heap_return.returns if plugin is not None else 0,
        "gc": {k: round(v, 3) for k, v in GC_SECONDS.items()},
        "allocator": in_use(),
        "heap": heap(),
    }


async def main(args: argparse.Namespace) -> None:
    """Run the worker and the control port until SIGTERM."""
    handler = _WarningCount(logging.WARNING)
    logging.getLogger("temporalio").addHandler(handler)
    # Bare's workflow returns after the model's last turn, whatever it says:
    # its model answers "done" (a `finish` call would be an activity it has
    # no worker for, and its phase would never end).
    finishing = args.side == "ours"
    ending = Finishing if finishing else Looping
    model = (
        FanOut(args.fanout, args.size, finish=finishing)
        if args.fanout
        else ending(args.turns, args.size)
    )
    plugin: DurableToolsPlugin | None = None
    if args.side == "ours":
        plugin = DurableToolsPlugin(
            App(
                toolkits={"bench": Toolkit(echo, finish_tool(), label="bench")},
                models={"bench": model},
            ),
            search_attributes=False,
        )
        client = await Client.connect(args.address, plugins=[plugin])
        plain = os.environ.get("SCALE_WORKER_PLAIN_EXECUTOR")  # see the module
        worker = Worker(
            client,
            task_queue=args.task_queue,
            interceptors=[_Counting()],
            max_cached_workflows=args.max_cached,
            workflow_task_executor=ThreadPoolExecutor(max_workers=500) if plain else None,
        )
    else:
        client = await Client.connect(args.address, data_converter=pydantic_data_converter)
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=[BareConversation],
            activities=[BareActivities(model).model_turn, bare_echo],
            workflow_runner=sandbox_runner(),
            interceptors=[_Counting()],
            max_cached_workflows=args.max_cached,
        )

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while line := (await reader.readline()).strip():
                if line in (b"gc", b"mark", b"top"):
                    if os.environ.get("SCALE_WORKER_CLEAR_TYPE_CACHE"):  # see the module
                        sys._clear_type_cache()  # pyright: ignore[reportPrivateUsage]
                    gc.collect()
                if line in (b"gc", b"mark"):
                    _probe_heap()
                if line == b"mark" and tracemalloc.is_tracing():
                    marked[:] = [tracemalloc.take_snapshot()]
                if line == b"top" and marked:
                    answer = {"top": _grown(marked[0])}
                elif line == b"garbage":  # a debug aid: see garbage_cycles.py
                    answer = cyclic_garbage()
                elif line in (b"gc", b"stats", b"mark"):
                    answer = stats(plugin)
                else:
                    answer = {"error": "?"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        writer.close()

    marked: list[tracemalloc.Snapshot] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(control, "127.0.0.1", 0)
    executions = args.ready_file.with_suffix(".executions").open("a", buffering=1)
    EXECUTION_LOG.append(executions)
    # Ours as the `durable-tools worker` command does once ready; bare as an experiment.
    if args.side == "ours" or os.environ.get("SCALE_WORKER_GC_FREEZE"):
        freeze_startup_objects()
    if os.environ.get("SCALE_WORKER_GC_THRESHOLD"):  # experiment
        thresholds = [int(t) for t in os.environ["SCALE_WORKER_GC_THRESHOLD"].split(",")]
        gc.set_threshold(*(thresholds + [10, 10])[:3])
    samplers: list[asyncio.Task[None]] = []  # kept: the loop holds tasks weakly
    if os.environ.get("SCALE_WORKER_OBJECTS"):  # a debug aid: see the module
        path = Path(f"{os.environ['SCALE_WORKER_OBJECTS']}.{args.side}")
        samplers.append(asyncio.create_task(_sample_objects(path)))
    async with server, worker:
        port = server.sockets[0].getsockname()[1]
        partial = args.ready_file.with_suffix(".partial")
        partial.write_text(str(port))
        partial.rename(args.ready_file)  # whole, or not there
        await stop.wait()
    executions.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--side", choices=("ours", "bare"), required=True)
    parser.add_argument("--turns", type=int, default=5, help="tool turns per conversation")
    parser.add_argument("--size", type=int, default=5000, help="bytes of each tool output")
    parser.add_argument("--fanout", type=int, default=0, help="calls in one turn instead")
    parser.add_argument(
        "--max-cached", type=int, default=1000, help="runs in the sticky cache (the SDK's default)"
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="trace allocations (`mark`, then `top`)"
    )
    parser.add_argument("--ready-file", type=Path, required=True, help="gets the control port")
    parser.add_argument(
        "--allocator",
        choices=("auto", "jemalloc", "system"),
        default=os.environ.get("DURABLE_TOOLS_ALLOCATOR", "auto"),
        help="ours: as `durable-tools worker --allocator` (bare keeps the system's)",
    )
    parsed = parser.parse_args()
    if parsed.side == "ours":  # the allocator `durable-tools worker` runs on (allocator.py)
        from durable_tools.worker.allocator import reexec

        reexec(parsed.allocator)
    if parsed.tracemalloc:
        tracemalloc.start(12)  # frames kept per allocation: enough to see who holds it
    asyncio.run(main(parsed))
