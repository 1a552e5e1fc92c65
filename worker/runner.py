"""Running a durable-tools worker: the application object and the run loop.

An *application* is any Python object with two mappings, `toolkits` and
`models`, found by a `"module:attribute"` spec (as `uvicorn` finds an ASGI app):

```python
# myapp.py
app = App(toolkits={"support": kit}, models={"gpt": adapter})
```

```sh
durable-tools worker --app myapp:app --address localhost:7233 --task-queue agents
```

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
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import cast

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.converter import PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerDeploymentConfig

from durable_tools.agents import Agent, check_agents
from durable_tools.codec import data_converter
from durable_tools.context import ContextStrategyFunction, check_policy
from durable_tools.errors import ConfigurationError
from durable_tools.mcp.config import McpServerConfig
from durable_tools.models.base import Model
from durable_tools.storage import PayloadStorage
from durable_tools.toolkit import Toolkit
from durable_tools.worker.health import keep_fresh
from durable_tools.worker.plugin import DepsFactory, DurableToolsPlugin
from durable_tools.worker.telemetry import configure_telemetry

__all__ = ["DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT", "App", "load_app", "run_worker"]

DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT: float = 30.0
"""Seconds running activities may finish after a shutdown begins (default 30).

Keep Kubernetes' `terminationGracePeriodSeconds` above it (see
`deploy/k8s/worker-deployment.yaml`), or the pod is killed mid-activity and
those calls are retried on another worker.
"""


@dataclass(frozen=True, kw_only=True)
class App:
    """What a worker serves: toolkits, model adapters and agents, by name.

    Clients start conversations with a declared agent by its name
    (`Conversations.start(id, agent="support", variables=...)`); a worker
    that declares no agents runs any configuration a client sends
    (`AgentConfig(model="gpt", toolkit="support")`): the development mode.

    Attributes:
        toolkits: Toolkits by name.
        models: Model adapters by name (`await adapter(request)` returns an
            `AssistantMessage`).
        mcp_servers: MCP servers whose tools join every toolkit (default none).
        deps: A factory of the tools' dependencies (database pools, HTTP
            clients), called once when a worker starts; tools receive its
            result as `ToolContext.deps` (annotate `ctx: ToolContext[MyDeps]`).
            The factory may return the object, an awaitable of it, or an
            async context manager entered for the worker's lifetime and exited
            at shutdown (e.g. an `@asynccontextmanager` function that opens and
            closes a pool). Default none (`ctx.deps` is `None`).
        payload_codec: A Temporal `PayloadCodec` (e.g. encryption) for every
            payload the worker writes and reads; clients of these
            conversations need the same codec (`durable_tools.codec`).
        agents: The agents clients choose by name, each with its model,
            instructions, toolkit, settings and what a client may override
            (`durable_tools.agents.Agent`). With agents declared, a
            conversation naming any other agent, or asking for an override
            its agent does not allow, fails its model turn (state
            `model_failed`). None (default): development mode, any
            configuration a client sends runs.
        allow_offline_models: Let conversations name the offline models
            `test` (calls every tool with generated arguments) and
            `scripted:FILE` when they are not registered in `models`.
            Default False: a production worker refuses them;
            `durable-tools dev` and the demo allow them.
        scripts_dir: The directory `scripted:FILE` paths are read under; a
            path outside it (absolute, `..`, a symlink out) is refused.
            `None` (default): the worker's working directory.
        decision_keys: HMAC keys by key id that signed decisions are checked
            with (several during a rotation); `None` (default): those in
            `DURABLE_TOOLS_DECISION_KEYS` (`k1:BASE64,k2:BASE64`). Held by the
            worker, never recorded in history (docs/approvals.md, "Trust model").
        storage: External storage for payloads over its threshold (tool
            results and arguments up to its `max_payload_bytes`, default
            64 MiB; `durable_tools.storage`). Every worker and client of the
            conversations needs the same storage. `None` (default): payloads
            stay in history, limited by Temporal's 2 MiB.
        context_strategies: Custom context strategies by the name an agent's
            context policy gives (`CustomStrategy(name=...)`; see
            docs/context.md). Default none.
        tool_threads: Most sync tool calls running at once in the worker's
            own thread pool (`durable_tools.tool_threads`). `None` (default):
            the worker's activity slots (`max_concurrent_activities`, 100 by
            default).

    Example:
        ```python
        @asynccontextmanager
        async def shop_deps() -> AsyncIterator[ShopDeps]:
            async with httpx.AsyncClient(base_url="https://shop.internal") as http:
                yield ShopDeps(http=http)

        app = App(
            toolkits={"shop": kit},
            deps=shop_deps,
            agents={"support": Agent(model="openai:gpt-4o", toolkit="shop",
                                     instructions="Help {customer_name}.",
                                     allow=AgentOverrides(variables=["customer_name"]))},
        )
        ```

    Raises:
        ConfigurationError: An agent names a toolkit the app lacks, an
            offline model while `allow_offline_models` is False, or a custom
            context strategy not in `context_strategies`.
    """

    toolkits: Mapping[str, Toolkit] = field(default_factory=dict[str, Toolkit])
    models: Mapping[str, Model] = field(default_factory=dict[str, Model])
    mcp_servers: Sequence[McpServerConfig] = ()
    deps: DepsFactory | None = None
    payload_codec: PayloadCodec | None = None
    agents: Mapping[str, Agent] = field(default_factory=dict[str, Agent])
    allow_offline_models: bool = False
    scripts_dir: str | os.PathLike[str] | None = None

    decision_keys: Mapping[str, bytes] | None = None
    storage: PayloadStorage | None = None
    context_strategies: Mapping[str, ContextStrategyFunction] = field(
        default_factory=dict[str, ContextStrategyFunction]
    )
    tool_threads: int | None = None

    def __post_init__(self) -> None:
        """Check the agents against the toolkits and models (see `check_agents`)."""
        check_agents(
            self.agents,
            toolkits=self.toolkits,
            models=self.models,
            allow_offline_models=self.allow_offline_models,
        )
        for name, agent in self.agents.items():
            for policy in (agent.context, *agent.allow.contexts):
                check_policy(policy, self.context_strategies, f"agent {name!r}")


def load_app(spec: str, *, app_dir: str | None = ".") -> App:
    """Import an application from a `"module:attribute"` spec.

    Args:
        spec: E.g. `"examples.support:app"`; the attribute may be dotted
            (`"pkg.mod:container.app"`).
        app_dir: Directory put first on `sys.path` before importing (default
            the current directory, so a checkout works without installing);
            `None` leaves `sys.path` alone.

    Returns:
        The `App`. Any object with `toolkits` and `models` mappings is
        accepted and copied into an `App`.

    Raises:
        ConfigurationError: The spec is malformed, the module or attribute
            does not exist, the object is not an application, or its agents
            do not fit its toolkits and models (see `App`).
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"invalid app spec {spec!r}: use 'module:attribute', e.g. 'examples.support:app'"
        )
    if app_dir is not None:
        path = os.path.abspath(app_dir)
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        found: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigurationError(
                f"cannot import module {module_name!r} of app spec {spec!r}: {exc}"
            ) from exc
        raise  # the module exists but one of its own imports failed: show the real error
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attribute!r} (app spec {spec!r})"
            ) from None
    if isinstance(found, App):
        return found
    toolkits: object = getattr(found, "toolkits", None)
    models: object = getattr(found, "models", None)
    if not isinstance(toolkits, Mapping) or not isinstance(models, Mapping):
        raise ConfigurationError(
            f"{spec!r} is a {type(found).__name__}, not an application: it needs `toolkits` "
            "and `models` mappings, e.g. App(toolkits={'support': kit}, models={'gpt': model})"
        )
    kits = {str(name): kit for name, kit in cast(Mapping[object, object], toolkits).items()}
    adapters = {str(name): model for name, model in cast(Mapping[object, object], models).items()}
    for name, kit in kits.items():
        if not isinstance(kit, Toolkit):
            raise ConfigurationError(
                f"toolkit {name!r} of {spec!r} is a {type(kit).__name__}, not a Toolkit"
            )
    for name, model in adapters.items():
        if not callable(model):
            raise ConfigurationError(
                f"model {name!r} of {spec!r} is a {type(model).__name__}, not a model adapter "
                "(an async callable taking a ModelRequest)"
            )
    deps: object = getattr(found, "deps", None)
    if deps is not None and not callable(deps):
        raise ConfigurationError(
            f"deps of {spec!r} is a {type(deps).__name__}, not a factory: give a function "
            "that returns the dependencies (or an async context manager of them)"
        )
    keys: object = getattr(found, "decision_keys", None)
    if keys is not None and not isinstance(keys, Mapping):
        raise ConfigurationError(
            f"decision_keys of {spec!r} is a {type(keys).__name__}, not a mapping of key id "
            "to bytes"
        )
    codec: object = getattr(found, "payload_codec", None)
    if codec is not None and not isinstance(codec, PayloadCodec):
        raise ConfigurationError(
            f"payload_codec of {spec!r} is a {type(codec).__name__}, not a PayloadCodec"
        )
    agents: object = getattr(found, "agents", None) or {}
    if not isinstance(agents, Mapping):
        raise ConfigurationError(
            f"agents of {spec!r} is a {type(agents).__name__}, not a mapping of name to Agent"
        )
    scripts_dir: object = getattr(found, "scripts_dir", None)
    storage: object = getattr(found, "storage", None)
    if storage is not None and not isinstance(storage, PayloadStorage):
        raise ConfigurationError(
            f"storage of {spec!r} is a {type(storage).__name__}, not a "
            "durable_tools.storage.PayloadStorage"
        )
    return App(
        toolkits=cast(dict[str, Toolkit], kits),
        models=cast(dict[str, Model], adapters),
        deps=cast(DepsFactory | None, deps),
        payload_codec=codec,
        agents={str(k): v for k, v in cast(Mapping[object, Agent], agents).items()},
        allow_offline_models=getattr(found, "allow_offline_models", False) is True,
        scripts_dir=cast(str | None, scripts_dir),
        decision_keys=cast(Mapping[str, bytes] | None, keys),
        storage=storage,
        context_strategies=_context_strategies(spec, getattr(found, "context_strategies", None)),
        tool_threads=_tool_threads(spec, getattr(found, "tool_threads", None)),
    )


def _tool_threads(spec: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"tool_threads of {spec!r} is {value!r}, not a positive int")
    return value


def _context_strategies(spec: str, value: object) -> dict[str, ContextStrategyFunction]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        callable(f) for f in cast(Mapping[object, object], value).values()
    ):
        raise ConfigurationError(
            f"context_strategies of {spec!r} is not a mapping of name to function"
        )
    return {str(k): v for k, v in cast(Mapping[object, ContextStrategyFunction], value).items()}


async def run_worker(
    client_target: str,
    namespace: str,
    task_queue: str,
    toolkits: Mapping[str, Toolkit],
    models: Mapping[str, Model],
    *,
    mcp_servers: Sequence[McpServerConfig] = (),
    deps: DepsFactory | None = None,
    decision_keys: Mapping[str, bytes] | None = None,
    payload_codec: PayloadCodec | None = None,
    deployment: WorkerDeploymentVersion | None = None,
    agents: Mapping[str, Agent] | None = None,
    allow_offline_models: bool = False,
    scripts_dir: str | os.PathLike[str] | None = None,
    graceful_shutdown_timeout: float = DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT,
    max_concurrent_activities: int | None = None,
    handle_signals: bool = True,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[Worker], None] | None = None,
    health_file: Path | None = None,
    search_attributes: bool = True,
    storage: PayloadStorage | None = None,
    context_strategies: Mapping[str, ContextStrategyFunction] | None = None,
    tool_threads: int | None = None,
) -> None:
    """Connect to Temporal and run a durable-tools worker until told to stop.

    Args:
        client_target: Temporal frontend address, e.g. `"localhost:7233"`.
        namespace: Temporal namespace, e.g. `"default"`.
        task_queue: Task queue conversations are started on (`Conversations(task_queue=...)`).
        toolkits: Toolkits by name.
        models: Model adapters by name.
        mcp_servers: MCP servers to connect at start; their tools join every
            toolkit (see `durable_tools.mcp`).
        deps: The tools' dependencies factory (see `App.deps`); built when
            the worker starts, closed when it stops.
        decision_keys: Keys that signed decisions are checked with (see
            `App.decision_keys`; default `DURABLE_TOOLS_DECISION_KEYS`).
        payload_codec: A payload codec (e.g. encryption) kept beside the
            pydantic payload converter (see `durable_tools.codec`).
        deployment: The Worker Deployment version this worker serves
            (`WorkerDeploymentVersion(deployment_name=..., build_id=...)`);
            conversations are pinned to the version they start on and move to
            the current version at their next turn boundary. `None` (default):
            an unversioned worker. See docs/operations.md, "Upgrades".
        agents: The agents clients choose by name (see `App.agents`); none
            (default): development mode.
        allow_offline_models: Allow the offline models `test` and
            `scripted:FILE` (default False; see `App.allow_offline_models`).
        scripts_dir: Where `scripted:FILE` paths are confined (default: the
            working directory).
        graceful_shutdown_timeout: Seconds running activities may finish once
            shutdown begins, before they are cancelled (default 30).
        max_concurrent_activities: Most activities this worker runs at once
            (`None`: the SDK's default).
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
        storage: External storage for large payloads (see `App.storage`);
            default none.
        context_strategies: Custom context strategies by name (see
            `App.context_strategies`); default none.
        tool_threads: Most sync tool calls at once (see `App.tool_threads`);
            default: `max_concurrent_activities`, else 100.

    With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the worker exports its spans, its
    metrics and Temporal's SDK metrics over OTLP (`configure_telemetry`,
    docs/observability.md); without it, nothing.

    Raises:
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
    plugin = DurableToolsPlugin(
        toolkits=toolkits,
        models=models,
        mcp_servers=mcp_servers,
        deps=deps,
        search_attributes=search_attributes,
        agents=agents,
        allow_offline_models=allow_offline_models,
        scripts_dir=scripts_dir,
        decision_keys=decision_keys,
        storage=storage,
        context_strategies=context_strategies,
        tool_threads=tool_threads,
    )
    client = await Client.connect(
        client_target,
        namespace=namespace,
        data_converter=data_converter(payload_codec, storage=storage),
        plugins=[plugin],
        runtime=telemetry.runtime if telemetry is not None else None,
    )
    async with contextlib.AsyncExitStack() as stack:
        if storage is not None:
            stack.push_async_callback(storage.aclose)  # the S3 client, once the worker stops
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
