"""What every `durable-tools` command shares: the app, global and connection options, failures.

The typer app and its global options (`--codec`, external storage), the
options every audience repeats (`--address`, `--namespace`, `--task-queue`,
`--timeout`, `--json`), the console commands print on, and `run_reported`:
how a command connects to Temporal and turns every failure into one line on
stderr with its exit code.
"""

from __future__ import annotations

import asyncio
import getpass
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
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
from durable_tools.errors import (
    ConfigurationError,
    DecisionRejected,
    ResumeRejected,
    RetryRejected,
    StorageError,
)
from durable_tools.storage import PayloadStorage, storage_from_options
from durable_tools.worker.exits import exit_process

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
        except ConfigurationError as exc:  # e.g. MissingExtra before a command's `run_reported`
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

out = Console(highlight=False)


@dataclass
class _Globals:
    codec_spec: str | None = None
    storage_dir: Path | None = None
    storage_s3_bucket: str | None = None
    storage_threshold: int | None = None
    max_payload_bytes: int | None = None
    storage: PayloadStorage | None = None


cli_options = _Globals()


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
    cli_options.codec_spec = codec
    cli_options.storage_dir = storage_dir
    cli_options.storage_s3_bucket = storage_s3_bucket
    cli_options.storage_threshold = storage_threshold
    cli_options.max_payload_bytes = max_payload_bytes
    cli_options.storage = None  # built on first use from these options


def cli_codec() -> PayloadCodec | None:
    """The `--codec` payload codec, loaded on first use (ConfigurationError if bad)."""
    return load_codec(cli_options.codec_spec) if cli_options.codec_spec else None


def cli_storage() -> PayloadStorage | None:
    """The `--storage-dir` / `--storage-s3-bucket` external storage, built once (or `None`).

    Without either option, `DEV_STORAGE_DIRECTORY` when it exists: the storage
    `durable-tools dev` started in this directory uses.
    """
    given = cli_options.storage_dir is not None or cli_options.storage_s3_bucket is not None
    if not given and DEV_STORAGE_DIRECTORY.is_dir():
        cli_options.storage_dir = DEV_STORAGE_DIRECTORY
    if cli_options.storage is None:
        cli_options.storage = storage_from_options(
            directory=cli_options.storage_dir,
            s3_bucket=cli_options.storage_s3_bucket,
            threshold=cli_options.storage_threshold,
            max_payload_bytes=cli_options.max_payload_bytes,
        )
    return cli_options.storage


def cli_data_converter() -> DataConverter:
    """The data converter of every client the CLI connects: codec and storage options."""
    return data_converter(cli_codec(), storage=cli_storage())


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

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "agents"
DEFAULT_TIMEOUT = 15.0
DEFAULT_INBOX_PORT = 8234
"""Port of the approval inbox (`durable-tools inbox`, `durable-tools dev`)."""
FOREVER = 100 * 365 * 86400.0  # long-running commands: bounded only by a signal


def whoami() -> str:
    """The login name, or "" where there is none (a container)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in a container
        return ""


# ------------------------------------------------------------------ errors


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print `error: MESSAGE` on one line of stderr and exit with `code`."""
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


def run_reported(
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
        fail(str(exc), exc.code)
    except (DecisionRejected, ResumeRejected, RetryRejected) as exc:
        fail(f"rejected: {exc}")
    except TimeoutError:
        fail(f"no answer within {timeout:g} s from Temporal at {address} ({waiting_for})")
    except RPCError as exc:
        fail(_rpc_message(exc, conversation=conversation, address=address, namespace=namespace))
    except WorkflowUpdateFailedError as exc:
        fail(f"the update failed: {exc.cause or exc}")
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
        fail(f"the query on {conversation} failed: {exc}")
    except WorkflowFailureError as exc:
        fail(f"{conversation} failed: {exc.cause or exc}")
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except StorageError as exc:
        fail(str(exc))
    except RuntimeError as exc:
        if "Failed client connect" in str(exc):
            fail(
                f"cannot connect to Temporal at {address} ({_connect_problem(exc)}); "
                "start one with `durable-tools dev` or pass --address"
            )
        if "TMPRL1105" in str(exc):  # the SDK's "external storage is not configured"
            fail(
                f"{conversation} has payloads in external storage: give the worker's "
                "--storage-dir or --storage-s3-bucket (or DURABLE_TOOLS_STORAGE_DIR)"
            )
        fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as exc:
        fail(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Connection:
    """Where a command reaches Temporal and how long it waits: its connection options.

    Attributes:
        address: `--address`, the Temporal frontend host:port.
        namespace: `--namespace`.
        timeout: `--timeout`, seconds for the whole command.
    """

    address: str
    namespace: str
    timeout: float

    def run(self, main: Callable[[], Awaitable[T]], *, workflow_id: str | None = None) -> T:
        """`run_reported(main)` on this connection: bounded, failures as one line."""
        return run_reported(
            main,
            address=self.address,
            namespace=self.namespace,
            timeout=self.timeout,
            workflow_id=workflow_id,
        )

    def on(self, workflow_id: str, use: Callable[[Conversations], Awaitable[T]]) -> T:
        """Connect, run `use(conversations)` for one conversation, failures as one line."""

        async def main() -> T:
            return await use(await self.conversations())

        return self.run(main, workflow_id=workflow_id)

    async def client(self) -> Client:
        """A client of the namespace, with the CLI's data converter (codec, storage)."""
        return await Client.connect(
            self.address, namespace=self.namespace, data_converter=cli_data_converter()
        )

    async def conversations(self, task_queue: str = DEFAULT_TASK_QUEUE) -> Conversations:
        """`Conversations` on `task_queue`, connected with the CLI's data converter."""
        return Conversations(await self.client(), task_queue=task_queue)


def stop_on_signals() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets, by handlers on the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


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


DEV_DIRECTORY = Path(".durable-tools")
"""Where `durable-tools dev` keeps its SQLite file and the server's log."""

DEV_STORAGE_DIRECTORY = DEV_DIRECTORY / "payloads"
"""Where `durable-tools dev` stores large payloads by default; the other commands
use it when it exists and no `--storage-dir` / `--storage-s3-bucket` is given."""
