"""Toolkits and a scripted model shared by the durable-loop tests.

Importable by worker subprocesses too (`PYTHONPATH=tests`), so a worker killed
with SIGKILL and its replacement run the same code. Tools append what they do
to a JSON-lines ledger (`DT_TEST_LEDGER`, a file path) so tests can count runs
and idempotency keys across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError

from durable_tools import (
    AssistantMessage,
    Emit,
    RetryPolicy,
    ToolCall,
    ToolContext,
    Toolkit,
    UserMessage,
    agent_tool,
    finish_tool,
    handoff_tool,
    interaction_tool,
    pause_tool,
    sleep_tool,
    tool,
)
from durable_tools.conversation import AgentConfig
from durable_tools.models.base import ModelRequest
from durable_tools.models.streaming import text_delta
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import Usage

LEDGER_ENV = "DT_TEST_LEDGER"


def record(event: dict[str, Any]) -> None:
    path = os.environ.get(LEDGER_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@tool(annotations={"read_only": True, "idempotent": True})
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temp_c": 21}


@tool(needs_approval=True)
async def refund(order: str, amount: int, ctx: ToolContext) -> str:
    """Refund an order (needs a person's approval).

    Args:
        order: Order id.
        amount: Amount in cents.
    """
    record({"tool": "refund", "call_id": ctx.call_id, "key": ctx.idempotency_key})
    return f"refunded {amount} on {order}"


@tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05, maximum_interval=0.1))
async def flaky(ctx: ToolContext) -> str:
    """Always fails; exhausts its retries."""
    record({"tool": "flaky", "attempt": ctx.attempt})
    raise ConnectionError("upstream unavailable")


@tool(retry=1)
async def boom() -> str:
    """Raises at once."""
    raise ValueError("bad state")


@tool(retry=1)
async def big(n_bytes: int) -> str:
    """Returns `n_bytes` of text.

    Args:
        n_bytes: Size of the result.
    """
    return "x" * n_bytes


@tool(retry=RetryPolicy(max_attempts=5, initial_interval=0.2, maximum_interval=1.0), timeout=30)
async def slow(seconds: float, ctx: ToolContext) -> str:
    """Sleeps, recording each attempt's start.

    Args:
        seconds: How long.
    """
    record(
        {
            "tool": "slow",
            "call_id": ctx.call_id,
            "key": ctx.idempotency_key,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
        }
    )
    await asyncio.sleep(seconds)
    record({"tool": "slow", "call_id": ctx.call_id, "done": True, "pid": os.getpid()})
    return f"slept {seconds}"


@tool(
    retry=RetryPolicy(max_attempts=5, initial_interval=0.2, maximum_interval=1.0),
    timeout=30,
    heartbeat_timeout=2,
)
async def slow_heartbeat(seconds: float, emit: Emit, ctx: ToolContext) -> str:
    """Sleeps while emitting progress (heartbeats), recording each attempt's start.

    With a 2 s heartbeat timeout, an attempt whose worker dies is retried about
    2 s later instead of after the 30 s start-to-close timeout.

    Args:
        seconds: How long.
    """
    record(
        {
            "tool": "slow_heartbeat",
            "call_id": ctx.call_id,
            "key": ctx.idempotency_key,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
        }
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        emit({"left": round(left, 2)})
        await asyncio.sleep(min(0.25, left))
    record({"tool": "slow_heartbeat", "call_id": ctx.call_id, "done": True, "pid": os.getpid()})
    return f"slept {seconds}"


@tool(retry=1)
async def echo(size: int, turn: int) -> str:
    """Returns `size` bytes of text (for long-conversation tests).

    Args:
        size: Bytes.
        turn: Turn number, echoed.
    """
    return f"{turn}:" + "y" * size


ask = interaction_tool(
    "ask",
    description="Ask the customer a yes/no question.",
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
    answer={"type": "string", "enum": ["yes", "no"]},
)

ask_date = interaction_tool(
    "ask_date",
    description="Ask the customer for a date.",
    parameters={"type": "object", "properties": {"question": {"type": "string"}}},
    answer={"type": "string", "format": "date"},
)

TOOLKIT = Toolkit(
    get_weather,
    refund,
    flaky,
    boom,
    big,
    slow,
    slow_heartbeat,
    echo,
    ask,
    ask_date,
    sleep_tool(),
    pause_tool(),
    pause_tool("hold", max_seconds=2),
    finish_tool(),
    handoff_tool(["specialist"]),
    label="tests",
)


# Tools declared `local=True`: each call runs as a Temporal local activity.


@tool(local=True, timeout=5)
async def lookup_local(city: str, ctx: ToolContext) -> dict[str, Any]:
    """Look a city up (a local activity).

    Args:
        city: City name.
    """
    record({"tool": "lookup_local", "key": ctx.idempotency_key, "attempt": ctx.attempt})
    return {"city": city, "temp_c": 19}


@tool(local=True, timeout=5, retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
async def twice_failing_local(ctx: ToolContext) -> str:
    """Fails its first two attempts, then answers (a local activity)."""
    record({"tool": "twice_failing_local", "attempt": ctx.attempt})
    if ctx.attempt < 3:
        raise ConnectionError(f"attempt {ctx.attempt} failed")
    return f"ok on attempt {ctx.attempt}"


@tool(local=True, timeout=5, retry=RetryPolicy(max_attempts=2, initial_interval=0.05))
async def failing_local() -> str:
    """Always raises; exhausts its two attempts (a local activity)."""
    raise LookupError("no such record")


@tool(local=True, timeout=1, retry=1)
async def stuck_local(seconds: float) -> str:
    """Sleeps past its 1 s timeout (a local activity).

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "woke"


@tool(timeout=1, retry=1)
async def stuck_remote(seconds: float) -> str:
    """`stuck_local` as an ordinary activity (1 s timeout), to compare failures.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "woke"


@tool(local=True, timeout=5)
async def big_local(n_bytes: int) -> str:
    """Returns `n_bytes` of text (a local activity).

    Args:
        n_bytes: Size of the result.
    """
    return "x" * n_bytes


@tool(local=True, timeout=5, needs_approval=True)
async def approved_local(order: str, ctx: ToolContext) -> str:
    """Reads an order once a person approves (a local activity).

    Args:
        order: Order id.
    """
    record({"tool": "approved_local", "key": ctx.idempotency_key, "attempt": ctx.attempt})
    return f"order {order} read"


@tool(local=True, timeout=30, retry=RetryPolicy(max_attempts=5, initial_interval=0.2))
async def slow_local(seconds: float, emit: Emit, ctx: ToolContext) -> str:
    """Sleeps, emitting progress, recording each attempt's start (a local activity).

    Args:
        seconds: How long.
    """
    record(
        {
            "tool": "slow_local",
            "key": ctx.idempotency_key,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
        }
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        emit({"left": round(left, 2)})  # no heartbeat, no event: a local activity
        await asyncio.sleep(min(0.25, left))
    record({"tool": "slow_local", "key": ctx.idempotency_key, "done": True, "pid": os.getpid()})
    return f"slept {seconds}"


LOCAL_TOOLKIT = Toolkit(
    lookup_local,
    twice_failing_local,
    failing_local,
    stuck_local,
    stuck_remote,
    big_local,
    approved_local,
    slow_local,
    get_weather,
    finish_tool(),
    label="local",
)


def _last_user(request: ModelRequest) -> tuple[int, str]:
    for i in range(len(request.transcript) - 1, -1, -1):
        item = request.transcript[i]
        if isinstance(item, UserMessage):
            return i, item.text
    return -1, ""


def directed(request: ModelRequest) -> AssistantMessage:
    """A model steered by the last user message, written as JSON.

    * `{"turns": [[[id, tool, args], ...], ...]}`: the k-th model turn after
      the message makes the k-th list of calls; then it answers "done".
    * `{"loop": n, "size": bytes}`: n turns each calling `echo`, then "done".
    * anything else: answers "echo: <text>".

    Asked for a summary (a context policy's), it answers how much it read.
    """
    if request.purpose == "summary":
        return AssistantMessage(text=f"summary of {len(_last_user(request)[1])} characters")
    index, text = _last_user(request)
    k = sum(1 for item in request.transcript[index + 1 :] if isinstance(item, AssistantMessage))
    try:
        spec = json.loads(text)
    except ValueError:
        return AssistantMessage(text=f"echo: {text}")
    if isinstance(spec, dict) and "turns" in spec:
        turns = spec["turns"]
        if k < len(turns):
            calls = tuple(
                ToolCall(
                    call_id=c[0],
                    name=c[1],
                    arguments=c[2] if isinstance(c[2], str) else json.dumps(c[2]),
                )
                for c in turns[k]
            )
            return AssistantMessage(text="", tool_calls=calls)
        return AssistantMessage(text=f"done ({request.model})")
    if isinstance(spec, dict) and "loop" in spec:
        if k < spec["loop"]:
            args = json.dumps({"size": spec.get("size", 5000), "turn": k})
            return AssistantMessage(
                tool_calls=(ToolCall(call_id=f"loop-{k}", name="echo", arguments=args),)
            )
        return AssistantMessage(text="done")
    return AssistantMessage(text=f"echo: {text}")


async def slow_model(request: ModelRequest) -> AssistantMessage:
    """A model whose request takes as many seconds as the last user message says.

    Records each attempt's start and end with its process id in the ledger.
    """
    seconds = float(_last_user(request)[1])
    record({"model": "slow", "turn": request.turn, "pid": os.getpid()})
    await asyncio.sleep(seconds)
    record({"model": "slow", "turn": request.turn, "done": True, "pid": os.getpid()})
    return AssistantMessage(text=f"slow answer after {seconds:g} s")


_FAILED_ONCE: set[str] = set()


def fails_once(request: ModelRequest) -> AssistantMessage:
    """Fails its first request of each conversation (non-retryable), then answers "back"."""
    if request.workflow_id not in _FAILED_ONCE:
        _FAILED_ONCE.add(request.workflow_id)
        raise ApplicationError(
            "the model is down for maintenance", type="ProviderBadRequest", non_retryable=True
        )
    return AssistantMessage(text="back")


async def streamed_directed(request: ModelRequest) -> AssistantMessage:
    """`directed`, its text streamed word by word (`text_delta`) as provider adapters do."""
    message = directed(request)
    words = message.text.split(" ")
    for i, word in enumerate(words):
        text_delta(word if i == len(words) - 1 else word + " ")
        await asyncio.sleep(0.05)
    return message


METERED_USAGE = Usage(input_tokens=300, output_tokens=100, cached_input_tokens=100)
"""What every call of the `metered` model reports: 400 tokens."""


def metered(request: ModelRequest) -> AssistantMessage:
    """`directed`, each call reporting `METERED_USAGE` (for budgets)."""
    return directed(request).model_copy(update={"usage": METERED_USAGE})


MODELS = {
    "directed": ScriptedModel(directed),
    "metered": ScriptedModel(metered),
    "streamed-directed": ScriptedModel(streamed_directed),
    "fails-once": ScriptedModel(fails_once),
    "specialist-model": ScriptedModel(directed),
    "slow-model": ScriptedModel(slow_model),
}
# An agent whose toolkit runs another agent as a tool (workflows/sub_agents.py).
DESK = Toolkit(
    get_weather,
    agent_tool("researcher", description="Research a question; give the whole question."),
    finish_tool(),
    label="desk",
)
TOOLKITS = {"tests": TOOLKIT, "local": LOCAL_TOOLKIT, "desk": DESK}
AGENT = AgentConfig(name="main", model="directed", toolkit="tests")
LOCAL_AGENT = AgentConfig(name="main", model="directed", toolkit="local")
SPECIALIST = AgentConfig(
    name="specialist",
    model="specialist-model",
    toolkit="tests",
    instructions="You are the specialist.",
)


def turns(*calls: list[tuple[str, str, Any]]) -> str:
    """Encode a directed script: each argument is one turn's list of (id, tool, args)."""
    return json.dumps({"turns": [[list(c) for c in turn] for turn in calls]})


MCP_LOG_ENV = "DT_TEST_MCP_LOG"
"""When set, worker subprocesses also serve tests/mcp/mcp_test_server.py as
`notes` over stdio, logging to this file (heartbeat timeout 3 s)."""

MCP_STATE_KEY_ENV = "DT_TEST_MCP_STATE_KEY"
"""When set with `MCP_LOG_ENV`, the test server seals its `requestState` with
this key (`--state-key`), so a server process started by another worker
accepts the state an earlier one sealed."""


MCP_URL_ENV = "DT_TEST_MCP_URL"
"""When set, worker subprocesses serve the MCP test server already running
at this streamable-HTTP URL as `notes` (its bearer token in the environment
variable `DT_TEST_MCP_TOKEN`): a server that outlives a worker killed mid-task."""


def _mcp_servers_from_environment() -> list[Any]:
    from durable_tools.mcp import McpServerConfig

    if url := os.environ.get(MCP_URL_ENV):
        return [
            McpServerConfig(
                name="notes",
                url=url,
                token_env="DT_TEST_MCP_TOKEN",
                heartbeat_timeout=3,
                handshake_timeout=5,
                call_timeout=2,
                trust_annotations=True,
            )
        ]
    log = os.environ.get(MCP_LOG_ENV)
    if not log:
        return []
    import sys

    server = Path(__file__).parent / "mcp" / "mcp_test_server.py"
    return [
        McpServerConfig(
            name="notes",
            command=sys.executable,
            args=[str(server), "stdio", "--log", log]
            + (["--state-key", key] if (key := os.environ.get(MCP_STATE_KEY_ENV)) else []),
            heartbeat_timeout=3,
            trust_annotations=True,  # no approval; its writing tools stay at-most-once
        )
    ]


async def run_worker_forever(
    address: str, namespace: str, task_queue: str, sticky_timeout: float | None = None
) -> None:
    """Entry point of worker subprocesses (see tests that SIGKILL workers).

    `sticky_timeout` (seconds; SDK default 10 s) bounds how long the workflow's
    next task waits on the sticky queue of a worker that died before it goes
    to the task queue where a replacement worker sees it.
    """
    from datetime import timedelta

    from temporalio.client import Client
    from temporalio.worker import Worker

    from durable_tools.worker.plugin import DurableToolsPlugin

    plugin = DurableToolsPlugin(
        toolkits=TOOLKITS, models=MODELS, mcp_servers=_mcp_servers_from_environment()
    )
    client = await Client.connect(address, namespace=namespace, plugins=[plugin])
    options: dict[str, Any] = {}
    if sticky_timeout is not None:
        options["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=sticky_timeout)
    async with Worker(client, task_queue=task_queue, **options):
        print("worker-ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    import sys

    # python tests/agent_support.py ADDRESS NAMESPACE TASK_QUEUE [STICKY_TIMEOUT_SECONDS]
    sticky = float(sys.argv[4]) if len(sys.argv) > 4 else None
    asyncio.run(run_worker_forever(sys.argv[1], sys.argv[2], sys.argv[3], sticky))
