"""The application CLI tests serve: `agent_support`'s toolkit and scripted models.

Worker subprocesses import it as `cli_app:app` (`PYTHONPATH` holds `tests` and
`tests/worker`); `directed` plays a script written in the user message. The
`cli` toolkit adds a tool whose retries are slow enough for `run` to see;
`weather` has one read-only tool, for the `test` model (which calls every tool).
`settings-echo` answers with the settings its request carried, as JSON.
`agents_app` declares one agent, `support` (the `directed` model, the
`weather` toolkit, instructions naming `{customer_name}`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent_support import MODELS, TOOLKIT, get_weather, slow_heartbeat

from durable_tools import AssistantMessage, RetryPolicy, ToolContext, Toolkit, tool
from durable_tools.agents import Agent, AgentOverrides
from durable_tools.models.base import ModelRequest
from durable_tools.models.streaming import text_delta
from durable_tools.testing import ScriptedModel, last_user_text
from durable_tools.tools import Emit
from durable_tools.worker import App


@tool(retry=RetryPolicy(max_attempts=3, initial_interval=1.0, maximum_interval=1.0))
async def unsteady(ctx: ToolContext) -> str:
    """Fails its first two attempts, then succeeds."""
    if ctx.attempt < 3:
        raise ConnectionError(f"upstream flaked on attempt {ctx.attempt}")
    return f"ok on attempt {ctx.attempt}"


@tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.5, maximum_interval=0.5))
async def fetch(key: str, ctx: ToolContext) -> str:
    """Fetch a key: `slow` takes 3 s, `bad` fails its first attempt.

    Args:
        key: The key.
    """
    if key == "slow":
        await asyncio.sleep(3)
    if key == "bad" and ctx.attempt == 1:
        raise ConnectionError(f"connection reset fetching {key}")
    return f"got {key}"


@tool
async def count(to: int, emit: Emit, ctx: ToolContext) -> str:
    """Count to `to`, one step each 0.25 s, emitting `{"call": ..., "at": i}` progress.

    Args:
        to: Where to stop.
    """
    for i in range(1, to + 1):
        emit({"call": ctx.call_id, "at": i})
        await asyncio.sleep(0.25)
    return f"counted to {to}"


kit = Toolkit(unsteady, slow_heartbeat, fetch, count, label="cli")
weather = Toolkit(get_weather, label="weather")


class GatedStreamer:
    """Streams half its answer, waits (up to 30 s) for the file the message names, then the rest."""

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        gate = Path(last_user_text(request))
        text_delta("before the gate;")
        for _ in range(300):
            if gate.exists():
                break
            await asyncio.sleep(0.1)
        text_delta(" after it")
        return AssistantMessage(text="before the gate; after it")


def settings_echo(request: ModelRequest) -> AssistantMessage:
    return AssistantMessage(text=json.dumps(request.settings, sort_keys=True))


app = App(
    toolkits={"tests": TOOLKIT, "cli": kit, "weather": weather},
    models={
        **MODELS,
        "settings-echo": ScriptedModel(settings_echo),
        "gated": GatedStreamer(),
    },
)
agents_app = App(
    toolkits={"weather": weather},
    models=MODELS,
    agents={
        "support": Agent(
            model="directed",
            toolkit="weather",
            instructions="You help {customer_name}.",
            allow=AgentOverrides(variables=["customer_name"]),
        )
    },
)
