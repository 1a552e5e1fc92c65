"""The `durable-tools` command line: a dev server, a worker, and conversations by id.

```sh
durable-tools dev --toolkit examples.support:kit           # server + UI + worker, one process
durable-tools worker --toolkit examples.support:kit        # a worker for an existing server
durable-tools run --model test "What is the weather in Oslo?"   # start it and watch it
durable-tools run --detach --id ticket-42 "Refund A-1001"  # start it, return at once
durable-tools run --agent support --var customer_name=Ana "My order broke"  # a declared agent
durable-tools pending                                      # every conversation waiting for a person
durable-tools pending ticket-42                            # what one waits for
durable-tools approve ticket-42 call_2 --as ana            # validated update by default
durable-tools deny ticket-42 call_2 --reason "over limit" --signal   # durable signal
durable-tools answer ticket-42 call_1 '{"order_id": "A-1001"}'
durable-tools send ticket-42 "any news?"
durable-tools history ticket-42
```

Connection options read `DURABLE_TOOLS_ADDRESS` / `TEMPORAL_ADDRESS` (default
`localhost:7233`), `DURABLE_TOOLS_NAMESPACE` / `TEMPORAL_NAMESPACE` (default
`default`) and `DURABLE_TOOLS_TASK_QUEUE` (default `agents`).
Bad input and failures print one line to stderr, never a traceback, and exit
non-zero: 2 for input the command could not use (invalid JSON, a toolkit or
app spec that does not import, a malformed model spec), 1 for everything
else (unknown conversation or call, a decision already made, no server, no
answer within `--timeout` seconds), 130 when Ctrl-C interrupts a command
(`run` then says the conversation goes on).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import getpass
import importlib
import json
import os
import re
import shlex
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

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
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.service import RPCError, RPCStatusCode

from durable_tools.client import Conversations
from durable_tools.codec import data_converter, load_codec
from durable_tools.conversation import (
    AgentConfig,
    ConversationOptions,
    PendingApproval,
    PendingInteraction,
)
from durable_tools.errors import ConfigurationError, DecisionRejected, RetryRejected, StorageError
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage, storage_from_options
from durable_tools.worker.exits import exit_process
from durable_tools.worker.extras import missing_extra, require_extra
from durable_tools.worker.follow import Commands, Followed, Follower, LostServer
from durable_tools.worker.render import (
    PendingConversation,
    render_pending,
    render_pending_conversations,
    render_status,
    render_transcript,
    render_unanswered,
)

if TYPE_CHECKING:
    from durable_tools.worker.runner import App

__all__ = ["CliError", "app"]

T = TypeVar("T")


class _Typer(typer.Typer):
    """A Typer app that exits without a traceback and before interpreter finalization.

    An unexpected exception still ends as one line on stderr. Leaving through
    `exit_process` (output flushed, then `os._exit`) avoids temporalio's Rust
    core aborting a finalizing interpreter (`Fatal Python error:
    PyGILState_Release`, exit code 134; sdk-python issue #300; see
    `durable_tools.worker.exits`), seen here after a failed connect and
    after a worker's SIGTERM.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        code: int = 0
        try:
            super().__call__(*args, **kwargs)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                sys.stderr.write(f"{exc.code}\n")
        except ConfigurationError as exc:  # e.g. MissingExtra before a command's `_run`
            sys.stderr.write(f"error: {' '.join(str(exc).split())}\n")
            code = EXIT_BAD_INPUT
        except Exception as exc:  # a bug: report it without the traceback
            sys.stderr.write(f"error: {' '.join(f'{type(exc).__name__}: {exc}'.split())}\n")
            code = EXIT_FAILURE
        except KeyboardInterrupt:
            sys.stderr.write("error: interrupted\n")
            code = 130
        exit_process(code)


app = _Typer(
    name="durable-tools",
    help="Durable tool execution for LLM agents on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_out = Console(highlight=False)


@dataclass
class _Globals:
    codec_spec: str | None = None
    storage_dir: Path | None = None
    storage_s3_bucket: str | None = None
    storage_threshold: int | None = None
    max_payload_bytes: int | None = None
    storage: PayloadStorage | None = None


_globals = _Globals()


@app.callback()
def _global_options(
    codec: Annotated[
        str | None,
        typer.Option(
            "--codec",
            envvar="DURABLE_TOOLS_CODEC",
            help="Payload codec 'module:attr' (e.g. encryption) for every command; "
            "see docs/operations.md.",
        ),
    ] = None,
    storage_dir: Annotated[
        Path | None,
        typer.Option(
            "--storage-dir",
            envvar="DURABLE_TOOLS_STORAGE_DIR",
            help="Store payloads over --storage-threshold in this directory instead of "
            "history (Temporal External Storage; every worker and client needs the same); "
            "see docs/operations.md. `dev` defaults to .durable-tools/payloads.",
        ),
    ] = None,
    storage_s3_bucket: Annotated[
        str | None,
        typer.Option(
            "--storage-s3-bucket",
            envvar="DURABLE_TOOLS_STORAGE_S3_BUCKET",
            help="Store large payloads in this S3 bucket instead (the s3 extra; AWS "
            "configuration from the environment).",
        ),
    ] = None,
    storage_threshold: Annotated[
        int | None,
        typer.Option(
            "--storage-threshold",
            envvar="DURABLE_TOOLS_STORAGE_THRESHOLD",
            min=0,
            help="Payloads of at least this many bytes are stored externally (default 262144).",
        ),
    ] = None,
    max_payload_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-payload-bytes",
            envvar="DURABLE_TOOLS_MAX_PAYLOAD_BYTES",
            min=1,
            help="With external storage: the largest tool result or arguments "
            "(default 67108864); larger results become output_too_large.",
        ),
    ] = None,
) -> None:
    """Durable tool execution for LLM agents on Temporal."""
    _globals.codec_spec = codec
    _globals.storage_dir = storage_dir
    _globals.storage_s3_bucket = storage_s3_bucket
    _globals.storage_threshold = storage_threshold
    _globals.max_payload_bytes = max_payload_bytes
    _globals.storage = None  # built on first use from these options


def _codec() -> PayloadCodec | None:
    """The `--codec` payload codec, loaded on first use (ConfigurationError if bad)."""
    return load_codec(_globals.codec_spec) if _globals.codec_spec else None


def _storage() -> PayloadStorage | None:
    """The `--storage-dir` / `--storage-s3-bucket` external storage, built once (or `None`).

    Without either option, `DEV_STORAGE_DIRECTORY` when it exists: the storage
    `durable-tools dev` started in this directory uses.
    """
    given = _globals.storage_dir is not None or _globals.storage_s3_bucket is not None
    if not given and DEV_STORAGE_DIRECTORY.is_dir():
        _globals.storage_dir = DEV_STORAGE_DIRECTORY
    if _globals.storage is None:
        _globals.storage = storage_from_options(
            directory=_globals.storage_dir,
            s3_bucket=_globals.storage_s3_bucket,
            threshold=_globals.storage_threshold,
            max_payload_bytes=_globals.max_payload_bytes,
        )
    return _globals.storage


def _data_converter() -> DataConverter:
    """The data converter of every client the CLI connects: codec and storage options."""
    return data_converter(_codec(), storage=_storage())


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
        metavar="DIGEST",
        help="The call's digest as shown by `pending` (tool, call id, arguments); no "
        "confirmation, no lookup; with --signal, decide while no worker runs.",
    ),
]
AssumeYes = Annotated[
    bool,
    typer.Option(
        "--yes",
        "-y",
        help="For scripts: look the digest up with `pending` and send it without asking "
        "(says so). Without --yes or --hash the call is shown and you confirm.",
    ),
]
KeyEnv = Annotated[
    str | None,
    typer.Option(
        "--key-env",
        metavar="NAME",
        help="Sign the decision (HMAC-SHA256) with the base64 key in this environment variable.",
    ),
]
KeyId = Annotated[
    str, typer.Option("--key-id", help="The signing key's id, as the worker knows it.")
]
Groups = Annotated[
    list[str] | None,
    typer.Option(
        "--group",
        help="A group of the decider to assert in the signed decision (repeatable).",
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

ModelSettings = Annotated[
    list[str] | None,
    typer.Option(
        "--setting",
        help="A model setting, key=value (repeatable), sent as a request body field: the "
        'value is JSON when it parses (0.2, true, ["END"]), else a string '
        "(reasoning_effort=low).",
    ),
]

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "agents"
DEFAULT_TIMEOUT = 15.0
DEFAULT_INBOX_PORT = 8234
"""Port of the approval inbox (`durable-tools inbox`, `durable-tools dev`)."""
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
    except (DecisionRejected, RetryRejected) as exc:
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
    except StorageError as exc:
        _fail(str(exc))
    except RuntimeError as exc:
        if "Failed client connect" in str(exc):
            _fail(
                f"cannot connect to Temporal at {address} ({_connect_problem(exc)}); "
                "start one with `durable-tools dev` or pass --address"
            )
        if "TMPRL1105" in str(exc):  # the SDK's "external storage is not configured"
            _fail(
                f"{conversation} has payloads in external storage: give the worker's "
                "--storage-dir or --storage-s3-bucket (or DURABLE_TOOLS_STORAGE_DIR)"
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
    client = await Client.connect(address, namespace=namespace, data_converter=_data_converter())
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
    from durable_tools.worker.dev_server import DevServer, DevServerError

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


AppSpec = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="DURABLE_TOOLS_APP",
        help="An application with toolkits and models, 'module:attribute'.",
    ),
]
ToolkitSpecs = Annotated[
    list[str] | None,
    typer.Option(
        "--toolkit",
        help="A Toolkit object, 'module:attribute', served under that name; the first "
        "also as 'default'. Repeatable.",
    ),
]
McpConfig = Annotated[
    str | None,
    typer.Option(
        "--mcp-config",
        help="A TOML file of MCP servers ([servers.NAME] tables); their tools join every toolkit.",
    ),
]
ScriptsDir = Annotated[
    Path | None,
    typer.Option(
        "--scripts-dir",
        help="Directory scripted:FILE models are read under; paths outside it are refused "
        "(default: the app's scripts_dir, else the working directory).",
    ),
]
AgentName = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="An agent the worker declares (App(agents=...)); its model, toolkit and "
        "instructions come from the worker.",
    ),
]
Variables = Annotated[
    list[str] | None,
    typer.Option(
        "--var",
        help="A template variable of the agent's instructions, NAME=VALUE. Repeatable.",
    ),
]
GracefulShutdown = Annotated[
    float,
    typer.Option(help="Seconds running activities may finish after SIGTERM or Ctrl-C."),
]


def _served(app_spec: str | None, toolkit_specs: list[str] | None, mcp_config: str | None) -> App:
    """Load what a worker serves, or fail with one line and exit code 2."""
    from durable_tools.worker.toolkits import load_served

    try:
        return load_served(app_spec, toolkit_specs or [], mcp_config)
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


def _describe_served(served: App, *, allow_offline_models: bool) -> str:
    models = ", ".join(served.models) or "none registered (model specs are resolved by name)"
    mcp = ", ".join(server.name for server in served.mcp_servers) or "none"
    agents = ", ".join(served.agents) or "none declared (any configuration a client sends runs)"
    offline = "allowed" if allow_offline_models else "refused"
    return (
        f"agents: {agents}; toolkits: {', '.join(served.toolkits)}; models: {models}; "
        f"offline models (test, scripted:FILE): {offline}; MCP servers: {mcp}"
    )


def _variables(pairs: list[str] | None) -> dict[str, str]:
    """`--var NAME=VALUE` options as a mapping, or fail with one line (exit 2)."""
    found: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            _fail(f"invalid --var {pair!r}: use NAME=VALUE", EXIT_BAD_INPUT)
        found[name] = value
    return found


@app.command("worker")
def worker_command(
    app_spec: AppSpec = None,
    toolkit: ToolkitSpecs = None,
    mcp_config: McpConfig = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    graceful_shutdown: GracefulShutdown = 30.0,
    allow_offline_models: Annotated[
        bool,
        typer.Option(
            "--allow-offline-models",
            help="Let conversations use the offline models test and scripted:FILE "
            "(for staging and tests; a production worker refuses them).",
        ),
    ] = False,
    scripts_dir: ScriptsDir = None,
    max_concurrent_activities: Annotated[
        int | None, typer.Option(help="Most activities at once (default: the SDK's).")
    ] = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            envvar="DURABLE_TOOLS_DEPLOYMENT",
            help="Worker Deployment name (with --build-id): a versioned worker.",
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option(
            envvar="DURABLE_TOOLS_BUILD_ID", help="This worker's build id in --deployment."
        ),
    ] = None,
    search_attributes: Annotated[
        bool,
        typer.Option(
            help="Check at start that the namespace has DurableToolsPendingCount and "
            "DurableToolsPendingKinds; --no-search-attributes: run without them "
            "(conversations make no upserts; `pending` without an id cannot find them)."
        ),
    ] = True,
    health_file: Annotated[
        Path | None,
        typer.Option(
            envvar="DURABLE_TOOLS_HEALTH_FILE",
            help="A file kept fresh while the worker runs, for `durable-tools health`.",
        ),
    ] = None,
) -> None:
    """Run a worker for toolkits (and an app) until SIGTERM or Ctrl-C (graceful shutdown)."""
    from temporalio.common import WorkerDeploymentVersion

    from durable_tools.activities.decision_activities import decision_keys_from_environment
    from durable_tools.worker.runner import run_worker

    if (deployment is None) != (build_id is None):
        _fail("give --deployment and --build-id together (or neither)", EXIT_BAD_INPUT)
    version = (
        WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id)
        if deployment is not None and build_id is not None
        else None
    )
    served = _served(app_spec, toolkit, mcp_config)
    offline = allow_offline_models or served.allow_offline_models

    storage = _storage() or served.storage
    try:
        keys = (
            served.decision_keys
            if served.decision_keys is not None
            else decision_keys_from_environment()
        )
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    checked = (
        f"decisions checked with key(s) {', '.join(sorted(keys))}"
        if keys
        else "no decision keys (a call that needs a signed decision cannot be decided)"
    )

    def ready(_: object) -> None:
        versioned = f", version {version.deployment_name}:{version.build_id}" if version else ""
        _out.print(
            f"worker polling task queue [bold]{escape(task_queue)}[/] on {escape(address)} "
            f"(namespace {escape(namespace)}{escape(versioned)}); "
            f"{escape(_describe_served(served, allow_offline_models=offline))}; "
            f"{escape(checked)}",
            soft_wrap=True,
        )
        if storage is not None:
            _out.print(f"external storage: {escape(storage.describe())}", soft_wrap=True)

    async def main() -> None:
        await run_worker(
            address,
            namespace,
            task_queue,
            served.toolkits,
            served.models,
            mcp_servers=served.mcp_servers,
            deps=served.deps,
            decision_keys=keys,
            payload_codec=_codec() or served.payload_codec,
            storage=storage,
            graceful_shutdown_timeout=graceful_shutdown,
            max_concurrent_activities=max_concurrent_activities,
            deployment=version,
            agents=served.agents,
            context_strategies=served.context_strategies,
            tool_threads=served.tool_threads,
            allow_offline_models=offline,
            scripts_dir=scripts_dir or served.scripts_dir,
            on_ready=ready,
            search_attributes=search_attributes,
            health_file=health_file,
        )
        _out.print("worker stopped")

    _run(main, address=address, namespace=namespace, timeout=_FOREVER)


DEV_DIRECTORY = Path(".durable-tools")
"""Where `durable-tools dev` keeps its SQLite file and the server's log."""

DEV_STORAGE_DIRECTORY = DEV_DIRECTORY / "payloads"
"""Where `durable-tools dev` stores large payloads by default; the other commands
use it when it exists and no `--storage-dir` / `--storage-s3-bucket` is given."""


@app.command("dev")
def dev_command(
    app_spec: AppSpec = None,
    toolkit: ToolkitSpecs = None,
    mcp_config: McpConfig = None,
    ip: Annotated[str, typer.Option(help="Address to bind (0.0.0.0 in a container).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Frontend gRPC port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port.")] = 8233,
    db_filename: Annotated[
        Path, typer.Option(help="SQLite file; conversations survive restarts.")
    ] = DEV_DIRECTORY / "temporal.db",
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    graceful_shutdown: GracefulShutdown = 5.0,
    scripts_dir: ScriptsDir = None,
    inbox_port: Annotated[
        int, typer.Option(help="Port of the approval inbox (dev mode, 127.0.0.1); 0: no inbox.")
    ] = DEFAULT_INBOX_PORT,
) -> None:
    """Run a Temporal dev server (SQLite under .durable-tools/, Web UI) and a worker in one process.

    Ctrl-C or SIGTERM stops the worker (running tool calls get --graceful-shutdown
    seconds), then the server. The worker allows the offline models (test,
    scripted:FILE under --scripts-dir, default the working directory).
    """
    from durable_tools.worker.dev_server import DevServer, DevServerError
    from durable_tools.worker.runner import run_worker

    served = _served(app_spec, toolkit, mcp_config)
    if (
        _globals.storage_dir is None
        and _globals.storage_s3_bucket is None
        and served.storage is None
    ):
        # On by default in development, beside the server's SQLite file.
        _globals.storage_dir = db_filename.parent / "payloads"
    storage = _storage() or served.storage

    async def main() -> None:
        try:
            db_filename.parent.mkdir(parents=True, exist_ok=True)
            if storage is not None and isinstance(storage.driver, LocalFileStorageDriver):
                storage.driver.root.mkdir(parents=True, exist_ok=True)  # other commands find it
        except OSError as exc:
            raise CliError(f"cannot create {exc.filename}: {exc.strerror}") from exc
        server = DevServer(
            ip=ip,
            port=port,
            ui_port=ui_port,
            db_filename=db_filename,
            log_path=db_filename.with_suffix(".log"),
            # A terminal's Ctrl-C reaches only this process, which stops the
            # worker while the server still answers, then the server.
            new_session=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            async with server:
                _out.print(f"Temporal frontend: [bold]{server.address}[/]", soft_wrap=True)
                _out.print(f"Web UI: [bold]{server.ui_url}[/]", soft_wrap=True)
                # Before the worker: an inbox that cannot start (its port taken)
                # fails the command while nothing but the server runs. A worker
                # started first was left running against the stopped server and
                # `dev` never exited.
                inbox = await _dev_inbox(server.address, inbox_port, stop)
                worker = asyncio.create_task(
                    run_worker(
                        server.address,
                        DEFAULT_NAMESPACE,
                        task_queue,
                        served.toolkits,
                        served.models,
                        mcp_servers=served.mcp_servers,
                        deps=served.deps,
                        decision_keys=served.decision_keys,
                        payload_codec=_codec() or served.payload_codec,
                        storage=storage,
                        graceful_shutdown_timeout=graceful_shutdown,
                        handle_signals=False,
                        stop=stop,
                        agents=served.agents,
                        context_strategies=served.context_strategies,
                        tool_threads=served.tool_threads,
                        allow_offline_models=True,
                        scripts_dir=scripts_dir or served.scripts_dir,
                    )
                )
                _out.print(
                    f"persistence: {escape(str(db_filename))}; worker on task queue "
                    f"{escape(task_queue)}; "
                    f"{escape(_describe_served(served, allow_offline_models=True))}",
                    soft_wrap=True,
                )
                if storage is not None:
                    _out.print(f"external storage: {escape(storage.describe())}", soft_wrap=True)
                    if (
                        isinstance(storage.driver, LocalFileStorageDriver)
                        and DEV_STORAGE_DIRECTORY.resolve() != storage.driver.root.resolve()
                    ):
                        _out.print(
                            f"other commands need: --storage-dir "
                            f"{escape(shlex.quote(str(storage.driver.root)))}",
                            soft_wrap=True,
                        )
                local = port == 7233 and ip in ("127.0.0.1", "localhost", "0.0.0.0")
                hint = "" if local else f" --address {server.address}"
                if served.agents:  # a client must name one of them
                    hint += f" --agent {next(iter(served.agents))}"
                _out.print(
                    f"try: durable-tools run{hint} 'hello'   "
                    "(Ctrl-C stops the worker and the server)",
                    soft_wrap=True,
                )
                exited = asyncio.create_task(server.wait())
                await asyncio.wait({worker, exited}, return_when=asyncio.FIRST_COMPLETED)
                if exited.done():
                    stop.set()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(worker, graceful_shutdown + 10)
                    raise CliError(f"the dev server exited with code {exited.result()}")
                exited.cancel()
                await worker  # re-raises the worker's failure
                if inbox is not None:
                    await inbox
        except DevServerError as exc:
            raise CliError(str(exc).splitlines()[0]) from exc
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        _out.print("worker and dev server stopped")

    _run(main, address=f"{ip}:{port}", namespace=DEFAULT_NAMESPACE, timeout=_FOREVER)


async def _dev_inbox(address: str, port: int, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """Serve the inbox in dev mode beside the dev server; print its URL once it listens.

    Without the `inbox` extra, print one line naming it instead: the server
    and the worker run on.
    """
    if port == 0:
        return None
    missing = missing_extra("the approval inbox", "inbox")
    if missing is not None:
        _out.print(f"Inbox: not started; {missing}", soft_wrap=True, markup=False)
        return None
    from durable_tools.worker.inbox import build_auth, serve_inbox

    conversations = await _conversations(address, DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE)
    ready = asyncio.Event()

    def listening(url: str) -> None:
        _out.print(f"Inbox: {url}", soft_wrap=True, markup=False)
        ready.set()

    task = asyncio.create_task(
        serve_inbox(
            conversations,
            build_auth(host="127.0.0.1", dev_user=_whoami() or "dev"),
            host="127.0.0.1",
            port=port,
            stop=stop,
            on_ready=listening,
        )
    )
    # serve_inbox either listens (on_ready) or ends with the reason it cannot.
    listening_or_failed = asyncio.create_task(ready.wait())
    await asyncio.wait({task, listening_or_failed}, return_when=asyncio.FIRST_COMPLETED)
    listening_or_failed.cancel()
    if task.done():
        await task  # re-raises a bind failure
    return task


@app.command("inbox")
def inbox_command(
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    host: Annotated[
        str, typer.Option(help="Address to bind; dev mode binds only 127.0.0.1.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = DEFAULT_INBOX_PORT,
    dev_user: Annotated[
        str | None,
        typer.Option(
            "--dev-user",
            help="Dev mode: everyone reaching the inbox is this name (127.0.0.1 only). The "
            "default when no other authentication is given: your login name.",
        ),
    ] = None,
    trust_proxy_header: Annotated[
        bool,
        typer.Option(
            "--trust-proxy-header",
            help="Take the user (and groups) from headers a reverse proxy sets; only behind a "
            "proxy that authenticates and strips them from clients.",
        ),
    ] = False,
    user_header: Annotated[str, typer.Option(help="The proxy's user header.")] = (
        "X-Forwarded-User"
    ),
    groups_header: Annotated[str, typer.Option(help="The proxy's groups header.")] = (
        "X-Forwarded-Groups"
    ),
    tokens_file: Annotated[
        Path | None,
        typer.Option(
            "--tokens-file",
            help="Static tokens / basic auth, lines NAME:SECRET[:GROUPS] (SECRET may be "
            "sha256:HEX); else $DURABLE_TOOLS_INBOX_TOKENS.",
        ),
    ] = None,
    decision_key_file: Annotated[
        Path | None,
        typer.Option(
            "--decision-key-file",
            help="Sign decisions with the key in this file, KEY_ID:BASE64 (one of the worker's "
            "DURABLE_TOOLS_DECISION_KEYS); else $DURABLE_TOOLS_INBOX_DECISION_KEY; else unsigned.",
        ),
    ] = None,
) -> None:
    """Serve the approval inbox: a web page and an HTTP API for the people who decide."""
    require_extra("durable-tools inbox", "inbox")
    from durable_tools.worker.inbox import build_auth, serve_inbox
    from durable_tools.worker.inbox.server import (
        DECISION_KEY_ENV,
        TOKENS_ENV,
        parse_decision_key,
    )

    tokens_env = os.environ.get(TOKENS_ENV)
    if dev_user is None and not (trust_proxy_header or tokens_file or tokens_env):
        dev_user = _whoami() or "dev"
    try:
        auth = build_auth(
            host=host,
            dev_user=dev_user,
            trust_proxy_header=trust_proxy_header,
            user_header=user_header,
            groups_header=groups_header,
            tokens_file=tokens_file,
            tokens_env=tokens_env,
        )
        if decision_key_file is not None:
            try:
                key_text = decision_key_file.read_text(encoding="utf-8")
            except OSError as exc:
                problem = f"cannot read {decision_key_file}: {exc.strerror}"
                raise ConfigurationError(problem) from exc
            signing_key = parse_decision_key(key_text, source=str(decision_key_file))
        else:
            signing_key = parse_decision_key(os.environ.get(DECISION_KEY_ENV, ""))
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)

    async def main() -> None:
        conversations = await _conversations(address, namespace, DEFAULT_TASK_QUEUE)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        modes = ", ".join(type(a).__name__ for a in auth.chain)

        def ready(url: str) -> None:
            _out.print(f"Inbox: {url}", soft_wrap=True, markup=False)
            _out.print(
                f"Temporal at {address}, namespace {namespace}; authentication: {modes}; "
                f"decisions {'signed with key ' + signing_key[0] if signing_key else 'unsigned'}; "
                "Ctrl-C stops it",
                soft_wrap=True,
                markup=False,
            )

        await serve_inbox(
            conversations,
            auth,
            host=host,
            port=port,
            stop=stop,
            on_ready=ready,
            decision_key=signing_key,
        )
        _out.print("inbox stopped")

    _run(main, address=address, namespace=namespace, timeout=_FOREVER)


@app.command("start")
def start_command(
    workflow_id: WorkflowId,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model adapter name or spec; with --agent, one the agent allows "
            "(default: the agent's)."
        ),
    ] = None,
    toolkit: Annotated[
        str | None,
        typer.Option(help="Toolkit name on the worker (default: the agent's)."),
    ] = None,
    message: Annotated[str | None, typer.Option(help="The first user message.")] = None,
    instructions: Annotated[str, typer.Option(help="System instructions.")] = "",
    agent: Annotated[
        str,
        typer.Option(
            help="The agent: one the worker declares, or the name of this configuration "
            "on a worker that declares none (then give --model and --toolkit)."
        ),
    ] = "default",
    variables: Variables = None,
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
    setting: ModelSettings = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Start a conversation (or attach to the running one with this id)."""
    values = _variables(variables)
    overrides: dict[str, Any] = {"search_attributes": search_attributes}
    if approval_deadline is not None:
        overrides["approval_deadline"] = approval_deadline
    if idle_timeout is not None:
        overrides["idle_timeout"] = idle_timeout
    settings = _model_settings(setting)
    try:
        config = AgentConfig(
            name=agent,
            instructions=instructions,
            model=model or "",
            toolkit=toolkit or "",
            variables=values,
            settings=settings,
        )
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


def _model_settings(given: list[str] | None) -> dict[str, Any]:
    """`--setting key=value` options as settings, or fail with one line (exit 2)."""
    from durable_tools.models._settings import check_settings, parse_setting

    try:
        return check_settings(dict(parse_setting(t) for t in given or []), where="--setting")
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


def _check_model(spec: str) -> None:
    """Fail with one line (exit 2) on a `test` or `scripted:FILE` spec that cannot work.

    Only the offline specs are checked here (a malformed script file is
    reported before anything starts); names an `--app` registers and provider
    specs, which need the provider's SDK and key, are the worker's to resolve.
    """
    if spec != "test" and not spec.startswith("scripted:"):
        return
    try:
        registry = importlib.import_module("durable_tools.models.registry")
    except ModuleNotFoundError:  # no registry: the worker alone resolves the name
        return
    resolve: Callable[[str], object] | None = getattr(registry, "resolve_model", None)
    if resolve is None:
        return
    try:
        resolve(spec)
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


def _print_followed(followed: Followed, workflow_id: str, commands: Commands) -> None:
    if followed.outcome == "detached":
        _out.print(
            f"detached: conversation {escape(workflow_id)} goes on; follow it with "
            f"`{escape(commands('history', workflow_id))}` or "
            f"`{escape(commands('pending', workflow_id))}`",
            soft_wrap=True,
        )
        raise typer.Exit(130)
    if followed.outcome == "model_failed":
        _out.print(
            "the conversation waits: run the turn again with "
            f"`{escape(commands('retry', workflow_id))}`, send a new message with "
            f"`{escape(commands('send', workflow_id, 'MESSAGE'))}`, or cancel it",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILURE)
    if followed.outcome == "idle":
        _out.print(f"[bold]answer[/]: {escape(followed.answer)}", soft_wrap=True)
        _out.print(
            "the conversation waits for your next message: "
            f"`{escape(commands('send', workflow_id, 'MESSAGE'))}`",
            soft_wrap=True,
        )
        return
    result = followed.result
    assert result is not None  # outcome "ended"
    output = result.output
    shown = output if isinstance(output, str) else json.dumps(output, indent=2, default=str)
    label = "final answer" if result.status == "finished" else f"ended ({result.status})"
    _out.print(f"[bold]{label}[/]: {escape(shown)}", soft_wrap=True)
    if result.unanswered_messages:
        _out.print(
            f"[bold]unanswered[/] (sent after the model's last turn, never seen by it):\n"
            f"{escape(render_unanswered(result.unanswered_messages))}",
            soft_wrap=True,
        )


@app.command("run")
def run_command(
    prompt: Annotated[str, typer.Argument(help="The first user message.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Model the worker resolves: test, scripted:FILE, openai:MODEL, "
            "anthropic:MODEL, or a name an --app registers; with --agent, one the agent "
            "allows (default: the agent's; without --agent: test)."
        ),
    ] = None,
    toolkit: Annotated[
        str | None,
        typer.Option(
            help="Toolkit name on the worker (the first --toolkit is 'default'; "
            "with --agent: the agent's)."
        ),
    ] = None,
    agent: AgentName = None,
    variables: Variables = None,
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Workflow id (default: run-<random hex>).")
    ] = None,
    instructions: Annotated[str, typer.Option(help="System instructions.")] = "",
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Print the id and return at once.")
    ] = False,
    setting: ModelSettings = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.1, help="Seconds to wait for Temporal to start it."),
    ] = DEFAULT_TIMEOUT,
) -> None:
    """Start a conversation and show what happens until it ends (Ctrl-C detaches).

    Shows model text, tool calls starting and finishing, retries, progress,
    approvals and questions with the commands that decide them, and the final
    answer. When the model answers in text, the conversation waits for the next
    message (`send`); `run` shows the answer and returns.
    """
    values = _variables(variables)
    settings = _model_settings(setting)
    if agent is None:  # development mode: the whole configuration from here
        model = model or "test"
        toolkit = toolkit or "default"
    if model:
        _check_model(model)
    wf = workflow_id or f"run-{uuid.uuid4().hex[:12]}"
    config = AgentConfig(
        name=agent or "default",
        instructions=instructions,
        model=model or "",
        toolkit=toolkit or "",
        variables=values,
        settings=settings,
    )
    what = (
        f"agent {agent}" + (f", model {model}" if model else "")
        if agent
        else f"model {model}, toolkit {toolkit}"
    )
    commands = Commands(
        address=address,
        namespace=namespace,
        default_address=DEFAULT_ADDRESS,
        default_namespace=DEFAULT_NAMESPACE,
    )

    async def main() -> Followed | None:
        try:
            async with asyncio.timeout(timeout):
                conversations = await _conversations(address, namespace, task_queue)
                await conversations.start(wf, agent=config, message=prompt)
        except TimeoutError:
            raise CliError(
                f"no answer within {timeout:g} s from Temporal at {address} "
                f"(starting conversation {wf!r})"
            ) from None
        if detach:
            return None
        _out.print(
            f"conversation [bold]{escape(wf)}[/] started ({escape(what)}, task queue "
            f"{escape(task_queue)}); Ctrl-C detaches",
            soft_wrap=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        try:
            follower = Follower(
                conversations,
                wf,
                emit=lambda line: _out.print(line, soft_wrap=True),
                commands=commands,
            )
            return await follower.follow(stop)
        except LostServer as exc:
            raise CliError(
                f"{exc} at {address}; conversation {wf!r} goes on on the server: see it later "
                f"with `{commands('history', wf)}`"
            ) from exc
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    followed = _run(
        main,
        address=address,
        namespace=namespace,
        timeout=_FOREVER,
        workflow_id=wf,
    )
    if followed is None:
        _out.print(f"started conversation [bold]{escape(wf)}[/]", soft_wrap=True)
        for what, command in (
            ("watch it", "history"),
            ("what it waits for", "pending"),
            ("wait for its result", "result"),
        ):
            _out.print(f"  {what}: {escape(commands(command, wf))}", soft_wrap=True)
        return
    _print_followed(followed, wf, commands)


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


@app.command("retry")
def retry_command(
    workflow_id: WorkflowId,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Send the validated update (needs a worker) and fail at once if the "
            "conversation is not in state model_failed.",
        ),
    ] = False,
    by: Annotated[str, typer.Option("--by", help="Who asks.")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Run a failed model turn again (a conversation in state model_failed)."""
    _on_conversation(
        workflow_id,
        lambda c: c.retry(workflow_id, requested_by=by or _whoami(), wait=wait),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    _out.print(f"asked {escape(workflow_id)} to run its model turn again")


@app.command("resume")
def resume_command(
    workflow_id: WorkflowId,
    message: Annotated[
        str,
        typer.Option("--message", "-m", help="What the model reads as the pause's answer."),
    ] = "resumed",
    by: Annotated[str, typer.Option("--as", help="Who resumes (default: your login).")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Resume a paused conversation (the `pause` tool's call gets the message)."""
    _on_conversation(
        workflow_id,
        lambda c: c.resume(workflow_id, message, resumed_by=by or _whoami()),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    _out.print(f"resumed {escape(workflow_id)}")


@app.command("cancel")
def cancel_command(
    workflow_id: WorkflowId,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Cancel a conversation (open calls are answered cancelled or interrupted)."""
    _on_conversation(
        workflow_id,
        lambda c: c.cancel(workflow_id),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    _out.print(f"asked {escape(workflow_id)} to cancel")


@app.command("pending")
def pending_command(
    workflow_id: Annotated[
        str | None,
        typer.Argument(help="The conversation's workflow id (default: every conversation)."),
    ] = None,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show what a conversation waits for, or list every conversation waiting for a person."""
    if workflow_id is None:
        _pending_everywhere(as_json, address=address, namespace=namespace, timeout=timeout)
        return
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


PENDING_QUERY = (
    "(DurableToolsPendingCount > 0 OR DurableToolsPendingKinds = 'pause') "
    "AND ExecutionStatus = 'Running'"
)
"""Visibility query of `pending` without an id (the workflow upserts the attributes).

A pause is listed too: it waits for a person's `resume`, though no call is
counted in `DurableToolsPendingCount`.
"""


def _pending_everywhere(as_json: bool, *, address: str, namespace: str, timeout: float) -> None:
    from durable_tools.workflows.agent_workflow import PENDING_COUNT, PENDING_KINDS

    async def main() -> list[PendingConversation]:
        client = await Client.connect(
            address, namespace=namespace, data_converter=_data_converter()
        )
        found: list[PendingConversation] = []
        async for execution in client.list_workflows(PENDING_QUERY, limit=1000):
            attributes = execution.typed_search_attributes
            found.append(
                PendingConversation(
                    workflow_id=execution.id,
                    pending=attributes.get(PENDING_COUNT) or 0,
                    kinds=list(attributes.get(PENDING_KINDS) or []),
                    started=execution.start_time,
                    task_queue=execution.task_queue,
                )
            )
        return found

    found = _run(main, address=address, namespace=namespace, timeout=timeout)
    if as_json:
        print(json.dumps([asdict(f) for f in found], default=str, indent=2))
        return
    commands = Commands(address=address, namespace=namespace)
    _out.print(render_pending_conversations(found, commands), soft_wrap=True)


def _signing_key(key_env: str | None, key_id: str) -> tuple[str, bytes] | None:
    if key_env is None:
        return None
    if not key_id:
        _fail("--key-env needs --key-id (the id the worker knows the key by)", EXIT_BAD_INPUT)
    encoded = os.environ.get(key_env, "")
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        key = b""
    if not key:
        _fail(f"environment variable {key_env} holds no base64 key", EXIT_BAD_INPUT)
    return key_id, key


def _pending_call(
    workflow_id: str,
    call_id: str,
    *,
    interaction: bool,
    address: str,
    namespace: str,
    timeout: float,
) -> PendingApproval | PendingInteraction:
    """The pending approval or question `call_id`, or a one-line failure."""

    async def main() -> PendingApproval | PendingInteraction:
        conversations = await _conversations(address, namespace, DEFAULT_TASK_QUEUE)
        pending = await conversations.pending(workflow_id)
        waiting: Sequence[PendingApproval | PendingInteraction] = (
            pending.interactions if interaction else pending.approvals
        )
        match = next((w for w in waiting if w.call_id == call_id), None)
        if match is None:
            what = "an answer" if interaction else "a decision"
            ids = ", ".join(w.call_id for w in waiting) or "none"
            raise DecisionRejected(
                f"call {call_id!r} of {workflow_id!r} is not waiting for {what} (waiting: {ids})"
            )
        return match

    return _run(
        main, address=address, namespace=namespace, timeout=timeout, workflow_id=workflow_id
    )


def _digest_to_send(
    workflow_id: str,
    call_id: str,
    *,
    given: str | None,
    yes: bool,
    action: str,
    interaction: bool,
    address: str,
    namespace: str,
    timeout: float,
) -> tuple[str, str]:
    """The digest to send and the call's summary: given, looked up (`--yes`), or confirmed."""
    if given is not None:
        return given, call_id
    call = _pending_call(
        workflow_id,
        call_id,
        interaction=interaction,
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    summary = call.summary if isinstance(call, PendingApproval) else f"{call.tool} ({call_id})"
    if yes:
        _out.print(
            f"--yes: using the digest the worker reports for {escape(summary)} "
            f"without showing it for confirmation: {call.arguments_hash}",
            soft_wrap=True,
        )
        return call.arguments_hash, summary
    approvers = (
        ", ".join(call.approvers) if isinstance(call, PendingApproval) and call.approvers else ""
    )
    _out.print(
        f"call:      {escape(call_id)} in {escape(workflow_id)}\n"
        f"tool:      {escape(call.tool)}\n"
        f"arguments: {escape(call.arguments)}\n"
        f"summary:   {escape(summary)}\n"
        + (f"approvers: {escape(approvers)}\n" if approvers else "")
        + f"digest:    {call.arguments_hash}",
        soft_wrap=True,
    )
    try:
        confirmed = typer.confirm(f"{action} this call?", default=False)
    except typer.Abort:
        confirmed = False
    if not confirmed:
        _fail(
            "not confirmed; nothing was sent (for scripts pass --hash DIGEST, or --yes)",
            EXIT_BAD_INPUT,
        )
    return call.arguments_hash, summary


def _decide(
    workflow_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    reason: str,
    arguments_hash: str | None,
    yes: bool,
    sign_with: tuple[str, bytes] | None,
    groups: Sequence[str],
    signal: bool,
    address: str,
    namespace: str,
    timeout: float,
) -> None:
    digest, summary = _digest_to_send(
        workflow_id,
        call_id,
        given=arguments_hash,
        yes=yes,
        action="Approve" if approved else "Deny",
        interaction=False,
        address=address,
        namespace=namespace,
        timeout=timeout,
    )

    async def main() -> None:
        conversations = await _conversations(address, namespace, DEFAULT_TASK_QUEUE)
        await conversations.decide(
            workflow_id,
            call_id,
            approved=approved,
            arguments_hash=digest,
            decided_by=by or _whoami(),
            reason=reason,
            groups=groups,
            sign_with=sign_with,
            wait=not signal,
        )

    _run(main, address=address, namespace=namespace, timeout=timeout, workflow_id=workflow_id)
    verb = "approved" if approved else "denied"
    how = _SIGNAL_SENT if signal else "accepted"
    signed = f", signed with key {escape(sign_with[0])}" if sign_with else ""
    _out.print(f"{verb} {escape(summary)} in {escape(workflow_id)} ({how}{signed})")


@app.command("approve")
def approve_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    by: Annotated[
        str, typer.Option("--as", "--by", help="Who decides (default: your login).")
    ] = "",
    reason: Annotated[str, typer.Option(help="Why (recorded with the decision).")] = "",
    arguments_hash: ArgumentsHash = None,
    yes: AssumeYes = False,
    key_env: KeyEnv = None,
    key_id: KeyId = "",
    group: Groups = None,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Approve a pending tool call; it runs next.

    Shows the call (tool, arguments, summary, digest) and asks to confirm,
    unless `--hash DIGEST` (the digest shown earlier) or `--yes` is given.
    """
    _decide(
        workflow_id,
        call_id,
        approved=True,
        by=by,
        reason=reason,
        arguments_hash=arguments_hash,
        yes=yes,
        sign_with=_signing_key(key_env, key_id),
        groups=group or [],
        signal=signal,
        address=address,
        namespace=namespace,
        timeout=timeout,
    )


@app.command("deny")
def deny_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    reason: Annotated[str, typer.Option(help="Why; the model reads it.")] = "",
    by: Annotated[
        str, typer.Option("--as", "--by", help="Who decides (default: your login).")
    ] = "",
    arguments_hash: ArgumentsHash = None,
    yes: AssumeYes = False,
    key_env: KeyEnv = None,
    key_id: KeyId = "",
    group: Groups = None,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Deny a pending tool call; the model sees `denied` with the reason.

    Confirms like `approve` unless `--hash` or `--yes` is given.
    """
    _decide(
        workflow_id,
        call_id,
        approved=False,
        by=by,
        reason=reason,
        arguments_hash=arguments_hash,
        yes=yes,
        sign_with=_signing_key(key_env, key_id),
        groups=group or [],
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
    by: Annotated[
        str, typer.Option("--as", "--by", help="Who answers (default: your login).")
    ] = "",
    arguments_hash: ArgumentsHash = None,
    yes: AssumeYes = False,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Answer a pending question (interaction tool call) with a JSON value.

    Shows the question and asks to confirm, unless `--hash` or `--yes` is given.
    """
    try:
        answer = json.loads(value)
    except json.JSONDecodeError as exc:
        _fail(f"the answer is not valid JSON: {exc}", EXIT_BAD_INPUT)
    digest, _ = _digest_to_send(
        workflow_id,
        call_id,
        given=arguments_hash,
        yes=yes,
        action="Answer",
        interaction=True,
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    _on_conversation(
        workflow_id,
        lambda c: c.answer(
            workflow_id,
            call_id,
            answer,
            arguments_hash=digest,
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
    start: Annotated[
        int, typer.Option(min=0, help="Skip this many items (rows are numbered from 1).")
    ] = 0,
    limit: Annotated[
        int | None, typer.Option(min=0, help="Most items to show (default: all from --start).")
    ] = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show the conversation's transcript (messages, tool calls, tool outputs), every run's."""
    items = _on_conversation(
        workflow_id,
        lambda c: c.history(workflow_id, start=start, limit=limit),
        address=address,
        namespace=namespace,
        timeout=timeout,
    )
    if as_json:
        print(json.dumps([item.model_dump(mode="json") for item in items], indent=2))
    else:
        _out.print(render_transcript(items, skipped=start))


@app.command("follow")
def follow_command(
    workflow_id: WorkflowId,
    after: Annotated[
        int, typer.Option(help="Print events after this offset (default: from the first).")
    ] = -1,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Annotated[
        float, typer.Option(help="Stop after this many seconds (default: when it ends).")
    ] = 0,
) -> None:
    """Print the conversation's events as they happen, until it ends (durable_tools.events).

    Each line starts with the event's offset: `--after OFFSET` resumes after it.
    The model's text deltas continue one line as they arrive.
    """
    from durable_tools.worker.events_view import EventPrinter

    async def follow(conversations: Conversations) -> None:
        printer = EventPrinter()
        try:
            async for event in conversations.events(workflow_id, after=after):
                shown = event.model_dump_json() + "\n" if as_json else printer.feed(event)
                print(shown, end="", flush=True)
        finally:
            print(printer.close(), end="", flush=True)

    _on_conversation(
        workflow_id,
        follow,
        address=address,
        namespace=namespace,
        timeout=timeout or 10**9,
    )


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


@app.command("health")
def health_command(
    file: Annotated[
        Path,
        typer.Option(
            "--file", envvar="DURABLE_TOOLS_HEALTH_FILE", help="The worker's --health-file."
        ),
    ],
    max_age: Annotated[
        float, typer.Option(min=1, help="Seconds after which the file is stale.")
    ] = 30.0,
) -> None:
    """Exit 0 if the worker writing --file is alive (a container health check), else 1."""
    from durable_tools.worker.health import health_problem

    problem = health_problem(file, max_age)
    if problem is not None:
        _fail(problem)
    _out.print("healthy")


@app.command("check-upgrade")
def check_upgrade_command(
    query: Annotated[
        str | None,
        typer.Option(help="Visibility query (default: every running AgentWorkflow)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Most runs to replay.")] = 100,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds for the whole check.")
    ] = 300.0,
) -> None:
    """Replay running conversations against the code installed here; exit 1 if any would fail."""
    from durable_tools.worker.check_upgrade import DEFAULT_QUERY, check_upgrade

    async def main() -> list[Any]:
        client = await Client.connect(
            address, namespace=namespace, data_converter=_data_converter()
        )
        return await check_upgrade(client, query=query or DEFAULT_QUERY, limit=limit)

    verdicts = _run(main, address=address, namespace=namespace, timeout=timeout)
    failing = [v for v in verdicts if v.problem]
    for verdict in verdicts:
        mark = "✗" if verdict.problem else "✓"
        line = f"{mark} {verdict.workflow_id} (run {verdict.run_id})"
        _out.print(
            escape(line + (f": {verdict.problem}" if verdict.problem else "")), soft_wrap=True
        )
    _out.print(
        f"{len(verdicts)} replayed, {len(failing)} would fail on this code"
        + (" (keep their old workers, or pin them: docs/operations.md)" if failing else "")
    )
    if failing:
        raise typer.Exit(EXIT_FAILURE)


@app.command("codec-server")
def codec_server_command(
    codec: Annotated[
        str | None,
        typer.Argument(help="The payload codec 'module:attr' (default: --codec)."),
    ] = None,
    ip: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8081,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="Origin allowed to call it: the Temporal Web UI's (default "
            "http://localhost:8233 and http://127.0.0.1:8233). Repeatable.",
        ),
    ] = None,
) -> None:
    """Serve Temporal's codec server protocol (POST /encode, /decode) for the Web UI."""
    require_extra("durable-tools codec-server", "inbox")  # starlette and uvicorn
    from durable_tools.worker.codec_server import DEFAULT_ORIGINS, serve

    spec = codec or _globals.codec_spec
    if not spec:
        _fail("give the codec: durable-tools codec-server module:attr", EXIT_BAD_INPUT)
    try:
        loaded = load_codec(spec)
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    origins = tuple(cors_origin) if cors_origin else DEFAULT_ORIGINS

    def ready(url: str) -> None:
        _out.print(f"Codec server: {url} (allowing {', '.join(origins)})", soft_wrap=True)
        _out.print("In the Web UI: Settings → Codec Server → this URL")

    _run(
        lambda: serve(loaded, host=ip, port=port, origins=origins, on_ready=ready),
        address=f"{ip}:{port}",
        namespace="",
        timeout=_FOREVER,
    )


if __name__ == "__main__":
    app()
