"""Running a durable-tools worker: the run loop (the application is `worker.app`).

`run_worker` connects with `DurableToolsPlugin` (which registers
`AgentWorkflow`, the `model.turn` and `tool.<name>` activities, the pydantic
data converter and the sandbox pass-through modules) and polls one task queue
until it is cancelled or the process receives SIGTERM or SIGINT; it then shuts
down gracefully: no new tasks are taken, and running tool activities get
`graceful_shutdown_timeout` seconds to finish before they are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Unpack

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerDeploymentConfig

from durable_tools.codec import data_converter
from durable_tools.models.base import Model
from durable_tools.toolkit import Toolkit
from durable_tools.worker.app import App, AppOptions, app_of, load_app
from durable_tools.worker.health import keep_fresh
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.worker.telemetry import configure_telemetry

__all__ = [
    "DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT",
    "DEFAULT_MAX_CACHED_CONVERSATIONS",
    "App",
    "load_app",
    "run_worker",
    "sizing",
]

DEFAULT_MAX_CACHED_CONVERSATIONS: int = 1000
"""Conversations' runs a worker keeps in memory between turns (the SDK's default)."""

DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT: float = 30.0
"""Seconds running activities may finish after a shutdown begins (default 30).

Keep Kubernetes' `terminationGracePeriodSeconds` above it (see
`deploy/k8s/worker-deployment.yaml`), or the pod is killed mid-activity and
those calls are retried on another worker.
"""


async def run_worker(
    client_target: str,
    namespace: str,
    task_queue: str,
    toolkits: Mapping[str, Toolkit] | None = None,
    models: Mapping[str, Model] | None = None,
    *,
    app: App | None = None,
    deployment: WorkerDeploymentVersion | None = None,
    graceful_shutdown_timeout: float = DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT,
    max_concurrent_activities: int | None = None,
    max_cached_conversations: int = DEFAULT_MAX_CACHED_CONVERSATIONS,
    handle_signals: bool = True,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[Worker], None] | None = None,
    health_file: Path | None = None,
    search_attributes: bool = True,
    **options: Unpack[AppOptions],
) -> None:
    """Connect to Temporal and run a durable-tools worker until told to stop.

    `run_worker(address, namespace, task_queue, app=app)` serves an `App`;
    `run_worker(address, namespace, task_queue, toolkits, models, agents=...,
    ...)` builds one from `App`'s fields given as arguments (documented on
    `App`), a convenience for the same.

    Args:
        client_target: Temporal frontend address, e.g. `"localhost:7233"`.
        namespace: Temporal namespace, e.g. `"default"`.
        task_queue: Task queue conversations are started on (`Conversations(task_queue=...)`).
        toolkits: `App.toolkits`, instead of `app`.
        models: `App.models`, instead of `app`.
        app: What the worker serves (see `App`; its `payload_codec` and
            `storage` are set on the client's data converter, and the
            storage is closed when the worker stops). `None` (default): the
            `App` of `toolkits`, `models` and `**options`.
        deployment: The Worker Deployment version this worker serves
            (`WorkerDeploymentVersion(deployment_name=..., build_id=...)`);
            conversations are pinned to the version they start on and move to
            the current version at their next turn boundary. `None` (default):
            an unversioned worker. See docs/operations.md, "Upgrades".
        graceful_shutdown_timeout: Seconds running activities may finish once
            shutdown begins, before they are cancelled (default 30).
        max_concurrent_activities: Most activities this worker runs at once
            (`None`: the SDK's default).
        max_cached_conversations: Most conversations' runs kept in memory
            between turns (the SDK's `max_cached_workflows`; default 1,000),
            and the bound of the activities' per-conversation memories (see
            docs/operations.md, "Sizing a worker").
        handle_signals: Stop on SIGTERM and SIGINT (only possible on the main
            thread's event loop; ignored elsewhere).
        stop: Set it to stop the worker (an alternative to cancelling the task).
        on_ready: Called with the worker once its startup checks passed and
            its MCP servers and dependencies are up (polling starts then).
        health_file: A file kept fresh while the worker runs, for container
            health checks (`durable_tools.worker.health`); default none.
        search_attributes: Check at start that the namespace has the search
            attributes conversations upsert (`SEARCH_ATTRIBUTES`), and fail if
            not (default True; the plugin's check, `DurableToolsPlugin.run_worker`).
            False: no check, and conversations this worker runs first make no
            upserts, on any worker that replays them
            (`DurableToolsPlugin(search_attributes=False)`).
        **options: `App`'s other fields (`mcp_servers`, `deps`, `agents`,
            `payload_codec`, `storage`, ...: `AppOptions`), instead of `app`.

    With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the worker exports its spans, its
    metrics and Temporal's SDK metrics over OTLP (`configure_telemetry`,
    docs/observability.md); without it, nothing.

    Raises:
        TypeError: `app` and any of `App`'s fields were both given.
        ConfigurationError: The app is wrong (see `App`, `DurableToolsPlugin`).
        ConfigurationError: A search attribute is missing or has another
            type; the one-line message holds the command that registers it.
        ConfigurationError: `OTEL_EXPORTER_OTLP_ENDPOINT` is set and its
            exporter is not installed (`MissingExtra`, the `otel` extra).
        RuntimeError: The client could not connect (`Failed client connect: ...`),
            or the worker failed (e.g. its validation at startup).
        temporalio.service.RPCError: The namespace does not exist (`NOT_FOUND`),
            or another server-side error at startup.
    """
    telemetry = configure_telemetry()
    served = app_of(app, toolkits, models, options, caller="run_worker")
    plugin = DurableToolsPlugin(served, search_attributes=search_attributes)
    client = await Client.connect(
        client_target,
        namespace=namespace,
        data_converter=data_converter(served.payload_codec, storage=served.storage),
        plugins=[plugin],
        runtime=telemetry.runtime if telemetry is not None else None,
    )
    async with contextlib.AsyncExitStack() as stack:
        if served.storage is not None:
            # The S3 client, once the worker stops.
            stack.push_async_callback(served.storage.aclose)
        await stack.enter_async_context(
            telemetry.metrics() if telemetry is not None else contextlib.nullcontext()
        )
        await _serve(
            client,
            namespace=namespace,
            task_queue=task_queue,
            deployment=deployment,
            graceful_shutdown_timeout=graceful_shutdown_timeout,
            max_concurrent_activities=max_concurrent_activities,
            max_cached_conversations=max_cached_conversations,
            handle_signals=handle_signals,
            stop=stop,
            on_ready=on_ready,
            health_file=health_file,
        )


async def _serve(
    client: Client,
    *,
    namespace: str,
    task_queue: str,
    deployment: WorkerDeploymentVersion | None,
    graceful_shutdown_timeout: float,
    max_concurrent_activities: int | None,
    max_cached_conversations: int,
    handle_signals: bool,
    stop: asyncio.Event | None,
    on_ready: Callable[[Worker], None] | None,
    health_file: Path | None,
) -> None:
    # Fail with the server's NOT_FOUND before the worker starts polling a
    # namespace that does not exist (the worker would only log it).
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
    # The search attribute check is the plugin's (DurableToolsPlugin.run_worker).
    worker = Worker(
        client,
        task_queue=task_queue,
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_timeout),
        max_concurrent_activities=max_concurrent_activities,
        max_cached_workflows=max_cached_conversations,
        deployment_config=deployment_config(deployment),
        plugins=[_OnRun(on_ready)] if on_ready is not None else [],
    )
    stopping = stop or asyncio.Event()
    installed = _install_signal_handlers(stopping.set) if handle_signals else []
    try:
        running = asyncio.create_task(worker.run())
        stopped = asyncio.create_task(stopping.wait())
        fresh = asyncio.create_task(keep_fresh(health_file)) if health_file else None
        try:
            await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if fresh is not None:
                fresh.cancel()
            if not running.done():
                # Graceful: stop polling, let running activities finish (bounded
                # by graceful_shutdown_timeout), then return.
                await asyncio.shield(worker.shutdown())
            await running  # re-raises a fatal worker error
    finally:
        loop = asyncio.get_running_loop()
        for sig in installed:
            loop.remove_signal_handler(sig)


class _OnRun(SimplePlugin):
    """Calls `on_ready` when the client's plugins let the worker run (their checks passed).

    A worker's own plugins run inside its client's (`Worker.run` chains them
    in order), so this runs after `DurableToolsPlugin`'s checks and run context.
    """

    def __init__(self, on_ready: Callable[[Worker], None]) -> None:
        super().__init__("durable-tools-on-ready")  # pyright: ignore[reportUnknownMemberType]
        self._on_ready = on_ready

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Call `on_ready`, then run the worker."""
        self._on_ready(worker)
        await next(worker)


def deployment_config(version: WorkerDeploymentVersion | None) -> WorkerDeploymentConfig | None:
    """The worker's versioning settings for `version` (`None`: unversioned).

    Conversations default to `PINNED` (also declared on `AgentWorkflow`).
    """
    if version is None:
        return None
    return WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def _install_signal_handlers(callback: Callable[[], None]) -> list[signal.Signals]:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, callback)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or a platform without signal handlers
        installed.append(sig)
    return installed


def sizing(worker: Worker) -> str:
    """What a worker is sized for, one line (its startup line ends with it).

    The SDK's workflow cache (`max_cached_workflows`) bounds how many
    conversations it keeps in memory between turns; the activities' own
    per-conversation memories are bounded by the same number
    (`DurableToolsPlugin.configure_worker`). The slot counts are the SDK's
    (`None` in the configuration: its default). See docs/operations.md,
    "Sizing a worker".

    Returns:
        E.g. `"sized for 1000 cached conversations, 100 activity slots, 100
        workflow task slots"`.
    """
    config = worker.config()
    tuner = config.get("tuner")  # pyright: ignore[reportUnknownMemberType]
    if tuner is not None:
        slots = "slots set by a tuner"
    else:
        activities = config.get("max_concurrent_activities") or _SDK_DEFAULT_SLOTS  # pyright: ignore[reportUnknownMemberType]
        tasks = config.get("max_concurrent_workflow_tasks") or _SDK_DEFAULT_SLOTS  # pyright: ignore[reportUnknownMemberType]
        slots = f"{activities} activity slots, {tasks} workflow task slots"
    cached = config.get("max_cached_workflows")  # pyright: ignore[reportUnknownMemberType]
    return f"sized for {cached} cached conversations, {slots}"


_SDK_DEFAULT_SLOTS = 100
"""temporalio's default for `max_concurrent_activities` and `max_concurrent_workflow_tasks`."""
