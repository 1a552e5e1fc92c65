"""What the event stream costs in history: the same conversation, followed and not.

Runs one conversation of `--turns` turns (each turn the model calls `echo`
twice, then answers "done") on an embedded Temporal dev server, twice: once
with nobody reading its event stream, once with a `Conversations.events`
subscriber reading it live. Prints the history events and bytes of each and
their ratio (one run; this machine is shared and noisy).

Usage:
    python bench/event_stream_cost.py            # 10 turns
    python bench/event_stream_cost.py --turns 3
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
from durable_tools.conversation import AgentConfig, ConversationOptions, ModelRequest
from durable_tools.events import ConversationEvent
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin


@tool(retry=1)
async def echo(n: int) -> str:
    """Echo a number.

    Args:
        n: The number.
    """
    return f"echo {n}"


def model_for(turns: int):  # noqa: ANN201
    def play(request: ModelRequest) -> AssistantMessage:
        k = sum(1 for i in request.transcript if isinstance(i, AssistantMessage))
        if k >= turns:
            return AssistantMessage(text="done")
        calls = tuple(
            ToolCall(call_id=f"t{k}-{j}", name="echo", arguments=json.dumps({"n": j}))
            for j in range(2)
        )
        return AssistantMessage(tool_calls=calls)

    return play


async def run_one(client: Client, queue: str, turns: int, follow: bool) -> tuple[int, int, int]:
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
    return len(history.events), size, len(seen)


async def main(turns: int) -> None:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=shutil.which("temporal")
        or str(Path(sys.executable).parent / "temporal"),
        dev_server_log_level="error",
    )
    try:
        plugin = DurableToolsPlugin(
            toolkits={"bench": Toolkit(echo, label="bench")},
            models={"bench": ScriptedModel(model_for(turns))},
        )
        client = Client(**{**env.client.config(), "plugins": [plugin]})
        queue = f"bench-{uuid.uuid4()}"
        async with Worker(client, task_queue=queue):
            plain = await run_one(client, queue, turns, follow=False)
            followed = await run_one(client, queue, turns, follow=True)
    finally:
        await env.shutdown()
    print(f"{turns} turns x 2 tool calls")
    print(f"  not followed: {plain[0]} events, {plain[1]} bytes")
    print(f"  followed:     {followed[0]} events, {followed[1]} bytes ({followed[2]} events read)")
    print(f"  ratio: {followed[0] / plain[0]:.2f}x events, {followed[1] / plain[1]:.2f}x bytes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10)
    asyncio.run(main(parser.parse_args().turns))
