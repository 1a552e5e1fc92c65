"""What the event stream costs in history: the same conversation, followed and not.

Runs one conversation of `--turns` turns (each turn the model calls `echo`
twice, then answers "done") on an embedded Temporal dev server, twice: once
with nobody reading its event stream, once with a `Conversations.events`
subscriber reading it live. Prints the history events and bytes of each,
per turn, the publish signals activities sent, and the ratios (one run;
this machine is shared and noisy).

`--scenario` picks what the activities do:

- `plain` (default): quick tool calls and a model that does not stream:
  activities publish nothing;
- `slow`: each `echo` runs `--tool-seconds` (1.5) emitting progress every
  0.1 s: `tool_attempt_started` after `STARTED_DELAY`, then progress at most
  every `PROGRESS_INTERVAL`;
- `streamed`: the model streams each turn's text in 20 pieces over 1 s
  (`model_text_delta` batches at most every `TEXT_DELTA_INTERVAL`).

Usage:
    python bench/event_stream_cost.py            # 10 turns, plain
    python bench/event_stream_cost.py --turns 3 --scenario streamed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools import AssistantMessage, ToolCall, Toolkit, tool
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.events import ConversationEvent
from durable_tools.models.base import ModelRequest
from durable_tools.models.streaming import text_delta
from durable_tools.testing import ScriptedModel
from durable_tools.tools import Emit
from durable_tools.worker.plugin import DurableToolsPlugin

TOOL_SECONDS = [0.0]


@tool(retry=1)
async def echo(n: int, emit: Emit) -> str:
    """Echo a number (after `TOOL_SECONDS[0]`, emitting progress every 0.1 s).

    Args:
        n: The number.
    """
    steps = round(TOOL_SECONDS[0] / 0.1)
    for i in range(steps):
        emit({"step": i, "of": steps})
        await asyncio.sleep(0.1)
    return f"echo {n}"


def model_for(turns: int, streamed: bool):  # noqa: ANN201
    async def play(request: ModelRequest) -> AssistantMessage:
        k = sum(1 for i in request.transcript if isinstance(i, AssistantMessage))
        text = f"turn {k}: " + "word " * 19 if streamed else ""
        if streamed:
            for piece in text.split(" ")[:-1]:
                text_delta(piece + " ")
                await asyncio.sleep(0.05)
        if k >= turns:
            return AssistantMessage(text=text or "done")
        calls = tuple(
            ToolCall(call_id=f"t{k}-{j}", name="echo", arguments=json.dumps({"n": j}))
            for j in range(2)
        )
        return AssistantMessage(text=text, tool_calls=calls)

    return play


async def run_one(
    client: Client, queue: str, turns: int, follow: bool
) -> tuple[int, int, int, int]:
    conversations = Conversations(client, task_queue=queue)
    workflow_id = f"bench-events-{uuid.uuid4()}"
    seen: list[ConversationEvent] = []

    async def reader() -> None:
        async for event in conversations.events(workflow_id):
            seen.append(event)

    await conversations.start(
        workflow_id,
        agent=AgentConfig(name="main", model="bench", toolkit="bench"),
        message="go",
        options=ConversationOptions(search_attributes=False, idle_timeout=0.5),
    )
    task = asyncio.create_task(reader()) if follow else None
    await conversations.result(workflow_id)
    if task is not None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    size = sum(e.ByteSize() for e in history.events)
    signals = sum(
        1
        for e in history.events
        if e.workflow_execution_signaled_event_attributes.signal_name
        == "__temporal_workflow_stream_publish"
    )
    return len(history.events), size, len(seen), signals


async def main(turns: int, scenario: str, tool_seconds: float) -> None:
    TOOL_SECONDS[0] = tool_seconds if scenario == "slow" else 0.0
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=shutil.which("temporal")
        or str(Path(sys.executable).parent / "temporal"),
        dev_server_log_level="error",
    )
    try:
        plugin = DurableToolsPlugin(
            toolkits={"bench": Toolkit(echo, label="bench")},
            models={"bench": ScriptedModel(model_for(turns, streamed=scenario == "streamed"))},
        )
        client = Client(**{**env.client.config(), "plugins": [plugin]})
        queue = f"bench-{uuid.uuid4()}"
        async with Worker(client, task_queue=queue):
            plain = await run_one(client, queue, turns, follow=False)
            followed = await run_one(client, queue, turns, follow=True)
    finally:
        await env.shutdown()
    print(f"{turns} turns x 2 tool calls, scenario {scenario}")
    for name, (events, size, read, signals) in (("not followed", plain), ("followed", followed)):
        print(
            f"  {name + ':':<13} {events} events, {size} bytes "
            f"({events / turns:.1f} events, {size / turns:.0f} bytes per turn; "
            f"{signals} publish signals from activities; {read} events read)"
        )
    print(f"  ratio: {followed[0] / plain[0]:.2f}x events, {followed[1] / plain[1]:.2f}x bytes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--scenario", choices=["plain", "slow", "streamed"], default="plain")
    parser.add_argument("--tool-seconds", type=float, default=1.5)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.scenario, args.tool_seconds))
