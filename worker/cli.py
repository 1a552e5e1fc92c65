"""The `durable-tools` command line: a dev server, a worker, and conversations by id.

```sh
durable-tools dev-server                                   # Temporal on localhost:7233
durable-tools worker --app examples.support:app            # serve toolkits and models
durable-tools start ticket-42 --model scripted --toolkit support --message "Refund A-1001"
durable-tools pending ticket-42                            # what waits for a person
durable-tools approve ticket-42 call_2 --by ana            # validated update by default
durable-tools deny ticket-42 call_2 --reason "over limit" --signal   # durable signal
durable-tools answer ticket-42 call_1 '{"order_id": "A-1001"}'
durable-tools history ticket-42
```

Connection options read `DURABLE_TOOLS_ADDRESS` / `TEMPORAL_ADDRESS`,
`DURABLE_TOOLS_NAMESPACE` / `TEMPORAL_NAMESPACE` and `DURABLE_TOOLS_TASK_QUEUE`.
Bad input and failures print one line to stderr and exit non-zero: 2 for
input the command could not use (invalid JSON, a bad `--app`), 1 for
everything else (unknown conversation, a rejected decision, no server, no
answer within `--timeout` seconds).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from durable_tools.client import Conversations
from durable_tools.conversation import (
    AgentConfig,
    ConversationOptions,
)
from durable_tools.errors import ConfigurationError, DecisionRejected
from worker.render import render_pending, render_status, render_transcript

__all__ = ["CliError", "app"]

T = TypeVar("T")

app = typer.Typer(
    name="durable-tools",
    help="Durable tool execution for LLM agents on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_out = Console(highlight=False)

EXIT_FAILURE = 1
"""Exit code of a failure (unknown conversation, rejected decision, no server)."""

EXIT_BAD_INPUT = 2
"""Exit code of input the command could not use (the same code click uses)."""


class CliError(Exception):
    """A failure reported as one line on stderr.

    Args:
        message: The line (without the `error: ` prefix).
        code: The exit code (default 1).
    """

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------- options

Address = Annotated[
    str,
    typer.Option(
        "--address",
        envvar=["DURABLE_TOOLS_ADDRESS", "TEMPORAL_ADDRESS"],
        help="Temporal frontend host:port.",
    ),
]
Namespace = Annotated[
    str,
    typer.Option(
        "--namespace",
        "-n",
        envvar=["DURABLE_TOOLS_NAMESPACE", "TEMPORAL_NAMESPACE"],
        help="Temporal namespace.",
    ),
]
TaskQueue = Annotated[
    str,
    typer.Option(
        "--task-queue", envvar="DURABLE_TOOLS_TASK_QUEUE", help="Task queue the worker polls."
    ),
]
Timeout = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds to wait for Temporal and the worker."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WorkflowId = Annotated[str, typer.Argument(help="The conversation's workflow id.")]
CallId = Annotated[str, typer.Argument(help="The tool call's id (see `pending`).")]
ArgumentsHash = Annotated[
    str | None,
    typer.Option(
        "--hash",
        help="The arguments hash from `pending`; with --signal, decide while no worker runs.",
    ),
]
UseSignal = Annotated[
    bool,
    typer.Option(
        "--signal",
        help="Send the durable signal (stored even while no worker runs) instead of the "
        "validated update; a rejection is then only visible in `pending`.",
    ),
]

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "agents"
DEFAULT_TIMEOUT = 15.0
_FOREVER = 100 * 365 * 86400.0  # long-running commands: bounded only by a signal


_SIGNAL_SENT = "signal sent; if it fails its checks, `pending` lists it as rejected"


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in a container
        return ""


# ------------------------------------------------------------------ errors


def _fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    line = " ".join(message.split())  # one line, whatever the message holds
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    raise typer.Exit(code)


_NEEDS_WORKER = (
    "queries and updates need a worker polling the conversation's task queue: start "
    "`durable-tools worker`, raise --timeout, or decide with --signal, which needs no worker"
)


def _connect_problem(exc: BaseException) -> str:
    found = re.search(r'message: "([^"]+)"', str(exc))
    if found:
        return found.group(1).lower()
    return str(exc).removeprefix("Failed client connect: ")


def _run(
    main: Callable[[], Awaitable[T]],
    *,
    address: str,
    namespace: str,
    timeout: float,
    workflow_id: str | None = None,
    waiting_for: str = _NEEDS_WORKER,
) -> T:
    """Run `main()` bounded by `timeout` seconds, turning failures into one line."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await main()

    conversation = f"conversation {workflow_id!r}" if workflow_id else "the conversation"
    try:
        return asyncio.run(bounded())
    except CliError as exc:
        _fail(str(exc), exc.code)
    except DecisionRejected as exc:
        _fail(f"rejected: {exc}")
    except TimeoutError:
        _fail(f"no answer within {timeout:g} s from Temporal at {address} ({waiting_for})")
    except RPCError as exc:
        _fail(_rpc_message(exc, conversation=conversation, address=address, namespace=namespace))
    except WorkflowUpdateFailedError as exc:
        _fail(f"the update failed: {exc.cause or exc}")
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
        _fail(f"the query on {conversation} failed: {exc}")
    except WorkflowFailureError as exc:
        _fail(f"{conversation} failed: {exc.cause or exc}")
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except RuntimeError as exc:
        if "Failed client connect" in str(exc):
            _fail(
                f"cannot connect to Temporal at {address} ({_connect_problem(exc)}); "
                "start one with `durable-tools dev-server` or pass --address"
            )
        _fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:
        _fail(f"{type(exc).__name__}: {exc}")


def _on_conversation(
    workflow_id: str,
    use: Callable[[Conversations], Awaitable[T]],
    *,
    address: str,
    namespace: str,
    timeout: float,
) -> T:
    """Connect, run `use(conversations)` for one conversation, failures as one line."""

    async def main() -> T:
        return await use(await _conversations(address, namespace, DEFAULT_TASK_QUEUE))

    return _run(
        main, address=address, namespace=namespace, timeout=timeout, workflow_id=workflow_id
    )


def _rpc_message(exc: RPCError, *, conversation: str, address: str, namespace: str) -> str:
    text = exc.message
    lowered = text.lower()
    if exc.status == RPCStatusCode.NOT_FOUND:
        if "namespace" in lowered:
            return f"namespace {namespace!r} does not exist on {address}"
        if "completed" in lowered or "closed" in lowered:
            return f"{conversation} has already ended ({text})"
        return f"{conversation} does not exist in namespace {namespace!r} on {address}"
    if exc.status == RPCStatusCode.INVALID_ARGUMENT and "search attribute" in lowered:
        return f"{text} (register them: see docs/operations.md, or pass --no-search-attributes)"
    return f"Temporal refused the request ({exc.status.name}): {text}"


async def _conversations(address: str, namespace: str, task_queue: str) -> Conversations:
    client = await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter
    )
    return Conversations(client, task_queue=task_queue)


# ---------------------------------------------------------------- commands


@app.command("dev-server")
def dev_server_command(
    ip: Annotated[str, typer.Option(help="Address to bind (0.0.0.0 in a container).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Frontend gRPC port.")] = 7233,
    ui_port: Annotated[int | None, typer.Option(help="Web UI port (default: port + 1000).")] = None,
    headless: Annotated[bool, typer.Option(help="Run without the Web UI.")] = False,
    db_filename: Annotated[
        str | None, typer.Option(help="SQLite file to keep state across restarts.")
    ] = None,
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="Extra namespaces to create.")
    ] = None,
) -> None:
    """Run the embedded Temporal dev server in the foreground (Ctrl-C stops it)."""
    from worker.dev_server import DevServer, DevServerError

    async def main() -> None:
        server = DevServer(
            ip=ip,
            port=port,
            ui_port=None if headless else (ui_port or port + 1000),
            headless=headless,
            db_filename=db_filename,
            namespaces=namespace or (),
            log_path="/dev/stderr",
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            async with server:
                _out.print(f"Temporal dev server on [bold]{server.address}[/]")
                if server.ui_url:
                    _out.print(f"Web UI: {server.ui_url}")
                _out.print(
                    f"search attributes: {', '.join(server.search_attributes)}; "
                    f"persistence: {db_filename or 'in memory'}; Ctrl-C stops it"
                )
                exited = asyncio.create_task(server.wait())
                stopped = asyncio.create_task(stop.wait())
                await asyncio.wait({exited, stopped}, return_when=asyncio.FIRST_COMPLETED)
                stopped.cancel()
                # Ctrl-C in a terminal reaches the server too; it exits with 0.
                if exited.done() and exited.result() != 0:
                    raise CliError(f"the dev server exited with code {exited.result()}")
                exited.cancel()
        except DevServerError as exc:
            raise CliError(str(exc).splitlines()[0]) from exc
        _out.print("dev server stopped")

    _run(main, address=f"{ip}:{port}", namespace="default", timeout=_FOREVER)


@app.command("worker")
def worker_command(
    app_spec: Annotated[
        str,
        typer.Option(
            "--app", envvar="DURABLE_TOOLS_APP", help="The application, 'module:attribute'."
        ),
    ],
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    graceful_shutdown: Annotated[
        float,
        typer.Option(help="Seconds running activities may finish after SIGTERM."),
    ] = 30.0,
    max_concurrent_activities: Annotated[
        int | None, typer.Option(help="Most activities at once (default: the SDK's).")
    ] = None,
) -> None:
    """Run a worker for an application until SIGTERM or Ctrl-C (graceful shutdown)."""
    from worker.runner import load_app, run_worker

    try:
        application = load_app(app_spec)
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)

    def ready(_: object) -> None:
        _out.print(
            f"worker polling task queue [bold]{escape(task_queue)}[/] on {escape(address)} "
            f"(namespace {escape(namespace)}); toolkits: {', '.join(application.toolkits)}; "
            f"models: {', '.join(application.models)}"
        )

    async def main() -> None:
        await run_worker(
            address,
            namespace,
            task_queue,
            application.toolkits,
            application.models,
            graceful_shutdown_timeout=graceful_shutdown,
            max_concurrent_activities=max_concurrent_activities,
            on_ready=ready,
        )
        _out.print("worker stopped")

    _run(main, address=address, namespace=namespace, timeout=_FOREVER)


@app.command("start")
def start_command(
    workflow_id: WorkflowId,
    model: Annotated[str, typer.Option(help="Model adapter name registered on the worker.")],
    toolkit: Annotated[str, typer.Option(help="Toolkit name registered on the worker.")],
    message: Annotated[str | None, typer.Option(help="The first user message.")] = None,
    instructions: Annotated[str, typer.Option(help="System instructions.")] = "",
    agent: Annotated[str, typer.Option(help="Name of the agent configuration.")] = "default",
    approval_deadline: Annotated[
        float | None, typer.Option(help="Seconds an approval may wait (default 7 days).")
    ] = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds to wait for the next message before ending (default 7 days)."),
    ] = None,
    search_attributes: Annotated[
        bool,
        typer.Option(help="Upsert DurableToolsPending* (they must be registered)."),
    ] = True,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Start a conversation (or attach to the running one with this id)."""
    overrides: dict[str, Any] = {"search_attributes": search_attributes}
    if approval_deadline is not None:
        overrides["approval_deadline"] = approval_deadline
    if idle_timeout is not None:
        overrides["idle_timeout"] = idle_timeout
    try:
        config = AgentConfig(name=agent, instructions=instructions, model=model, toolkit=toolkit)
        options = ConversationOptions(**overrides)
    except ValueError as exc:
        _fail(f"invalid option: {exc}", EXIT_BAD_INPUT)

    async def main() -> str:
        conversations = await _conversations(address, namespace, task_queue)
        handle = await conversations.start(
            workflow_id, agent=config, message=message, options=options
        )
        return handle.result_run_id or handle.run_id or ""

    run_id = _run(
        main, address=address, namespace=namespace, timeout=timeout, workflow_id=workflow_id
    )
    _out.print(
        f"conversation [bold]{escape(workflow_id)}[/] runs on task queue {escape(task_queue)} "
        f"(run {run_id}); see it with `durable-tools pending {escape(workflow_id)}`"
    )


@app.command("send")
def send_command(
    workflow_id: WorkflowId,
    text: Annotated[str, typer.Argument(help="The message.")],
    by: Annotated[str, typer.Option("--by", help="Who sends it.")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Send a user message (a durable signal; no worker needs to run)."""
    _on_conversation(
        workflow_id,
        lambda c: c.send(workflow_id, text, sent_by=by or _whoami()),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    _out.print(f"sent to {escape(workflow_id)}")


@app.command("pending")
def pending_command(
    workflow_id: WorkflowId,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show what the conversation waits for: approvals, questions, a pause."""
    state = _on_conversation(
        workflow_id,
        lambda c: c.pending(workflow_id),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    if as_json:
        print(state.model_dump_json(indent=2))
    else:
        _out.print(render_pending(state))


def _decide(
    workflow_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    reason: str,
    arguments_hash: str | None,
    signal: bool,
    address: str,
    namespace: str,
    timeout: float,
) -> None:
    async def main() -> str:
        conversations = await _conversations(address, namespace, DEFAULT_TASK_QUEUE)
        digest, summary = arguments_hash, call_id
        if digest is None:
            pending = await conversations.pending(workflow_id)
            match = next((a for a in pending.approvals if a.call_id == call_id), None)
            if match is None:
                waiting = ", ".join(a.call_id for a in pending.approvals) or "none"
                raise DecisionRejected(
                    f"call {call_id!r} of {workflow_id!r} is not waiting for a decision "
                    f"(waiting: {waiting})"
                )
            digest, summary = match.arguments_hash, match.summary
        await conversations.decide(
            workflow_id,
            call_id,
            approved=approved,
            arguments_hash=digest,
            decided_by=by or _whoami(),
            reason=reason,
            wait=not signal,
        )
        return summary

    summary = _run(
        main, address=address, namespace=namespace, timeout=timeout, workflow_id=workflow_id
    )
    verb = "approved" if approved else "denied"
    how = _SIGNAL_SENT if signal else "accepted"
    _out.print(f"{verb} {escape(summary)} in {escape(workflow_id)} ({how})")


@app.command("approve")
def approve_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    by: Annotated[str, typer.Option("--by", help="Who decides (default: your login).")] = "",
    reason: Annotated[str, typer.Option(help="Why (recorded with the decision).")] = "",
    arguments_hash: ArgumentsHash = None,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Approve a pending tool call; it runs next."""
    _decide(
        workflow_id,
        call_id,
        approved=True,
        by=by,
        reason=reason,
        arguments_hash=arguments_hash,
        signal=signal,
        address=address,
        namespace=namespace,
        timeout=timeout,
    )


@app.command("deny")
def deny_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    reason: Annotated[str, typer.Option(help="Why; the model reads it.")],
    by: Annotated[str, typer.Option("--by", help="Who decides (default: your login).")] = "",
    arguments_hash: ArgumentsHash = None,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Deny a pending tool call; the model sees `denied` with the reason."""
    _decide(
        workflow_id,
        call_id,
        approved=False,
        by=by,
        reason=reason,
        arguments_hash=arguments_hash,
        signal=signal,
        address=address,
        namespace=namespace,
        timeout=timeout,
    )


@app.command("answer")
def answer_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    value: Annotated[str, typer.Argument(metavar="JSON", help="The answer, as JSON.")],
    by: Annotated[str, typer.Option("--by", help="Who answers (default: your login).")] = "",
    arguments_hash: ArgumentsHash = None,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Answer a pending question (interaction tool call) with a JSON value."""
    try:
        answer = json.loads(value)
    except json.JSONDecodeError as exc:
        _fail(f"the answer is not valid JSON: {exc}", EXIT_BAD_INPUT)

    _on_conversation(
        workflow_id,
        lambda c: c.answer(
            workflow_id,
            call_id,
            answer,
            arguments_hash=arguments_hash,
            answered_by=by or _whoami(),
            wait=not signal,
        ),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    how = _SIGNAL_SENT if signal else "accepted"
    _out.print(f"answered {escape(call_id)} in {escape(workflow_id)} ({how})")


@app.command("history")
def history_command(
    workflow_id: WorkflowId,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show the conversation's transcript (messages, tool calls, tool outputs)."""
    items = _on_conversation(
        workflow_id,
        lambda c: c.history(workflow_id),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    if as_json:
        print(json.dumps([item.model_dump(mode="json") for item in items], indent=2))
    else:
        _out.print(render_transcript(items))


@app.command("status")
def status_command(
    workflow_id: WorkflowId,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show what the conversation is doing (state, turns, pending counts)."""
    status = _on_conversation(
        workflow_id,
        lambda c: c.status(workflow_id),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    if as_json:
        print(status.model_dump_json(indent=2))
    else:
        _out.print(render_status(workflow_id, status))


@app.command("result")
def result_command(
    workflow_id: WorkflowId,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Wait (up to --timeout seconds) for the conversation to end; print its result as JSON."""
    result = _on_conversation(
        workflow_id,
        lambda c: c.result(workflow_id),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    print(result.model_dump_json(indent=2))


if __name__ == "__main__":
    app()
