"""History growth: the durable loop versus the naive loop, turn by turn.

Peers record the whole transcript as the model activity's input on every turn,
so the history grows with the square of the conversation. durable-tools'
model activity reads the transcript through a query instead, so a turn adds
the same bytes whatever the conversation's length (DESIGN.md, "history
growth"). This runs the same conversation both ways on an embedded Temporal
dev server and prints the history size after every `--every` turns.

The conversation: each turn the model calls `echo`, which returns `--size`
bytes; after `--turns` turns it answers "done". Continue-as-new is disabled,
also the server's suggestion (raised to 1 GB / 1M events by dynamic config),
so all growth shows in one run. The sizes are those of the fetched history
events as serialized protobuf, summed up to the end of each sampled turn.

Usage:
    python bench/history_growth.py              # 100 turns of 5 KB
    python bench/history_growth.py --turns 50   # a quicker run

The naive history of N turns of S bytes is about S * N^2 / 2 (100 x 5 KB:
~25 MB); Temporal terminates a run at 50 MB, and the model activity's input
is refused over 2 MiB (~400 turns of 5 KB), so keep N * S below that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from durable_tools import AssistantMessage, ToolCall, Toolkit, tool
from durable_tools.activities.activity_base import MODEL_TURN_ACTIVITY
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import ToolCallOutput
from durable_tools.worker.dev_server import DEFAULT_DYNAMIC_CONFIG, DevServer
from durable_tools.worker.plugin import DurableToolsPlugin

NO_SUGGESTION = {
    **DEFAULT_DYNAMIC_CONFIG,
    "limit.historySize.suggestContinueAsNew": 1_000_000_000,
    "limit.historyCount.suggestContinueAsNew": 1_000_000,
}


@tool(retry=1)
async def echo(size: int, turn: int) -> str:
    """Returns `size` bytes of text.

    Args:
        size: Bytes.
        turn: Turn number, echoed.
    """
    return f"{turn}:" + "y" * size


def looping(turns: int, size: int) -> ScriptedModel:
    """A model that calls `echo` once per turn, `turns` times, then says "done"."""

    def script(request: ModelRequest) -> AssistantMessage:
        k = sum(1 for item in request.transcript if isinstance(item, ToolCallOutput))
        if k < turns:
            args = json.dumps({"size": size, "turn": k})
            return AssistantMessage(
                tool_calls=(ToolCall(call_id=f"c{k}", name="echo", arguments=args),)
            )
        return AssistantMessage(text="done")

    return ScriptedModel(script)


@dataclass
class Run:
    """One conversation's history, sampled at turn boundaries."""

    label: str
    seconds: float
    status: str
    runs: int
    total_bytes: int
    total_events: int
    bytes_at: dict[int, int]  # model turns completed -> history bytes so far
    events_at: dict[int, int]


def _sample(events: list[Any], every: int, turns: int) -> tuple[dict[int, int], dict[int, int]]:
    """History bytes/events up to the start of each model turn k+1 (k = 0, every, ...)."""
    bytes_at: dict[int, int] = {}
    events_at: dict[int, int] = {}
    total, started = 0, 0
    for n, event in enumerate(events):
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name
            == MODEL_TURN_ACTIVITY
        ):
            if started % every == 0 and started <= turns:
                bytes_at[started], events_at[started] = total, n
            started += 1
        total += len(event.SerializeToString())
    if turns % every == 0 and turns not in bytes_at:
        bytes_at[turns], events_at[turns] = total, len(events)
    return bytes_at, events_at


async def converse(
    client: Client, task_queue: str, label: str, turns: int, size: int, every: int, naive: bool
) -> Run:
    """Run one conversation of `turns` echo turns to its end and measure its history."""
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"history-growth-{label}-{uuid.uuid4()}"
    started = time.monotonic()
    handle = await conversations.start(
        workflow_id,
        agent=AgentConfig(model="looping", toolkit="bench"),
        message="go",
        options=ConversationOptions(
            continue_as_new_after_turns=None,
            max_model_turns=turns + 10,
            idle_timeout=0.5,
            search_attributes=False,
            transcript_in_activity_input=naive,
        ),
    )
    status = "completed"
    try:
        await handle.result()
    except Exception as exc:  # terminated by the server: report, do not fail
        status = f"failed: {type(exc).__name__}: {exc}"
    seconds = time.monotonic() - started
    description = await handle.describe()
    if description.status != WorkflowExecutionStatus.COMPLETED:
        status = f"{description.status.name if description.status else '?'} ({status})"
    runs = (await conversations.status(workflow_id)).runs
    history = await handle.fetch_history()
    bytes_at, events_at = _sample(list(history.events), every, turns)
    return Run(
        label=label,
        seconds=seconds,
        status=status,
        runs=runs,
        total_bytes=sum(len(e.SerializeToString()) for e in history.events),
        total_events=len(history.events),
        bytes_at=bytes_at,
        events_at=events_at,
    )


def _mb(n: int) -> str:
    return f"{n / 1_000_000:9.3f}"


def _per_turn(run: Run, lo: int, hi: int) -> float:
    return (run.bytes_at[hi] - run.bytes_at[lo]) / (hi - lo)


def report(ours: Run, naive: Run, turns: int, size: int, every: int) -> None:
    """Print the table and the per-turn comparison."""
    print(f"\nHistory of one run, {turns} turns, each with a {size}-byte tool output")
    print("(bytes: serialized protobuf of the history events so far; MB = 10^6 bytes)\n")
    print(f"{'turns':>6} | {'ours MB':>9} {'events':>7} | {'naive MB':>9} {'events':>7} | ratio")
    print("-" * 58)
    for k in sorted(set(ours.bytes_at) & set(naive.bytes_at)):
        a, b = ours.bytes_at[k], naive.bytes_at[k]
        ratio = f"{b / a:5.1f}" if a else "    -"
        print(
            f"{k:>6} | {_mb(a)} {ours.events_at[k]:>7} | {_mb(b)} {naive.events_at[k]:>7} | {ratio}"
        )
    print("-" * 58)
    print(
        f"{'end':>6} | {_mb(ours.total_bytes)} {ours.total_events:>7} | "
        f"{_mb(naive.total_bytes)} {naive.total_events:>7} | "
        f"{naive.total_bytes / ours.total_bytes:5.1f}"
    )
    first, last = every, max(k for k in ours.bytes_at if k in naive.bytes_at)
    print(f"\nbytes added per turn    turns 1-{first:<6}  turns {last - every + 1}-{last}")
    for run in (ours, naive):
        print(
            f"  {run.label:<20} {_per_turn(run, 0, first):>12,.0f}  "
            f"{_per_turn(run, last - every, last):>12,.0f}"
        )
    print(
        f"\nnaive / ours at {turns} turns: {naive.total_bytes / ours.total_bytes:.1f}x "
        f"the bytes ({_mb(naive.total_bytes).strip()} MB vs {_mb(ours.total_bytes).strip()} MB)"
    )
    for run in (ours, naive):
        print(
            f"  {run.label:<20} {run.status}, {run.runs} run(s), {run.total_events} events, "
            f"{run.seconds:.1f} s"
        )


async def main(turns: int, size: int, every: int) -> None:
    """Start a dev server and a worker, run both conversations, print the report."""
    plugin = DurableToolsPlugin(
        toolkits={"bench": Toolkit(echo, label="bench")},
        models={"looping": looping(turns, size)},
    )
    async with DevServer(headless=True, dynamic_config=NO_SUGGESTION) as server:
        client = await Client.connect(server.address, plugins=[plugin])
        task_queue = f"history-growth-{uuid.uuid4()}"
        async with Worker(client, task_queue=task_queue):
            ours = await converse(client, task_queue, "query (ours)", turns, size, every, False)
            naive = await converse(client, task_queue, "input (naive)", turns, size, every, True)
    report(ours, naive, turns, size, every)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="model turns calling echo")
    parser.add_argument("--size", type=int, default=5000, help="bytes of each tool output")
    parser.add_argument("--every", type=int, default=10, help="sample every this many turns")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.size, args.every))
