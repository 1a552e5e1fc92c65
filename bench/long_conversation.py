"""One long conversation on the dev server, beside bare Temporal doing the same activities.

Issue 12's goals, printed beside what this run measured: does a turn cost the
same at turn 2,000 (or 10,000) as at turn 1? The conversation: each model turn
calls `echo`, which returns `--size` bytes (5 KB); after `--turns` turns the
model answers "done". The model is O(1) per turn (it reads the turn number,
not the transcript), so what grows is ours. The same model and tool run as
two plain activities per turn in a plain workflow (`bare_loop.py`), the
baseline. Both use the dev server's default dynamic config (the server
suggests continue-as-new at its defaults) and one worker in this process.

Figures (each from this one run; the machine is shared and noisy):

- history bytes per turn, last 100 tool turns over the first 100 (all runs'
  events, continue-as-new carries included);
- median `model.turn` duration (activity started to completed, from history),
  last 100 over first 100;
- the largest continue-as-new input (the carried state);
- worker CPU per turn, ours over bare (`time.process_time()` of this process,
  which runs the worker and the client), and the dev server's CPU per turn
  (from /proc, Linux only);
- history bytes per turn, ours over bare.

`--full-reads` also runs the conversation with the transcript cache off
(every turn reads the whole transcript, as before incremental reads).

`--rounds N` runs ours and bare alternately N times (a new conversation each
time, on the same server; bare first in every other round) and prints, for
each figure, the median of the N rounds' values beside the goal, then every
round's value: on a shared machine one round's CPU ratio moved between 1.22
and 1.51 from run to run with the same code, as other tenants took CPU from
one side and not the other.

The duration ratio compares two windows of about two seconds each, minutes
apart. On this 2-core VM, stretches of seconds come and go in which every
process (the worker, the server, ours and bare alike) takes about 1.6x the
CPU per turn: per-process CPU from /proc rose with the durations in the same
windows, and no garbage-collection or scheduling pattern explained them. So
each round also prints the same ratio for bare Temporal (a control: its turns
cannot grow) and the spread of every window's median: a ratio far from 1
for the control too says the host moved, not the code.

Usage:
    python bench/long_conversation.py                 # 2,000 turns of 5 KB
    python bench/long_conversation.py --turns 10000   # the issue's full run
    python bench/long_conversation.py --turns 10000 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bare_loop import BareActivities, BareConversation, BareInput
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from durable_tools import AssistantMessage, ToolCall, Toolkit, tool
from durable_tools.activities.transcript_cache import TranscriptCache
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.base import ModelRequest
from durable_tools.worker.dev_server import DEFAULT_DYNAMIC_CONFIG, DevServer
from durable_tools.worker.plugin import DurableToolsPlugin, sandbox_runner

WINDOW = 100
CAN = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


@tool(retry=1)
async def echo(size: int, turn: int) -> str:
    """Returns `size` bytes of text.

    Args:
        size: Bytes.
        turn: Turn number, echoed.
    """
    return f"{turn}:" + "y" * size


class Looping:
    """Calls `echo` on turns 1..turns, then answers "done"; O(1) per turn."""

    def __init__(self, turns: int, size: int) -> None:
        self.turns, self.size = turns, size

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """One turn, from the turn number alone."""
        k = request.turn - 1
        if k < self.turns:
            args = json.dumps({"size": self.size, "turn": k})
            return AssistantMessage(
                tool_calls=(ToolCall(call_id=f"c{k}", name="echo", arguments=args),)
            )
        return AssistantMessage(text="done")


@dataclass
class Measured:
    """One conversation (all its runs), measured."""

    label: str
    turns: int
    seconds: float
    worker_cpu: float
    server_cpu: float | None
    runs: int = 0
    total_bytes: int = 0
    turn_bytes: list[int] = field(default_factory=list[int])  # per model turn, from turn 1
    model_ms: list[float] = field(default_factory=list[float])  # per model turn
    largest_carry: int = 0
    queries: int | None = None  # transcript_slice queries the model activity sent


def _server_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None elsewhere."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _runs(client: Client, workflow_id: str, run_id: str) -> list[list[HistoryEvent]]:
    runs: list[list[HistoryEvent]] = []
    next_run: str | None = run_id
    while next_run:
        history = await client.get_workflow_handle(workflow_id, run_id=next_run).fetch_history()
        events = list(history.events)
        runs.append(events)
        last = events[-1]
        next_run = None
        if last.event_type == CAN:
            next_run = (
                last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            )
    return runs


def _analyse(measured: Measured, runs: Sequence[Sequence[HistoryEvent]]) -> Measured:
    """Bytes per model turn (from one model.turn scheduled to the next) and durations."""
    measured.runs = len(runs)
    turn_bytes: list[int] = []
    current = -1  # bytes before the first model turn go to turn 1
    pending = 0
    for events in runs:
        started: dict[int, float] = {}
        model_scheduled: set[int] = set()
        for event in events:
            size = len(event.SerializeToString())
            measured.total_bytes += size
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (
                event.activity_task_scheduled_event_attributes.activity_type.name == "model.turn"
            ):
                model_scheduled.add(event.event_id)
                if current >= 0:
                    turn_bytes.append(pending)
                    pending = 0
                current += 1
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started[event.event_id] = event.event_time.ToNanoseconds() / 1e6
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = event.activity_task_completed_event_attributes
                if attrs.scheduled_event_id in model_scheduled:
                    begin = started[attrs.started_event_id]
                    measured.model_ms.append(event.event_time.ToNanoseconds() / 1e6 - begin)
            elif kind == CAN:
                carry = event.workflow_execution_continued_as_new_event_attributes.input
                measured.largest_carry = max(measured.largest_carry, carry.ByteSize())
            pending += size
    turn_bytes.append(pending)
    measured.turn_bytes = turn_bytes
    return measured


async def run_ours(
    server: DevServer, turns: int, size: int, *, full_reads: bool = False
) -> Measured:
    """The durable-tools conversation, to its end."""
    plugin = DurableToolsPlugin(
        toolkits={"bench": Toolkit(echo, label="bench")},
        models={"looping": Looping(turns, size)},
        search_attributes=False,
    )
    if full_reads:
        plugin.agent_activities.transcripts = TranscriptCache(max_entries=0)
    client = await Client.connect(server.address, plugins=[plugin])
    task_queue = f"long-{uuid.uuid4()}"
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"long-conversation-{uuid.uuid4()}"
    pid = getattr(server, "_process", None)  # the CLI's process: its CPU is the server's
    pid = pid.pid if pid is not None else None
    async with Worker(client, task_queue=task_queue):
        cpu, server_cpu, started = time.process_time(), _server_cpu(pid), time.monotonic()
        handle = await conversations.start(
            workflow_id,
            agent=AgentConfig(model="looping", toolkit="bench"),
            message="go",
            options=ConversationOptions(
                max_model_turns=turns + 10, idle_timeout=0.5, search_attributes=False
            ),
        )
        await handle.result()
        seconds, cpu = time.monotonic() - started, time.process_time() - cpu
        end_server = _server_cpu(pid)
    label = "ours, full reads" if full_reads else "ours"
    measured = Measured(
        label,
        turns,
        seconds,
        cpu,
        None if server_cpu is None or end_server is None else end_server - server_cpu,
    )
    measured.queries = plugin.agent_activities.transcripts.stats.queries
    assert handle.first_execution_run_id is not None
    return _analyse(measured, await _runs(client, workflow_id, handle.first_execution_run_id))


async def run_bare(server: DevServer, turns: int, size: int) -> Measured:
    """The same model and tool as two plain activities per turn."""
    client = await Client.connect(server.address, data_converter=pydantic_data_converter)
    task_queue = f"bare-{uuid.uuid4()}"
    acts = BareActivities(Looping(turns, size))
    workflow_id = f"bare-conversation-{uuid.uuid4()}"
    pid = getattr(server, "_process", None)
    pid = pid.pid if pid is not None else None
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[BareConversation],
        activities=[acts.model_turn, acts.echo],
        workflow_runner=sandbox_runner(),
    ):
        cpu, server_cpu, started = time.process_time(), _server_cpu(pid), time.monotonic()
        handle = await client.start_workflow(
            BareConversation.run, BareInput(turns=turns), id=workflow_id, task_queue=task_queue
        )
        await handle.result()
        seconds, cpu = time.monotonic() - started, time.process_time() - cpu
        end_server = _server_cpu(pid)
    measured = Measured(
        "bare",
        turns,
        seconds,
        cpu,
        None if server_cpu is None or end_server is None else end_server - server_cpu,
    )
    assert handle.first_execution_run_id is not None
    return _analyse(measured, await _runs(client, workflow_id, handle.first_execution_run_id))


def _windows(values: Sequence[float], turns: int) -> tuple[Sequence[float], Sequence[float]]:
    """The first and the last WINDOW tool turns (turns 1..turns call echo)."""
    return values[:WINDOW], values[turns - WINDOW : turns]


def _window_medians(values: Sequence[float]) -> list[float]:
    """The median of each consecutive WINDOW values (how much the host moves a window)."""
    return [
        statistics.median(values[i : i + WINDOW])
        for i in range(0, len(values) - WINDOW + 1, WINDOW)
    ]


def _verdict(value: float, goal: float | None) -> str:
    if goal is None:
        return "(no goal: host noise)"
    return "met" if value <= goal else "MISSED"


def _figures(ours: Measured, bare: Measured, extra: Sequence[Measured]) -> list[Figure]:
    """Each figure of one round, with its goal."""
    n = ours.turns
    first, last = f"turns 1-{WINDOW}", f"turns {n - WINDOW + 1}-{n}"
    rows: list[Figure] = []
    for m in (ours, *extra):
        b_first, b_last = _windows([float(b) for b in m.turn_bytes], n)
        t_first, t_last = _windows(m.model_ms, n)
        tag = "" if m is ours else f" [{m.label}]"
        rows.append(
            Figure(
                f"history bytes per turn, {last} / {first}{tag}",
                statistics.fmean(b_last) / statistics.fmean(b_first),
                1.2,
                "x",
            )
        )
        rows.append(
            Figure(
                f"median model.turn duration, {last} / {first}{tag}",
                statistics.median(t_last) / statistics.median(t_first),
                1.2,
                "x",
            )
        )
    # The same ratio for bare Temporal, whose turns cannot grow: how far this
    # host alone moved the ratio in this round (stretches of seconds where every
    # process here runs about 1.6x slower come and go on a shared machine).
    b_first, b_last = _windows(bare.model_ms, n)
    rows.append(
        Figure(
            f"  control: bare's model_turn duration, {last} / {first}",
            statistics.median(b_last) / statistics.median(b_first),
            None,
            "x",
        )
    )
    rows.append(Figure("largest continue-as-new input", ours.largest_carry / 1024, 512, "KiB"))
    rows.append(
        Figure("worker CPU per turn, ours / bare", ours.worker_cpu / bare.worker_cpu, 1.2, "x")
    )
    server = (
        ours.server_cpu / bare.server_cpu
        if ours.server_cpu is not None and bare.server_cpu
        else None
    )
    rows.append(Figure("server CPU per turn, ours / bare", server, 1.1, "x"))
    rows.append(
        Figure("history bytes per turn, ours / bare", ours.total_bytes / bare.total_bytes, 1.5, "x")
    )
    return rows


@dataclass
class Figure:
    """One figure of one round (`None`: not measured here) and its goal (`None`: a control)."""

    name: str
    value: float | None
    goal: float | None
    unit: str


def report(rounds: Sequence[tuple[Measured, Measured, Sequence[Measured]]], size: int) -> None:
    """Print each figure (the median over the rounds) beside its goal, then the raw numbers."""
    n = rounds[0][0].turns
    each = [_figures(ours, bare, extra) for ours, bare, extra in rounds]
    shown_rounds = "one round" if len(rounds) == 1 else f"median of {len(rounds)} rounds"
    print(
        f"\nOne conversation of {n} tool turns with {size}-byte outputs, dev server, "
        f"{shown_rounds}\n"
    )
    print(f"{'figure':<76} {'measured':>10} {'goal':>10}")
    print("-" * 106)
    for k, figure in enumerate(each[0]):
        values = [v for r in each if (v := r[k].value) is not None]
        value = statistics.median(values) if values else None
        unit, goal = figure.unit, figure.goal
        shown = "n/a" if value is None else f"{value:.2f}"
        verdict = "not measured" if value is None else _verdict(value, goal)
        shown_goal = "" if goal is None else f"<= {goal:g}{unit}"
        print(f"{figure.name:<76} {shown:>9}{unit:<1} {shown_goal:>10}  {verdict}")
        if len(rounds) > 1:
            print(
                " " * 8
                + "rounds: "
                + ", ".join("n/a" if v is None else f"{v:.2f}" for v in (r[k].value for r in each))
            )
    print("\nraw figures")
    for index, (ours, bare, extra) in enumerate(rounds, 1):
        if len(rounds) > 1:
            print(f" round {index}")
        for m in (ours, *extra, bare):
            b_first, b_last = _windows([float(b) for b in m.turn_bytes], n)
            t_first, t_last = _windows(m.model_ms, n)
            server = "n/a" if m.server_cpu is None else f"{m.server_cpu / n * 1000:.2f} ms"
            print(
                f"  {m.label:<17} {m.seconds:7.1f} s, {m.runs} run(s), "
                f"{m.total_bytes / 1e6:.2f} MB history ({m.total_bytes / n:,.0f} B/turn), "
                f"bytes/turn {statistics.fmean(b_first):,.0f} -> {statistics.fmean(b_last):,.0f}, "
                f"model.turn median {statistics.median(t_first):.1f} -> "
                f"{statistics.median(t_last):.1f} ms, "
                f"worker CPU {m.worker_cpu / n * 1000:.2f} ms/turn, server CPU {server}/turn, "
                f"largest carry {m.largest_carry / 1024:.0f} KiB"
                + ("" if m.queries is None else f", {m.queries} transcript queries")
            )
            spread = _window_medians(m.model_ms)
            print(
                f"  {'':<17} model.turn medians of each {WINDOW} turns: "
                f"fastest {min(spread):.1f}, median {statistics.median(spread):.1f}, "
                f"slowest {max(spread):.1f} ms"
            )


async def main(turns: int, size: int, full_reads: bool, rounds: int) -> None:
    """Start a dev server, run the conversations one after the other, print the report."""
    if turns < 2 * WINDOW:
        raise SystemExit(f"--turns must be at least {2 * WINDOW}")
    if rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    measured: list[tuple[Measured, Measured, Sequence[Measured]]] = []
    async with DevServer(headless=True, dynamic_config=DEFAULT_DYNAMIC_CONFIG) as server:
        for index in range(rounds):
            # Bare goes first in every other round, so a host that slows down or
            # speeds up over a round favours neither side.
            bare = await run_bare(server, turns, size) if index % 2 else None
            ours = await run_ours(server, turns, size)
            extra = [await run_ours(server, turns, size, full_reads=True)] if full_reads else []
            if bare is None:
                bare = await run_bare(server, turns, size)
            measured.append((ours, bare, extra))
    report(measured, size)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000, help="model turns calling echo")
    parser.add_argument("--size", type=int, default=5000, help="bytes of each tool output")
    parser.add_argument(
        "--full-reads", action="store_true", help="also run with the transcript cache off"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="ours and bare alternately, this many times"
    )
    args: Any = parser.parse_args()
    asyncio.run(main(args.turns, args.size, args.full_reads, args.rounds))
