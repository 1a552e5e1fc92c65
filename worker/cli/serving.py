"""Commands for operators serving conversations: `worker`, `dev`, `dev-server`.

They load what a worker serves (`--app`, `--toolkit`, `--mcp-config`) and
run until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from durable_tools.errors import ConfigurationError
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage
from durable_tools.worker.extras import missing_extra

if TYPE_CHECKING:
    from temporalio.worker import Worker

    from durable_tools.worker.runner import App

from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_INBOX_PORT,
    DEFAULT_NAMESPACE,
    DEFAULT_TASK_QUEUE,
    DEV_DIRECTORY,
    DEV_STORAGE_DIRECTORY,
    EXIT_BAD_INPUT,
    FOREVER,
    Address,
    CliError,
    Connection,
    Namespace,
    TaskQueue,
    cli_codec,
    cli_options,
    cli_storage,
    fail,
    out,
    run_reported,
    stop_on_signals,
    whoami,
)


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
        stop = stop_on_signals()
        try:
            async with server:
                out.print(f"Temporal dev server on [bold]{server.address}[/]")
                if server.ui_url:
                    out.print(f"Web UI: {server.ui_url}")
                out.print(
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
        out.print("dev server stopped")

    run_reported(main, address=f"{ip}:{port}", namespace="default", timeout=FOREVER)


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
        help="A TOML file of MCP servers (\\[servers.NAME] tables); "
        "their tools join every toolkit.",
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
        fail(str(exc), EXIT_BAD_INPUT)


def _describe_served(served: App, *, allow_offline_models: bool) -> str:
    models = ", ".join(served.models) or "none registered (model specs are resolved by name)"
    mcp = ", ".join(server.name for server in served.mcp_servers) or "none"
    agents = ", ".join(served.agents) or "none declared (any configuration a client sends runs)"
    offline = "allowed" if allow_offline_models else "refused"
    return (
        f"agents: {agents}; toolkits: {', '.join(served.toolkits)}; models: {models}; "
        f"offline models (test, scripted:FILE): {offline}; MCP servers: {mcp}"
    )


def _run_served(
    served: App,
    address: str,
    namespace: str,
    task_queue: str,
    *,
    storage: PayloadStorage | None,
    scripts_dir: Path | None,
    **options: Any,
) -> Coroutine[Any, Any, None]:
    """`run_worker` for what `served` declares, with the `--codec` and `--scripts-dir` given.

    The codec is loaded here, at the call (a bad `--codec` fails before the
    worker task starts).

    Args:
        served: The loaded app: toolkits, models, MCP servers, deps, agents.
        address: Temporal frontend host:port.
        namespace: Temporal namespace.
        task_queue: The task queue to poll.
        storage: External storage (the options', else the app's).
        scripts_dir: `--scripts-dir`, else the app's.
        **options: `run_worker`'s other keyword arguments.

    Returns:
        The `run_worker(...)` coroutine.
    """
    from durable_tools.worker.runner import run_worker

    return run_worker(
        address,
        namespace,
        task_queue,
        served.toolkits,
        served.models,
        mcp_servers=served.mcp_servers,
        deps=served.deps,
        payload_codec=cli_codec() or served.payload_codec,
        storage=storage,
        agents=served.agents,
        context_strategies=served.context_strategies,
        tool_threads=served.tool_threads,
        policies=served.policies,
        scripts_dir=scripts_dir or served.scripts_dir,
        **options,
    )


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
    max_cached_conversations: Annotated[
        int,
        typer.Option(
            min=1,
            help="Most conversations kept in memory between turns (the workflow cache "
            "and the activities' memories; see docs/operations.md).",
        ),
    ] = 1000,
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
            help="Check at start that the namespace has DurableToolsPendingCount, "
            "DurableToolsPendingKinds and DurableToolsTeam; --no-search-attributes: run without "
            "them "
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
    allocator: Annotated[
        str,
        typer.Option(
            envvar="DURABLE_TOOLS_ALLOCATOR",
            help="auto: run on jemalloc when the system has it (it hands memory back after "
            "bursts); jemalloc: require it; system: the interpreter's own (docs/operations.md).",
        ),
    ] = "auto",
) -> None:
    """Run a worker for toolkits (and an app) until SIGTERM or Ctrl-C (graceful shutdown)."""
    from temporalio.common import WorkerDeploymentVersion

    from durable_tools.activities.decision_activities import decision_keys_from_environment
    from durable_tools.worker import allocator as allocators
    from durable_tools.worker.heap_return import freeze_startup_objects

    if allocator not in allocators.CHOICES:
        fail(f"--allocator must be auto, jemalloc or system, not {allocator!r}", EXIT_BAD_INPUT)
    try:
        if allocators.is_command():  # never replace a process that called the CLI in-process
            allocators.reexec(allocator)  # pyright: ignore[reportArgumentType]
    except allocators.AllocatorUnavailable as exc:
        fail(f"--allocator jemalloc: {exc}", EXIT_BAD_INPUT)

    if (deployment is None) != (build_id is None):
        fail("give --deployment and --build-id together (or neither)", EXIT_BAD_INPUT)
    version = (
        WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id)
        if deployment is not None and build_id is not None
        else None
    )
    served = _served(app_spec, toolkit, mcp_config)
    offline = allow_offline_models or served.allow_offline_models

    storage = cli_storage() or served.storage
    try:
        keys = (
            served.decision_keys
            if served.decision_keys is not None
            else decision_keys_from_environment()
        )
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    checked = (
        f"decisions checked with key(s) {', '.join(sorted(keys))}"
        if keys
        else "no decision keys (a call that needs a signed decision cannot be decided)"
    )

    def ready(worker: Worker) -> None:
        from durable_tools.worker.runner import sizing

        versioned = f", version {version.deployment_name}:{version.build_id}" if version else ""
        out.print(
            f"worker polling task queue [bold]{escape(task_queue)}[/] on {escape(address)} "
            f"(namespace {escape(namespace)}{escape(versioned)}); "
            f"{escape(_describe_served(served, allow_offline_models=offline))}; "
            f"{escape(checked)}; {escape(sizing(worker))}; {escape(allocators.describe())}",
            soft_wrap=True,
        )
        if storage is not None:
            out.print(f"external storage: {escape(storage.describe())}", soft_wrap=True)
        if allocators.is_command():  # a process that is only this worker (heap_return.py)
            frozen = freeze_startup_objects()
            out.print(f"garbage collector: {frozen:,} startup objects frozen", soft_wrap=True)

    async def main() -> None:
        await _run_served(
            served,
            address,
            namespace,
            task_queue,
            storage=storage,
            scripts_dir=scripts_dir,
            decision_keys=keys,
            graceful_shutdown_timeout=graceful_shutdown,
            max_concurrent_activities=max_concurrent_activities,
            max_cached_conversations=max_cached_conversations,
            deployment=version,
            allow_offline_models=offline,
            on_ready=ready,
            search_attributes=search_attributes,
            health_file=health_file,
        )
        out.print("worker stopped")

    run_reported(main, address=address, namespace=namespace, timeout=FOREVER)


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

    served = _served(app_spec, toolkit, mcp_config)
    if (
        cli_options.storage_dir is None
        and cli_options.storage_s3_bucket is None
        and served.storage is None
    ):
        # On by default in development, beside the server's SQLite file.
        cli_options.storage_dir = db_filename.parent / "payloads"
    storage = cli_storage() or served.storage

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
        stop = stop_on_signals()
        try:
            async with server:
                out.print(f"Temporal frontend: [bold]{server.address}[/]", soft_wrap=True)
                out.print(f"Web UI: [bold]{server.ui_url}[/]", soft_wrap=True)
                # Before the worker: an inbox that cannot start (its port taken)
                # fails the command while nothing but the server runs. A worker
                # started first was left running against the stopped server and
                # `dev` never exited.
                inbox = await _dev_inbox(server.address, inbox_port, stop)
                worker = asyncio.create_task(
                    _run_served(
                        served,
                        server.address,
                        DEFAULT_NAMESPACE,
                        task_queue,
                        storage=storage,
                        scripts_dir=scripts_dir,
                        decision_keys=served.decision_keys,
                        graceful_shutdown_timeout=graceful_shutdown,
                        handle_signals=False,
                        stop=stop,
                        allow_offline_models=True,
                    )
                )
                out.print(
                    f"persistence: {escape(str(db_filename))}; worker on task queue "
                    f"{escape(task_queue)}; "
                    f"{escape(_describe_served(served, allow_offline_models=True))}",
                    soft_wrap=True,
                )
                if storage is not None:
                    out.print(f"external storage: {escape(storage.describe())}", soft_wrap=True)
                    if (
                        isinstance(storage.driver, LocalFileStorageDriver)
                        and DEV_STORAGE_DIRECTORY.resolve() != storage.driver.root.resolve()
                    ):
                        out.print(
                            f"other commands need: --storage-dir "
                            f"{escape(shlex.quote(str(storage.driver.root)))}",
                            soft_wrap=True,
                        )
                local = port == 7233 and ip in ("127.0.0.1", "localhost", "0.0.0.0")
                hint = "" if local else f" --address {server.address}"
                if served.agents:  # a client must name one of them
                    hint += f" --agent {next(iter(served.agents))}"
                out.print(
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
                asyncio.get_running_loop().remove_signal_handler(sig)
        out.print("worker and dev server stopped")

    run_reported(main, address=f"{ip}:{port}", namespace=DEFAULT_NAMESPACE, timeout=FOREVER)


async def _dev_inbox(address: str, port: int, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """Serve the inbox in dev mode beside the dev server; print its URL once it listens.

    Without the `inbox` extra, print one line naming it instead: the server
    and the worker run on.
    """
    if port == 0:
        return None
    missing = missing_extra("the approval inbox", "inbox")
    if missing is not None:
        out.print(f"Inbox: not started; {missing}", soft_wrap=True, markup=False)
        return None
    from durable_tools.worker.inbox import build_auth, serve_inbox

    conversations = await Connection(address, DEFAULT_NAMESPACE, FOREVER).conversations()
    ready = asyncio.Event()

    def listening(url: str) -> None:
        out.print(f"Inbox: {url}", soft_wrap=True, markup=False)
        ready.set()

    task = asyncio.create_task(
        serve_inbox(
            conversations,
            build_auth(host="127.0.0.1", dev_user=whoami() or "dev"),
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
