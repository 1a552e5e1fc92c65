"""A worker's memory over many conversations, one after another: the soak of issue 26, item 4.

One dev server, one worker process of its own (`scale_worker.py`, the
worker an application builds), and `--conversations` conversations of
`--turns` tool turns each, at most `--in-flight` at once: each new one
starts as soon as one closes, so the worker serves the same load for the
whole run and every conversation it ever held has ended before the last
sample. Every `--every` closed conversations the bench asks the worker for
`gc.collect()` and reads its RSS (VmRSS, /proc/<pid>/status) and what it
keeps for conversations (live runs, cached transcripts, produced items,
agent configurations, planned calls).

It prints the curve (RSS against conversations closed), then each figure
beside its goal:

- RSS after the drain within 1.2x the RSS at start: after two warm-up
  conversations and then one round of `--in-flight` at once (the worker's
  thread pools, buffers and caches as the load sizes them), each drained,
  handed back (ours) and `gc.collect()`ed as the end is; the RSS after the
  first two is printed too;
- flat: the RSS of the last sample within 1.1x the largest of the first
  half's (the caches fill while the first conversations run, then hold);
- nothing kept for ended conversations after the drain (beyond the last
  `--in-flight` ones, which a worker lets go at its next activity);
- every conversation completed, no activity failed.

`--side bare` runs `bare_loop.py`'s workflow instead, for the same curve
of plain Temporal. After the drain, ours is measured once its worker has
handed freed memory back to the system (`HeapReturn`, which does so once
the worker holds at most half the runs it held; never under the steady
load of the soak itself).

Every figure is from this one run on a shared, noisy machine.

Usage:
    python bench/soak.py --conversations 2000          # a quick look
    python bench/soak.py --conversations 20000 --every 1000    # make bench-soak
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import Counter
from typing import Any

from scale import (  # pyright: ignore[reportPrivateUsage]
    WorkerProcess,
    _heap_returned,
    _memory,
    _start_all,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools.worker.dev_server import DEFAULT_DYNAMIC_CONFIG, DevServer


async def soak(args: Any) -> int:
    """Run the soak; 0 when every goal is met, 1 otherwise."""
    async with DevServer(headless=True, dynamic_config=DEFAULT_DYNAMIC_CONFIG) as server:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        queue = f"soak-{args.side}-{uuid.uuid4().hex[:8]}"
        worker = await WorkerProcess.start(server.address, queue, args.side, args, 0)
        curve: list[tuple[int, float, float, dict[str, int] | None]] = []
        outcomes: Counter[str] = Counter()
        try:
            # Warm: two conversations (imports), then one round of `in_flight`
            # at once (thread pools, buffers and caches sized for the load), each
            # measured after its drain as the end is.
            cold_rss = start_rss = 0.0
            for count in (2, args.in_flight):
                names = [f"{queue}-warm{count}-{k}" for k in range(count)]
                warm = await _start_all(client, args.side, queue, names, args.turns, False, count)
                for workflow_id, run_id in warm.items():
                    await client.get_workflow_handle(workflow_id, run_id=run_id).result()
                if args.side == "ours":
                    await _heap_returned([worker])
                await worker.ask("mark" if args.tracemalloc else "gc")
                cold_rss, start_rss = start_rss, _memory(worker.pid)[0]
            started = time.monotonic()
            curve.append((0, 0.0, start_rss, None))
            print(
                f"  start: {cold_rss:.1f} MB after 2 conversations, {start_rss:.1f} MB after "
                f"a round of {args.in_flight}",
                flush=True,
            )
            closed = 0
            gate = asyncio.Semaphore(args.in_flight)
            sampling = asyncio.Lock()

            async def one(k: int) -> None:
                nonlocal closed
                async with gate:
                    workflow_id = f"{queue}-c{k}"
                    runs = await _start_all(
                        client, args.side, queue, [workflow_id], args.turns, False, 1
                    )
                    handle = client.get_workflow_handle(workflow_id, run_id=runs[workflow_id])
                    try:
                        await handle.result()
                        outcomes["completed"] += 1
                    except Exception as exc:  # counted, and the goal says so
                        outcomes[type(exc).__name__] += 1
                closed += 1
                if closed % args.every == 0:
                    async with sampling:
                        answer = await worker.ask("gc")
                        rss = _memory(worker.pid)[0]
                        curve.append((closed, time.monotonic() - started, rss, answer.get("held")))
                        print(
                            f"  {closed:>7,} closed  {curve[-1][1]:7.0f} s  RSS {rss:6.1f} MB"
                            f"  held {answer.get('held')}",
                            flush=True,
                        )

            await asyncio.gather(*(one(k) for k in range(args.conversations)))
            if args.side == "ours":
                await _heap_returned([worker])
            answer = await worker.ask("gc")
            end_rss, peak = _memory(worker.pid)
            stats = answer
            if args.tracemalloc:
                grown = (await worker.ask("top"))["top"]
                print("\n  Python allocations that grew most since the start:")
                print("\n".join(f"    {line}" for line in grown))
        finally:
            await worker.stop()

    seconds = curve[-1][1] if len(curve) > 1 else 0.0
    print(
        f"\n{args.conversations:,} conversations x {args.turns} tool turns ({args.side}), "
        f"at most {args.in_flight} at once, one worker process, {seconds:.0f} s\n"
    )
    print(f"  {'closed':>8} {'seconds':>8} {'RSS MB':>8}")
    for closed, at, rss, _ in curve:
        print(f"  {closed:>8,} {at:>8.0f} {rss:>8.1f}")
    first_half = [rss for closed, _, rss, _ in curve if 0 < closed <= args.conversations // 2]
    held = stats.get("held") or {}
    rows = [
        ("RSS after the drain / at start", end_rss / start_rss, "<= 1.2"),
        (
            "RSS at the end / largest of the first half",
            end_rss / max(first_half) if first_half else None,
            "<= 1.1",
        ),
    ]
    print(
        f"\n  after 2 conversations {cold_rss:.1f} MB, after a round of {args.in_flight} "
        f"(the start) {start_rss:.1f} MB, after the drain {end_rss:.1f} MB "
        f"({end_rss / cold_rss:.2f}x the first), peak {peak:.1f} MB"
    )
    met = True
    for name, ratio, goal in rows:
        ok = ratio is not None and ratio <= float(goal.split()[1])
        met &= ok
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        print(f"  {name:<45} {shown:>7}  {goal:<7} {'met' if ok else 'MISSED'}")
    kept = {k: v for k, v in held.items() if k not in ("live runs",) and "bytes" not in k and v > 0}
    leftover = max(kept.values(), default=0)
    ok = leftover <= args.in_flight
    met &= ok
    print(
        f"  {'entries kept after the drain (<= in flight)':<45} {leftover:>7}  "
        f"<= {args.in_flight:<4} {'met' if ok else 'MISSED'}  {held}"
    )
    failures = stats.get("failures") or {}
    ok = outcomes["completed"] == args.conversations and not failures
    met &= ok
    print(
        f"  {'completed, activity failures':<45} {outcomes['completed']:>7,}  "
        f"{'all, 0':<7} {'met' if ok else 'MISSED'}  {dict(outcomes)} {failures}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=1, help="tool turns per conversation")
    parser.add_argument("--size", type=int, default=5000, help="bytes of each tool output")
    parser.add_argument("--in-flight", type=int, default=50, help="conversations at once")
    parser.add_argument("--every", type=int, default=500, help="closed conversations per sample")
    parser.add_argument("--side", choices=("ours", "bare"), default="ours")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="and which Python allocations grew (slower)"
    )
    parsed = parser.parse_args()
    parsed.workers, parsed.max_cached = 1, 1000
    sys.exit(asyncio.run(soak(parsed)))
